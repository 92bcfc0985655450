"""Training of ``ppo_late``: sb3-contrib's MaskablePPO on the late-dispatch env
(``hybridsched/machine-late-v0``, :class:`~hybridsched.kinds.machine.env.MachineLateEnv`), the
``train_ppo`` stage.

**Episodes.**  Episode ``k`` is draw ``k`` of the ``cem.machine`` mixture's training stream
(``cem_train.draw_set(seed, 1, k)``, ``tasks`` tasks) with run-time noise from ``[seed, 1, k]``:
never a test split, a validation draw or a held-out draw (``scenarios.HELDOUT_SEED`` is refused).

**Policy** (``ppo_policy.CandidatePolicy``).  The actor scores each candidate row of the
observation on its own, ``logit = MLP(features) - prior / tau`` (``prior = (finish - t) / m``, the last
column), the per-candidate form of ``dqn_late`` and ``pg_late``: with the MLP's output layer 0
the greedy action is the candidate of earliest finish (``eft_late_plain`` over the first
``max_candidates`` candidates: 512 covers the mixture's pools), where training starts.  MaskablePPO masks the infeasible candidates (the env's ``action_masks()``).

**Scores.**  Each training episode's mean latency (the sampling policy's) over
``eft_late_plain``'s on the same draw and noise is the curve.  The deterministic policy at the
start (the prior), every ``select_every`` rollouts and at the end is scored on the selection
stream's draws (``[seed, 3, 0]``) as mean latency / ``eft_late_plain``'s; the cheapest is the
model (so it never selects worse than its start there), scored once on the validation stream's
draws (``[seed, 2, 0]``); each draw has ``eval_tasks`` tasks.

Seeded and single-threaded: the same settings give the same model file and the same figures.
"""

from __future__ import annotations

import io
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hybridsched.devices import Cluster
from hybridsched.errors import HybridschedError, check_known_keys
from hybridsched.io import atomic_dir, without_timings, write_frame, write_json
from hybridsched.kinds.machine.cem_train import _SELECT_STREAM, _TRAIN_STREAM, _VALID_STREAM, MachineCEMSettings, draw_set
from hybridsched.kinds.machine.env import MachineLateEnv
from hybridsched.kinds.machine.policies.ppo_late import MODEL_FILE, agent_of
from hybridsched.kinds.machine.scenarios import HELDOUT_SEED

if TYPE_CHECKING:
    from hybridsched.kinds.base import Run

REPORT_FILE = "train_ppo.json"
CURVE_COLUMNS = ["step", "episode", "cost"]
# MaskablePPO's saved state that holds wall-clock times or rollout leftovers: left out of the
# model file, so a rerun writes the same bytes (predicting needs none of it)
_NOT_SAVED = ["start_time", "ep_info_buffer", "ep_success_buffer", "_last_obs", "_last_episode_starts",
              "_last_original_obs"]
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)  # the zip entries' timestamp


@dataclass(frozen=True)
class PPOSettings:
    """The ``train_ppo`` group: MaskablePPO's budget and hyper-parameters, the network, the
    episodes and the validation."""

    seed: int = 0
    total_timesteps: int = 6144     # decisions trained on
    tasks: int = 300                # tasks per training episode (a mixture draw)
    n_steps: int = 1024             # decisions per rollout
    batch_size: int = 128
    n_epochs: int = 4
    learning_rate: float = 1e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.0
    hidden: int = 32                # tanh units of the per-candidate MLP
    tau: float = 0.3                # the prior's temperature in the logits
    max_candidates: int = 512       # the env's rows and actions: enough for the mixture's pools
    select_every: int = 3           # rollouts between the selection's checkpoints (0: none)
    selection_draws: int = 4
    validation_draws: int = 4
    eval_tasks: int = 2000          # tasks of each selection and validation draw

    def __post_init__(self) -> None:
        if int(self.seed) == HELDOUT_SEED:
            raise HybridschedError(f"train_ppo.seed: {self.seed} is the held-out scenarios' seed; training must "
                                   "never use it")

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> PPOSettings:
        """The settings of a ``train_ppo`` block (``model_dir`` aside); one line for an unknown key."""
        values = {k: v for k, v in dict(d or {}).items() if k != "model_dir"}
        check_known_keys(values, {f.name for f in fields(cls)}, "train_ppo")
        return cls(**values)


class MixtureLateEnv(MachineLateEnv):
    """:class:`MachineLateEnv` whose episode ``k`` is the training stream's draw ``k`` (module
    docstring); ``history`` gets one row per finished episode (its curve)."""

    def __init__(self, settings: PPOSettings, mix: MachineCEMSettings, cluster: Cluster) -> None:
        super().__init__(n_tasks=settings.tasks, cluster=cluster, max_candidates=settings.max_candidates)
        self._seed = settings.seed
        self._mix = MachineCEMSettings(**{**asdict(mix), "tasks": settings.tasks})
        self._episode = 0
        self._steps = 0
        self.history: list[dict[str, Any]] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """The next training draw, with its own noise (the env's RNG is not used)."""
        _, self._tasks, _ = draw_set(self._seed, _TRAIN_STREAM, self._episode, self._mix, self.cluster, 1)[0]
        self.noise_seed = int(np.random.default_rng([self._seed, _TRAIN_STREAM, self._episode]).integers(2**31))
        self._episode += 1
        return super().reset(seed=seed, options=options)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        self._steps += 1
        if terminated:
            ref = _mean_latency(self.tasks, self.cluster, None, self.realization)
            self.history.append({"step": self._steps, "episode": self._episode,
                                 "cost": info["mean_latency"] / ref})
        return obs, reward, terminated, truncated, info


def _mean_latency(tasks, cluster: Cluster, policy, real) -> float:  # noqa: ANN001 (a TaskTable, a policy)
    """Mean latency of ``policy`` (None: ``eft_late_plain``) on one draw."""
    from hybridsched.kinds.machine.policies.late import EFTLate
    from hybridsched.kinds.machine.sim import simulate

    tr = simulate(tasks, cluster, policy if policy is not None else EFTLate(), real)
    return float(np.mean(tr.end - tr.arrival))


def save_model(model: Any, path: Path) -> None:
    """``model`` as a zip MaskablePPO.load reads, the same bytes for the same model: no
    wall-clock state, fixed entry dates, no system-info entry."""
    buf = io.BytesIO()
    model.save(buf, exclude=_NOT_SAVED)
    out = io.BytesIO()
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename == "system_info.txt":
                continue
            body = src.read(info.filename)
            if info.filename == "data":
                body = _without_reprs(body)
            entry = zipfile.ZipInfo(info.filename, date_time=_FIXED_DATE)
            entry.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(entry, body)
    path.write_bytes(out.getvalue())


def _without_reprs(data: bytes) -> bytes:
    """SB3's ``data`` JSON with each pickled object reduced to its ``:type:`` and ``:serialized:``
    (what loading reads): the readable copies beside them hold memory addresses."""
    import json

    d = json.loads(data)
    d = {k: {t: v[t] for t in (":type:", ":serialized:") if t in v} if isinstance(v, dict) and ":serialized:" in v
         else v for k, v in d.items()}
    return json.dumps(d, indent=4).encode()


def eval_draws(settings: PPOSettings, mix: MachineCEMSettings, cluster: Cluster, stream: int,
               n: int) -> list[tuple[Any, Any, float]]:
    """``n`` draws of ``stream`` (``eval_tasks`` tasks each) with their noise and
    ``eft_late_plain``'s mean latency."""
    eval_mix = MachineCEMSettings(**{**asdict(mix), "tasks": settings.eval_tasks})
    return [(tasks, real, _mean_latency(tasks, cluster, None, real))
            for _, tasks, real in draw_set(settings.seed, stream, 0, eval_mix, cluster, n)]


def costs(agent: Callable[[np.ndarray, np.ndarray], int], draws: list[tuple[Any, Any, float]], cluster: Cluster,
          max_candidates: int) -> list[float]:
    """Per draw of :func:`eval_draws`: mean latency of ``agent`` (as a late policy) / ``eft_late_plain``'s."""
    from hybridsched.kinds.machine.policies.late_callable import CallableLate

    return [_mean_latency(tasks, cluster, CallableLate(agent, max_candidates=max_candidates), real) / ref
            for tasks, real, ref in draws]


def train(settings: PPOSettings, mix: MachineCEMSettings, cluster: Cluster, out_dir: Path,
          log: Callable[[str], Any] = print) -> dict[str, Any]:
    """Train and validate (module docstring); writes ``out_dir/model.zip`` and
    ``out_dir/train_ppo.json``; returns the report (with ``wall_s``) and ``curve`` (one row per
    training episode)."""
    from sb3_contrib import MaskablePPO

    from hybridsched.kinds.machine.late_dqn_train import deterministic_torch
    from hybridsched.kinds.machine.ppo_policy import CandidatePolicy

    t0 = time.perf_counter()
    s = settings
    deterministic_torch(s.seed)
    env = MixtureLateEnv(s, mix, cluster)
    model = MaskablePPO(CandidatePolicy, env, learning_rate=s.learning_rate, n_steps=s.n_steps,
                        batch_size=s.batch_size, n_epochs=s.n_epochs, gamma=s.gamma, gae_lambda=s.gae_lambda,
                        clip_range=s.clip_range, ent_coef=s.ent_coef, seed=s.seed, device="cpu", verbose=0,
                        policy_kwargs={"hidden": s.hidden, "tau": s.tau})
    # the selection: the deterministic policy at the start (the prior), every select_every
    # rollouts and at the end, scored on the selection stream's draws; the cheapest is the model
    sel_draws = eval_draws(s, mix, cluster, _SELECT_STREAM, s.selection_draws) if s.select_every else []
    checkpoints: list[tuple[float, int, dict[str, Any]]] = []

    def checkpoint() -> None:
        if sel_draws:
            cost = float(np.mean(costs(agent_of(model.policy), sel_draws, cluster, s.max_candidates)))
            state = {k: v.clone() for k, v in model.policy.state_dict().items()}
            checkpoints.append((cost, int(model.num_timesteps), state))
            log(f"train_ppo: {model.num_timesteps} decisions, selection cost {cost:.4f}")

    checkpoint()
    model.learn(total_timesteps=s.total_timesteps, callback=_every_rollouts(s.select_every, checkpoint))
    checkpoint()
    selected = min(range(len(checkpoints)), key=lambda i: checkpoints[i][0]) if checkpoints else None
    if selected is not None:
        model.policy.load_state_dict(checkpoints[selected][2])
    out_dir.mkdir(parents=True, exist_ok=True)
    save_model(model, out_dir / MODEL_FILE)
    valid = (costs(agent_of(model.policy), eval_draws(s, mix, cluster, _VALID_STREAM, s.validation_draws), cluster,
                   s.max_candidates) if s.validation_draws else [])
    curve = [h["cost"] for h in env.history]
    tenth = max(1, len(curve) // 10)
    report = {"settings": asdict(s), "timesteps": int(model.num_timesteps), "episodes": len(curve),
              "first_train_cost": float(np.mean(curve[:tenth])) if curve else None,
              "last_train_cost": float(np.mean(curve[-tenth:])) if curve else None,
              "selection": [{"step": c[1], "cost": round(c[0], 6)} for c in checkpoints],
              "selected_step": checkpoints[selected][1] if selected is not None else None,
              "validation_cost": float(np.mean(valid)) if valid else None,
              "validation_per_draw": np.round(valid, 4).tolist(), "wall_s": round(time.perf_counter() - t0, 2)}
    write_json(out_dir / REPORT_FILE, without_timings(report))
    log(f"train_ppo: {report['timesteps']} decisions in {report['episodes']} episodes, {report['wall_s']:.1f} s; "
        f"training cost {report['first_train_cost']} -> {report['last_train_cost']}; validation vs eft_late_plain "
        f"{report['validation_cost']}")
    return {**report, "curve": env.history}


def _every_rollouts(every: int, fn: Callable[[], None]) -> Any:
    """An SB3 callback calling ``fn`` at the end of every ``every``-th rollout (0: never)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class EveryRollouts(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.rollouts = 0

        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            self.rollouts += 1
            if every and self.rollouts % every == 0:
                fn()

    return EveryRollouts()


def train_stage(run: Run) -> dict[str, Any]:
    """The ``train_ppo`` stage on the machine kind: ``train_ppo.model_dir/`` (``model.zip``, the
    report), metrics/train_ppo.json and the curve metrics/plots/train_ppo.csv."""
    import pandas as pd

    from hybridsched.devices import cluster_from_config

    cfg = run.cfg["train_ppo"]
    settings = PPOSettings.from_dict(cfg)
    mix, cluster = MachineCEMSettings.from_dict(run.cfg["cem"]["machine"]), cluster_from_config(run.cfg["cluster"])
    with atomic_dir(Path(cfg["model_dir"])) as tmp:
        out = train(settings, mix, cluster, tmp, log=lambda line: print(line, flush=True))
    metrics = {k: v for k, v in out.items() if k not in ("curve", "settings")}
    write_json(run.metrics_dir / "train_ppo.json", without_timings(metrics))
    curve = pd.DataFrame(out["curve"], columns=CURVE_COLUMNS).round(6)
    write_frame(run.metrics_dir / "plots" / "train_ppo.csv", curve)
    run.track("train_ppo", {k: v for k, v in metrics.items() if isinstance(v, int | float)},
              [run.metrics_dir / "train_ppo.json", run.metrics_dir / "plots" / "train_ppo.csv",
               Path(cfg["model_dir"]) / MODEL_FILE])
    return metrics
