"""The machine kind's late dispatch as a Gymnasium environment (``hybridsched/machine-late-v0``).

``import hybridsched.envs`` registers the id; then ``gymnasium.make("hybridsched/machine-late-v0")``
(or, without the import, ``gymnasium.make("hybridsched.envs:hybridsched/machine-late-v0")``).
docs/train-your-own-agent.md shows a training loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from hybridsched.devices import Cluster, Realization, cluster_from_config
from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.engine import Trace, task_matrix
from hybridsched.kinds.machine.late_choice import N_OBS, candidate_params, resolve, step_to_choice
from hybridsched.kinds.machine.late_engine import RESERVED
from hybridsched.kinds.machine.late_steps import LateStepper
from hybridsched.kinds.machine.policies.late_dqn import pdata_of
from hybridsched.kinds.machine.workload import (TaskTable, WorkloadSpec, generate, generate_splits, read_tasks,
                                                spec_from_config)

ENV_ID = "hybridsched/machine-late-v0"
# conf/workload/default.yaml's distribution (its rate; the rest are WorkloadSpec's defaults)
DEFAULT_WORKLOAD: dict[str, Any] = {"rate": 6.0}
DEFAULT_TASKS = 200  # tasks per generated episode: small, so that an episode is quick


def draw_episode(tasks: TaskTable | None, spec: WorkloadSpec, n_tasks: int, cluster: Cluster,
                 rng: np.random.Generator, noise_seed: int | None) -> tuple[TaskTable, Realization, np.ndarray]:
    """An episode of the machine kind's envs: ``tasks`` (or ``n_tasks`` drawn from ``spec`` with
    ``rng``), their run-time noise (from ``rng``, or the same every episode with ``noise_seed``)
    and their task matrix."""
    if tasks is None:
        tasks = generate(spec, n_tasks, rng, 0, cluster.cpu_gflops)
    noise_rng = np.random.default_rng(noise_seed) if noise_seed is not None else rng
    return tasks, cluster.sample_noise(len(tasks), noise_rng), task_matrix(tasks, cluster)


class MachineLateEnv(gym.Env):
    """Late dispatch on one CPU and ``n_gpus`` GPUs: whenever a device is idle and tasks wait in
    the central pool, the agent picks which (task, split) starts (``late_engine.py``).

    **Episode.**  One workload run to its end: ``tasks`` (a table, or a task file's path) in
    every episode, or, without it, ``n_tasks`` tasks drawn from ``workload`` (the keys of
    ``conf/workload/``; default: the default workload's distribution) with the env's RNG.  The
    run-time noise of each episode comes from the env's RNG, or, with ``noise_seed``, is the same
    every episode (the simulate stage's ``sim.seed`` draws it so).  ``reset(seed=...)`` seeds
    the RNG.  Each step is one decision; a pick point where no task can start (every waiting
    task's split needs a busy device) is passed over, as the late engine does.  The episode
    terminates when every task has ended; it is never truncated.

    **Observation, mask and action** (``late_choice.py``): a ``Box`` of shape
    ``(max_candidates, N_OBS)`` (float64), the features of the project's learned late policies
    for each candidate (task, split); ``Discrete(max_candidates)`` actions, one per candidate
    (+1 with ``allow_wait``: wait for the next event); :meth:`action_masks` (sb3-contrib's
    MaskablePPO reads it) and ``info["action_mask"]`` give the feasible ones.  A masked-out
    action runs candidate 0 and sets ``info["action_valid"]`` to False.

    **Reward** (the late learners', ``late_dqn_train.decision_rewards``): decision ``k`` at
    time ``t_k`` earns ``-integral_{t_k}^{t_k+1} N(t) dt / m``, ``N`` the tasks arrived and not
    ended, ``m`` the episode's mean best-alone time; the last decision's runs to the last task's
    end.  So an episode's return is minus the total latency after the first decision, over
    ``m``: maximising it minimises the mean latency (``info["mean_latency"]`` at the end).

    ``info``: ``action_mask``, ``candidates`` (all, also those past ``max_candidates``),
    ``time``, ``pool`` (tasks waiting), ``tasks_done``; after a step ``action_valid``; at the
    end ``mean_latency`` and ``makespan`` (s).  :meth:`policy_action` gives the action a
    project late policy (e.g. ``eft_late``) would take in the current state; :meth:`trace`
    is the episode's schedule as the simulator's ``Trace``.
    """

    metadata = {"render_modes": []}

    def __init__(self, tasks: TaskTable | str | Path | None = None,
                 workload: dict[str, Any] | WorkloadSpec | None = None, n_tasks: int = DEFAULT_TASKS,
                 cluster: dict[str, Any] | Cluster | None = None,
                 noise_seed: int | None = None, max_candidates: int = 32, allow_wait: bool = False,
                 fraction_step: float = 0.05, option_b: dict[str, float] | None = None,
                 queue_slack: float = np.inf, reserved_order: str = "fifo", render_mode: str | None = None) -> None:
        self.cluster = cluster if isinstance(cluster, Cluster) else cluster_from_config(dict(cluster or {}))
        if isinstance(tasks, (str, Path)):
            tasks = read_tasks(tasks, max_memory_mb=self.cluster.max_task_memory_mb)
        self._tasks = tasks
        if isinstance(workload, WorkloadSpec):
            self._spec = workload
        else:
            self._spec = spec_from_config({**DEFAULT_WORKLOAD, **(workload or {})})
        if tasks is None and int(n_tasks) < 1:
            raise HybridschedError(f"MachineLateEnv: n_tasks must be >= 1, got {n_tasks}")
        if int(max_candidates) < 1:
            raise HybridschedError(f"MachineLateEnv: max_candidates must be >= 1, got {max_candidates}")
        if reserved_order not in RESERVED:
            raise HybridschedError(f"MachineLateEnv: reserved_order must be one of {list(RESERVED)}, "
                                   f"got {reserved_order!r}")
        self.n_tasks = int(n_tasks)
        self.noise_seed = noise_seed
        self.max_candidates = int(max_candidates)
        self.allow_wait = bool(allow_wait)
        self.reserved_order = reserved_order
        self.render_mode = render_mode
        self._params = candidate_params(self.cluster, fraction_step, option_b, queue_slack)
        # the features lie in [0, 1]; the prior (finish - t) / m has no upper bound but float64's
        high = np.tile(np.array([1.0] * (N_OBS - 1) + [np.finfo(np.float64).max]), (self.max_candidates, 1))
        self.observation_space = spaces.Box(low=np.zeros_like(high), high=high, dtype=np.float64)
        n_actions = self.max_candidates + (1 if self.allow_wait else 0)
        self.action_space = spaces.Discrete(n_actions)
        # the compiled step writes each decision's observation and mask here (copies go out)
        self._obs = np.zeros((self.max_candidates, N_OBS))
        self._mask = np.zeros(n_actions, dtype=np.bool_)
        # ... and the first max_candidates candidates' pool position, start device, GPU share
        self._ck = np.zeros(self.max_candidates, dtype=np.int64)
        self._cd = np.zeros(self.max_candidates, dtype=np.int64)
        self._cf = np.zeros(self.max_candidates)
        self._c, self._g = 0, 0
        self._stepper: LateStepper | None = None
        self._prepared: dict[int, Any] = {}  # id(policy) -> the policy, prepared for this episode

    # --- the Gymnasium API --------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start an episode (class docstring); ``seed`` seeds the env's RNG."""
        super().reset(seed=seed)
        tasks, self.realization, self.X = draw_episode(self._tasks, self._spec, self.n_tasks, self.cluster,
                                                       self.np_random, self.noise_seed)
        self.tasks = tasks
        self._pdata = pdata_of(tasks, self.cluster, self.X)
        self._m = float(np.mean(self._pdata[:, 0]))  # the reward's scale, as the late trainers'
        self._stepper = LateStepper(tasks, self.cluster, self.realization, self.X, self.reserved_order)
        self._prepared = {}
        obs = self._decide(0)
        self._area_at = self._stepper.area  # rewards count from the first decision on
        return obs, self._info()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Carry out ``action`` (a candidate, or wait) and run to the next decision."""
        s = self._stepper
        if s is None or self._c == 0:
            raise RuntimeError("MachineLateEnv.step: call reset() first (the episode has ended)")
        a, valid = resolve(action, self._mask)
        obs = self._decide(2) if a == self.max_candidates else self._decide(1, a)
        area = s.area
        reward = -(area - self._area_at) / self._m
        self._area_at = area
        info = self._info()
        info["action_valid"] = valid
        return obs, reward, self._c == 0, False, info

    def action_masks(self) -> np.ndarray:
        """The feasible actions now (a copy): sb3-contrib's MaskablePPO calls this."""
        return self._mask.copy()

    # --- heuristics in the env's terms ------------------------------------------------
    def policy_action(self, policy: Any) -> int:
        """The action a project late policy (one with a ``pick_kernel``: ``EFTLate()``,
        ``SPTLate()``, ...) takes in the current state: its kernel asked with the engine's own
        inputs, its pick found among the candidates.  ValueError when the pick is not one of them
        (a split the candidates do not offer, or a candidate past ``max_candidates``)."""
        s = self._stepper
        if s is None or self._c == 0:
            raise RuntimeError("MachineLateEnv.policy_action: no decision pending (reset() first)")
        if getattr(policy, "reserved_order", "fifo") != self.reserved_order:
            raise ValueError(f"policy {policy.name!r} orders reserved parts {policy.reserved_order!r}, "
                             f"the env {self.reserved_order!r}")
        if id(policy) not in self._prepared:
            policy.prepare(self.tasks, self.cluster, self.X)
            self._prepared[id(policy)] = policy
        pdata, params = policy.kernel_data()
        k, d, f, g2 = type(policy).pick_kernel(s.t, s.pool, s.n_pool, s.idle, s.est, s.qlen, self.X, s.ready,
                                               pdata, params)
        if k < 0:
            if self.allow_wait and self._mask[self.max_candidates]:
                return self.max_candidates
            raise ValueError(f"policy {policy.name!r} waits; the env offers no wait action here")
        m = min(self._c, self.max_candidates)
        hit = np.flatnonzero((self._ck[:m] == k) & (self._cd[:m] == d) & (self._cf[:m] == f)
                             & ((self._cf[:m] == 0.0) | (self._cd[:m] > 0) | (g2 == self._g)))
        if not len(hit):
            raise ValueError(f"policy {policy.name!r} picks pool position {k} on device {d} with GPU share {f}, "
                             f"not among the first {m} of the env's {self._c} candidates")
        return int(hit[0])

    # --- internals ------------------------------------------------------------------
    def _decide(self, kind: int, a: int = 0) -> np.ndarray:
        """Start candidate ``a`` (``kind`` 1), wait (2) or only advance (0, a fresh run), then run
        to the next decision (``late_choice.step_to_choice``); its observation (a copy)."""
        s = self._stepper
        if kind == 1:
            k, d, f = self._ck[a], self._cd[a], self._cf[a]
        else:
            k, d, f = -1, -1, 0.0
        self._c, self._g = step_to_choice(
            kind, k, d, f, self._g, s.apply_args, s.advance_args, s.ib, s.fb, self.X, s.ready, s.pool, s.idle, s.est,
            s.qlen, self._pdata, self._params, self._obs, self._mask, self._ck, self._cd, self._cf)
        return self._obs.copy()

    def _info(self) -> dict[str, Any]:
        s = self._stepper
        info: dict[str, Any] = {"action_mask": self._mask.copy(), "candidates": int(self._c), "time": s.t,
                                "pool": s.n_pool, "tasks_done": s.done}
        if self._c == 0:
            end = s.out["end"]
            info["mean_latency"] = float(np.mean(end - self.tasks.arrival))
            info["makespan"] = float(end.max() - self.tasks.arrival[0])
        return info

    def trace(self, name: str = "env") -> Trace:
        """The episode's schedule so far as the simulator's per-task :class:`Trace` (what
        ``simulate`` returns for a late policy; rows of tasks not started yet hold NaN / -1)."""
        s = self._stepper
        if s is None:
            raise RuntimeError("MachineLateEnv.trace: call reset() first")
        o = s.out
        return Trace(name, self.tasks.task_id, self.tasks.arrival, s.ready.copy(), o["gpu"].copy(), o["frac"].copy(),
                     o["cs"].copy(), o["ce"].copy(), o["gs"].copy(), o["ge"].copy(), o["gmem"].copy(), o["end"].copy(),
                     o["energy"].copy())


def env_kwargs_from_config(cfg: dict[str, Any], split: str = "test", generated: bool = False,
                           n_tasks: int = DEFAULT_TASKS, env_name: str = "MachineLateEnv") -> dict[str, Any]:
    """The env's settings from a composed config (``params.yaml``, or Hydra's ``compose`` as
    plain containers): its cluster (``cluster_from_config``) and either the workload split the
    simulate stage runs with its noise (``sim.seed``), so the env's episode is the pipeline's run,
    or (``generated``) episodes of ``n_tasks`` tasks drawn from that split's distribution;
    ``env_name`` starts its refusal messages."""
    w = cfg["workload"]
    if w.get("kind", "machine") != "machine":
        raise HybridschedError(f"{env_name}: workload.kind is {w.get('kind')!r}; the env is the machine kind's")
    if split not in ("train", "test"):
        raise HybridschedError(f"{env_name}: split must be train or test, got {split!r}")
    kw: dict[str, Any] = {"cluster": cluster_from_config(cfg["cluster"])}
    if generated:
        if w.get("path"):
            raise HybridschedError(f"{env_name}: a file workload (workload.path) has no distribution to draw "
                                   "episodes from; use generated=False")
        names = set(WorkloadSpec.__dataclass_fields__) - {"extra"}
        merged = {**w, **(w.get("test") or {})} if split == "test" else dict(w)
        return {**kw, "workload": {k: v for k, v in merged.items() if k in names}, "n_tasks": n_tasks}
    if w.get("path"):  # the generate stage's file of that split, as the stages read it
        kw["tasks"] = str(Path(cfg["paths"]["workload_dir"]) / f"{split}.parquet")
    else:
        kw["tasks"] = generate_splits(w, cpu_gflops=float(cfg["cluster"]["cpu_gflops"]))[("train", "test").index(split)]
    kw["noise_seed"] = int(cfg["sim"]["seed"])
    return kw
