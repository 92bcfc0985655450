"""The serving kind's dispatch decision as a Gymnasium environment (``hybridsched/serving-dispatch-v0``).

``import hybridsched.envs`` registers the id; then ``gymnasium.make("hybridsched/serving-dispatch-v0",
latency=..., workload=...)``.  docs/train-your-own-agent.md shows its settings.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
from gymnasium import spaces

from hybridsched.errors import HybridschedError
from hybridsched.kinds.serving.engine import (ELIGIBLE, N_OBS_PER_GROUP, DispatchRun, Trace, observation,
                                              trace_frames)
from hybridsched.kinds.serving.settings import SUB_BLOCKS, ServingSettings
from hybridsched.kinds.serving.workload import Requests, generate_stream, read_requests, to_requests

ENV_ID = "hybridsched/serving-dispatch-v0"
# conf/workload/serving.yaml's synthetic arrival process (its seed and split sizes aside)
DEFAULT_WORKLOAD: dict[str, Any] = {
    "arrival": "poisson", "load": 1.1, "request_size": 1,
    "mix": {"models": {"resnet18": 0.4, "resnet50": 0.4, "vit_b16": 0.2},
            "classes": {"interactive": 0.7, "batch": 0.3}, "backends": {"torch": 0.5, "onnx": 0.5},
            "precisions": {"fp32": 1.0}},
    "slo": {"rule": "factor", "interactive": 5.0, "batch": 50.0}}
DEFAULT_REQUESTS = 300  # requests per generated episode: small, so that an episode is quick
# per group (eligible, wait / SLO, slack / SLO, samples / max batch), then free lanes and free tokens
_GROUP_LOW, _GROUP_HIGH = (0.0, 0.0, -4.0, 0.0), (1.0, 4.0, 4.0, 1.0)


def _settings(settings: ServingSettings | dict[str, Any] | None) -> ServingSettings:
    if isinstance(settings, ServingSettings):
        return settings
    return ServingSettings.from_dict({k: v for k, v in (settings or {}).items() if k not in SUB_BLOCKS})


def _table(x: np.ndarray | str | Path | None, s: ServingSettings, what: str) -> np.ndarray:
    """A dense table lat[v, b] (s): given, a ``.npy`` file, or a long latency table's CSV."""
    from hybridsched.kinds.serving.latency import load_latency

    if x is None:
        return load_latency(s)[0]
    if isinstance(x, (str, Path)):
        p = Path(x)
        if p.suffix == ".npy":
            try:
                x = np.load(p)
            except FileNotFoundError:
                raise HybridschedError(f"{p}: not found (run train_rf, or set serving.predictor.use=table)") from None
        else:
            return load_latency(replace(s, latency_table=str(p)))[0]
    a = np.asarray(x, dtype=np.float64)
    if a.shape != (s.n_variants, s.max_batch + 1):
        raise HybridschedError(f"ServingDispatchEnv: {what} has shape {a.shape}, the settings need "
                               f"{(s.n_variants, s.max_batch + 1)} (variants x batch 0..max_batch)")
    return a


class ServingDispatchEnv(gym.Env):
    """The serving simulator's dispatch decision (``engine.py``): whenever a lane is free and
    some group's candidate batch has closed and fits the free token memory, the agent picks
    which group's (trimmed) batch starts on that lane.

    **Episode.**  One request stream to its end: ``requests`` (a :class:`Requests`, a request
    frame, or a file the generate stage wrote) in every episode, or, without it, ``n_requests``
    requests drawn from ``workload`` (the keys of ``conf/workload/serving.yaml``; default: its
    arrival process) with the env's RNG.  ``settings`` is the ``serving`` block (or
    :class:`ServingSettings`), ``latency`` the table as served (dense ``lat[v, b]`` in s, or
    a latency table CSV; default: the one the settings name, e.g. the profile stage's),
    ``pred_latency`` what the scheduler believes (default: ``latency``).  The service noise of
    each episode comes from the env's RNG, or, with ``noise_seed``, is the same every episode
    (the simulate stage's ``sim.seed``).  ``online_alpha`` and ``drop`` are the engine
    parameters a policy carries (the online correction; predictive admission).  ``reset(seed=
    ...)`` seeds the RNG.  Each step is one decision; instants where nothing eligible fits are
    passed over.  The episode terminates when every request is batched (or dropped) and every
    batch has ended; it is never truncated.

    **Observation, mask and action** (the serving DQN's, ``dqn.py``): a ``Box`` of shape
    ``(4 G + 2,)`` (float32, ``engine.observation``), per group (eligible, wait / SLO clipped to
    [0, 4], slack / SLO clipped to [-4, 4], samples / max batch), then the free-lane and
    free-token fractions.  ``Discrete(G)`` actions, one per group (model, backend, precision,
    SLO class); :meth:`action_masks` (sb3-contrib's MaskablePPO reads it) and
    ``info["action_mask"]`` give the eligible ones.  A masked-out action starts the first
    eligible group and sets ``info["action_valid"]`` to False.

    **Reward** (the serving DQN's): a batch earns its requests that met their SLO minus those
    that missed it, divided by ``reward_scale``; it is paid at the step after which the batch
    has ended (its end time can move until then under ``serving.contention: overlap``), the
    rest at the last step.  An episode's return is (met - missed) over the served requests
    divided by ``reward_scale`` (the DQN divides by its episode's mean requests per batch,
    known only at the end).

    ``info``: ``action_mask``, ``eligible``, ``time``, ``batches``; after a step
    ``action_valid``; at the end ``slo_attainment`` (met over all requests; dropped ones miss).
    :meth:`policy_action` gives the group a project serving policy (``FIFO()``,
    ``PriorityEDF()``, ...) picks now, so that driven by it the env gives ``simulate``'s
    schedule; :meth:`trace` is the episode's schedule as the engine's ``Trace``.
    """

    metadata = {"render_modes": []}

    def __init__(self, settings: ServingSettings | dict[str, Any] | None = None,
                 latency: np.ndarray | str | Path | None = None, pred_latency: np.ndarray | str | Path | None = None,
                 requests: Requests | pd.DataFrame | str | Path | None = None,
                 workload: dict[str, Any] | None = None, n_requests: int = DEFAULT_REQUESTS,
                 noise_seed: int | None = None, online_alpha: float = 0.0, drop: bool = False,
                 reward_scale: float = 1.0, render_mode: str | None = None) -> None:
        self.settings = s = _settings(settings)
        self.lat = _table(latency, s, "latency")
        self.pred = self.lat if pred_latency is None else _table(pred_latency, s, "pred_latency")
        if isinstance(requests, (str, Path)):
            requests = read_requests(requests, s)
        elif isinstance(requests, pd.DataFrame):
            requests = to_requests(requests, s, "ServingDispatchEnv requests")
        self._requests = requests
        self.workload = {**DEFAULT_WORKLOAD, **(workload or {})}
        if requests is None and int(n_requests) < 1:
            raise HybridschedError(f"ServingDispatchEnv: n_requests must be >= 1, got {n_requests}")
        if not 0.0 <= float(online_alpha) <= 1.0:
            raise HybridschedError(f"ServingDispatchEnv: online_alpha must be in [0, 1], got {online_alpha}")
        if not float(reward_scale) > 0:
            raise HybridschedError(f"ServingDispatchEnv: reward_scale must be > 0, got {reward_scale}")
        self.n_requests, self.noise_seed = int(n_requests), noise_seed
        self.online_alpha, self.drop, self.reward_scale = float(online_alpha), bool(drop), float(reward_scale)
        self.render_mode = render_mode
        G = s.n_groups
        self.n_groups = G
        low = np.array(list(_GROUP_LOW) * G + [0.0, 0.0], dtype=np.float32)
        high = np.array(list(_GROUP_HIGH) * G + [1.0, 1.0], dtype=np.float32)
        self._low, self._high = low, high
        self.observation_space = spaces.Box(low=low, high=high, dtype=np.float32)
        self.action_space = spaces.Discrete(G)
        self._obs = np.zeros(N_OBS_PER_GROUP * G + 2, dtype=np.float32)
        self._mask = np.zeros(G, dtype=np.bool_)
        self._run: DispatchRun | None = None
        self._done = False
        self._kernels: dict[int, tuple[Any, np.ndarray, np.ndarray]] = {}

    # --- the Gymnasium API --------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start an episode (class docstring); ``seed`` seeds the env's RNG."""
        super().reset(seed=seed)
        reqs = self._requests
        if reqs is None:
            df = generate_stream(self.workload, self.settings, self.n_requests,
                                 int(self.np_random.integers(2**31)), 0, self.lat)
            reqs = to_requests(df, self.settings, "ServingDispatchEnv episode")
        noise_seed = self.noise_seed if self.noise_seed is not None else int(self.np_random.integers(2**31))
        self.reqs = reqs
        self._run = DispatchRun(reqs, self.settings, self.lat, self.pred, noise_seed, self.online_alpha,
                                1.0 if self.drop else 0.0)
        self._lane_b = np.full(self.settings.lanes, -1, np.int64)  # the unpaid batch on each lane
        self._met = 0
        self._kernels = {}
        self._done = False
        return self._next(), self._info()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Start group ``action``'s batch, and run to the next decision."""
        run = self._run
        if run is None or self._done:
            raise RuntimeError("ServingDispatchEnv.step: call reset() first (the episode has ended)")
        a = int(action)
        valid = 0 <= a < self.n_groups and bool(self._mask[a])
        nb = run.start(a if valid else int(run.elig[0]))
        self._lane_b[run.lane] = nb
        obs = self._next()
        reward = self._pay()
        info = self._info()
        info["action_valid"] = valid
        return obs, reward, self._done, False, info

    def action_masks(self) -> np.ndarray:
        """The feasible actions now (a copy): sb3-contrib's MaskablePPO calls this."""
        return self._mask.copy()

    # --- heuristics in the env's terms ------------------------------------------------
    def policy_action(self, policy: Any) -> int:
        """The group a project serving policy (a ``ServingPolicy``: ``FIFO()``, ``Dynamic()``,
        ...) picks now: its kernel asked with the engine's own features.  ValueError when the
        policy's engine parameters (``online_alpha``, ``drop``) differ from the env's."""
        run = self._run
        if run is None or self._done:
            raise RuntimeError("ServingDispatchEnv.policy_action: no decision pending (reset() first)")
        drop = float(policy.drop) * float(getattr(policy, "drop_factor", 1.0))  # as engine_params
        if float(policy.online_alpha) != self.online_alpha or drop != float(self.drop):
            raise ValueError(f"policy {policy.name!r} runs with online_alpha {policy.online_alpha} and drop "
                             f"factor {drop:g}, the env with {self.online_alpha} and {float(self.drop):g}")
        if id(policy) not in self._kernels:  # once an episode: the DQN's kernel_data seeds its RNG
            kernel = policy.kernel
            pdata, params = policy.kernel_data(self.settings, np.nan_to_num(self.pred, nan=np.inf))
            self._kernels[id(policy)] = (getattr(kernel, "__func__", kernel), pdata, params)
        kernel, pdata, params = self._kernels[id(policy)]
        g = int(kernel(run.t, run.gs, run.elig, run.ne, pdata, params))
        return g if 0 <= g < self.n_groups and self._mask[g] else int(run.elig[0])

    def trace(self, name: str = "env") -> Trace:
        """The episode's schedule so far as the engine's ``Trace`` (requests not batched: batch -2)."""
        if self._run is None:
            raise RuntimeError("ServingDispatchEnv.trace: call reset() first")
        raw = self._run.raw()
        df, batches = trace_frames(self.reqs, name, raw)
        return Trace(name, df, batches, raw.obs, raw.dec_batch)

    # --- internals ------------------------------------------------------------------
    def _next(self) -> np.ndarray:
        """Run to the next decision (or the end); its observation."""
        run = self._run
        assert run is not None
        if run.advance() == 0:
            self._done = True
            self._mask[:] = False
            self._obs[:] = 0.0
            return self._obs.copy()
        G = self.n_groups
        self._mask[:] = run.gs[:G, ELIGIBLE] > 0
        observation(run.gs, self._obs)
        np.clip(self._obs, self._low, self._high, out=self._obs)  # free tokens: a float hair below 0
        return self._obs.copy()

    def _pay(self) -> float:
        """(met - missed) / reward_scale of the batches that ended by the pending decision (all at the end)."""
        run = self._run
        assert run is not None
        b, total = run.b, 0
        for lane, kb in enumerate(self._lane_b):
            if kb < 0 or not (self._done or b["end"][kb] <= run.t):
                continue
            pos = run.gidx[b["first"][kb]:b["first"][kb] + b["count"][kb]]
            met = int(np.count_nonzero(b["end"][kb] <= self.reqs.deadline[pos] + 1e-12))
            self._met += met
            total += 2 * met - len(pos)
            self._lane_b[lane] = -1
        return total / self.reward_scale

    def _info(self) -> dict[str, Any]:
        run = self._run
        assert run is not None
        info: dict[str, Any] = {"action_mask": self._mask.copy(), "eligible": run.ne, "time": run.t,
                                "batches": run.nb}
        if self._done:
            info["slo_attainment"] = self._met / len(self.reqs)
        return info


def env_kwargs_from_config(cfg: dict[str, Any], split: str = "test", generated: bool = False,
                           n_requests: int = DEFAULT_REQUESTS) -> dict[str, Any]:
    """The env's settings from a composed config (``params.yaml``, or Hydra's ``compose`` as
    plain containers): the ``serving`` block with the profile's per-variant sigma and
    contention model (as the stages simulate), its latency table, the scheduler's table
    (``serving.predictor``), and either the split the generate stage wrote with the simulate
    stage's noise (``sim.seed``), or (``generated``) episodes of ``n_requests`` requests drawn
    from that split's workload settings."""
    from hybridsched.kinds.serving.latency import load_latency, with_served_model

    w = cfg["workload"]
    if w.get("kind") != "serving":
        raise HybridschedError(f"ServingDispatchEnv: workload.kind is {w.get('kind')!r}; the env is the serving kind's")
    if split not in ("train", "test"):
        raise HybridschedError(f"ServingDispatchEnv: split must be train or test, got {split!r}")
    s = with_served_model(_settings(cfg["serving"]))
    kw: dict[str, Any] = {"settings": s, "latency": load_latency(s)[0]}
    p = cfg["serving"].get("predictor") or {}
    if p.get("use", "learned") != "table":
        kw["pred_latency"] = str(Path(p.get("model_dir", "models/rf")) / "pred_latency.npy")
    if generated:
        merged = {**w, **(w.get("test") or {})} if split == "test" else dict(w)
        return {**kw, "workload": merged, "n_requests": n_requests}
    kw["requests"] = str(Path(cfg["paths"]["workload_dir"]) / f"{split}.parquet")
    kw["noise_seed"] = int(cfg.get("sim", {}).get("seed", 0))
    return kw
