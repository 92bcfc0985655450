"""The machine kind's arrival dispatch as a Gymnasium environment (``hybridsched/machine-arrival-v0``).

``import hybridsched.envs`` registers the id; then ``gymnasium.make("hybridsched/machine-arrival-v0")``.
The decision is the arrival DQN's (``dqn.py``, ``dqn_state.py``): its state, action table and reward.

The engine's loop (``engine._loop``) calls its policy from inside and returns to Python only
every ``observe_every`` completions, so it cannot hand a single decision to an agent; the env
steps :class:`ArrivalStepper`, a copy of the loop's body split at the decision (same event
order, same heap, same arithmetic), which ``tests/machine/test_arrival_env.py`` checks against
``simulate`` task for task.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from hybridsched.devices import Cluster, Realization, cluster_from_config
from hybridsched.errors import HybridschedError
from hybridsched.heap import heap_pop, heap_push
from hybridsched.kinds.machine.dqn_state import DEFAULT_FRACTIONS, StateSpec, features_into
from hybridsched.kinds.machine.engine import (CPU_S, GPU_S, MAX_F, MEMORY, Trace, _decider, dependency_arrays,
                                              output_arrays)
from hybridsched.kinds.machine.env import DEFAULT_TASKS, DEFAULT_WORKLOAD, draw_episode
from hybridsched.kinds.machine.env import env_kwargs_from_config as _late_kwargs
from hybridsched.kinds.machine.workload import TaskTable, WorkloadSpec, read_tasks, spec_from_config

ENV_ID = "hybridsched/machine-arrival-v0"


class ArrivalStepper:
    """The arrival engine's run (``engine._loop`` without a learner) one decision at a time:
    ``t`` and ``i`` are the pending decision's time and task, ``est`` the believed free times the
    policy sees; :meth:`place` carries out ``(gpu, fraction)`` and moves to the next decision."""

    def __init__(self, tasks: TaskTable, cluster: Cluster, realization: Realization, X: np.ndarray) -> None:
        n = len(tasks)
        self.X, self.cluster, self.realization = X, cluster, realization
        self.arrival = np.asarray(tasks.arrival, dtype=np.float64)
        self.root_order, self.child_ptr, self.child_idx, self.pending = dependency_arrays(tasks)
        self.out = output_arrays(n)
        self.true_free = np.zeros(cluster.n_devices)
        self.est = self.true_free.copy()
        self.ready = self.arrival.copy()
        self.rh_t, self.rh_i = np.empty(n + 1), np.empty(n + 1, dtype=np.int64)
        self.nxt, self.rn, self.decided = 0, 0, 0
        self.i, self.t = -1, 0.0
        self.finished = False
        self._advance()

    def _advance(self) -> None:
        """Pop the next ready task (the loop's event order) and correct the believed free times."""
        if self.nxt >= self.root_order.shape[0] and self.rn == 0:
            self.finished, self.i = True, -1
            return
        if self.rn > 0 and (self.nxt >= self.root_order.shape[0] or self.rh_t[0] < self.arrival[self.root_order[self.nxt]]):
            i = int(self.rh_i[0])
            self.rn = heap_pop(self.rh_t, self.rh_i, self.rn)
        else:
            i = int(self.root_order[self.nxt])
            self.nxt += 1
        t = float(self.ready[i])
        est, tf = self.est, self.true_free
        for d in range(est.shape[0]):  # a scheduler sees which devices are idle right now
            if tf[d] <= t or est[d] < t:
                est[d] = t
        self.i, self.t = i, t

    def place(self, g: int, f: float) -> None:
        """Place the pending task as the engine does (``f`` clamped to what fits in GPU memory)."""
        i, t, X, o, c = self.i, self.t, self.X, self.out, self.cluster
        f = min(max(f, 0.0), X[i, MAX_F])
        e = 0.0
        task_end = t
        if f < 1.0:
            dur = (1.0 - f) * X[i, CPU_S]
            s = max(t, self.true_free[0])
            real = dur * self.realization.cpu_factor[i]
            o["cs"][i], o["ce"][i] = s, s + real
            self.true_free[0] = s + real
            self.est[0] += dur
            e += real * c.cpu_busy_w
            task_end = s + real
        else:
            o["cs"][i] = o["ce"][i] = np.nan
        if f > 0.0:
            d = g + 1
            dur = c.launch_s + f * X[i, GPU_S]
            s = max(t, self.true_free[d])
            real = dur * self.realization.gpu_factor[i]
            o["gs"][i], o["ge"][i] = s, s + real
            self.true_free[d] = s + real
            self.est[d] += dur
            e += real * c.gpu_busy_w
            task_end = max(task_end, s + real)
            o["gmem"][i], o["gpu"][i] = f * X[i, MEMORY], g
        else:
            o["gs"][i] = o["ge"][i] = np.nan
            o["gmem"][i], o["gpu"][i] = 0.0, -1
        o["frac"][i], o["end"][i], o["energy"][i] = f, task_end, e
        self.decided += 1
        for k in range(self.child_ptr[i], self.child_ptr[i + 1]):
            ch = self.child_idx[k]
            if task_end > self.ready[ch]:
                self.ready[ch] = task_end
            self.pending[ch] -= 1
            if self.pending[ch] == 0:
                self.rn = heap_push(self.rh_t, self.rh_i, self.rn, self.ready[ch], ch)
        self._advance()


class MachineArrivalEnv(gym.Env):
    """Arrival dispatch on one CPU and ``n_gpus`` GPUs: each task, when it becomes ready (arrival,
    or its last parent's end), is placed at once on the FIFO queues of the CPU and/or one GPU
    (``engine.py``).

    **Episode.**  One workload run: ``tasks`` (a table, or a task file's path) in every episode,
    or, without it, ``n_tasks`` tasks drawn from ``workload`` (the keys of ``conf/workload/``;
    default: the default workload's distribution) with the env's RNG.  Run-time noise comes from
    the env's RNG, or, with ``noise_seed``, is the same every episode.  ``reset(seed=...)`` seeds
    the RNG; ``state_spec`` is the episode's ``StateSpec``.  One step per task; the episode terminates after the last task is placed (never
    truncated).

    **Observation, mask and action** (the arrival DQN's, ``dqn_state.py``): a ``Box`` of shape
    ``(n_state,)`` (float64, ``n_state = 6 + n_devices + 2 * n_actions``): the task's features,
    each device's believed backlog, and per action its nominal finish time and busy energy.  Its
    normalisation is ``spec`` (a ``StateSpec``, e.g. a trained model's) or, by default, fitted on
    the episode's tasks.  ``Discrete(1 + n_gpus * len(fractions))`` actions: 0 is CPU only, then
    each GPU at each fraction (``StateSpec.action_table``).  :meth:`action_masks` and
    ``info["action_mask"]``: a GPU action is feasible when its fraction fits in GPU memory
    (``fraction <= gpu_mem_mb / memory``); a masked-out action runs action 0 and sets
    ``info["action_valid"]`` to False.

    **Reward** (``dqn.reward``): ``-(alpha * response / time_scale + beta * energy / energy_scale)``
    of the placed task, ``response`` its end minus the decision time and ``energy`` its busy
    energy.  On FIFO queues a placed task's end does not depend on later decisions, so the
    reward comes with its own step.

    ``info``: ``action_mask``, ``time``, ``task`` (row of the pending task), ``tasks_placed``;
    after a step ``action_valid``; at the end ``mean_latency``, ``makespan`` (s) and ``energy_j``.
    :meth:`policy_action` gives the action a project arrival policy takes in the current state;
    :meth:`trace` is the episode's schedule as the simulator's ``Trace``.
    """

    metadata = {"render_modes": []}

    def __init__(self, tasks: TaskTable | str | Path | None = None,
                 workload: dict[str, Any] | WorkloadSpec | None = None, n_tasks: int = DEFAULT_TASKS,
                 cluster: dict[str, Any] | Cluster | None = None, noise_seed: int | None = None,
                 fractions: tuple[float, ...] = DEFAULT_FRACTIONS, alpha: float = 0.5, beta: float = 0.5,
                 spec: StateSpec | None = None, render_mode: str | None = None) -> None:
        self.cluster = cluster if isinstance(cluster, Cluster) else cluster_from_config(dict(cluster or {}))
        if isinstance(tasks, (str, Path)):
            tasks = read_tasks(tasks, max_memory_mb=self.cluster.max_task_memory_mb)
        self._tasks = tasks
        self._spec = workload if isinstance(workload, WorkloadSpec) else spec_from_config(
            {**DEFAULT_WORKLOAD, **(workload or {})})
        if tasks is None and int(n_tasks) < 1:
            raise HybridschedError(f"MachineArrivalEnv: n_tasks must be >= 1, got {n_tasks}")
        fractions = tuple(float(f) for f in fractions)
        if not fractions or not all(0 < f <= 1 for f in fractions):
            raise HybridschedError(f"MachineArrivalEnv: fractions must be in (0, 1], got {list(fractions)}")
        if spec is not None and spec.n_gpus != self.cluster.n_gpus:
            raise HybridschedError(f"MachineArrivalEnv: spec is for {spec.n_gpus} GPUs, "
                                   f"the cluster has {self.cluster.n_gpus}")
        self.n_tasks, self.noise_seed = int(n_tasks), noise_seed
        self.alpha, self.beta = float(alpha), float(beta)
        self.fractions = spec.fractions if spec is not None else fractions
        self._given_spec = spec.for_cluster(self.cluster) if spec is not None else None
        self.render_mode = render_mode
        n_actions = 1 + self.cluster.n_gpus * len(self.fractions)
        n_state = self._n_state = 6 + self.cluster.n_devices + 2 * n_actions
        big = np.finfo(np.float64).max
        self.observation_space = spaces.Box(low=-big, high=big, shape=(n_state,), dtype=np.float64)
        self.action_space = spaces.Discrete(n_actions)
        self._stepper: ArrivalStepper | None = None
        self._mask = np.zeros(n_actions, dtype=np.bool_)
        self._prepared: dict[int, Any] = {}

    # --- the Gymnasium API --------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start an episode (class docstring); ``seed`` seeds the env's RNG."""
        super().reset(seed=seed)
        tasks, self.realization, self.X = draw_episode(self._tasks, self._spec, self.n_tasks, self.cluster,
                                                       self.np_random, self.noise_seed)
        self.tasks = tasks
        self.state_spec = self._given_spec or StateSpec.fit(self.X, self.cluster, self.fractions)
        self._hdr = self.state_spec.header(hidden=0)
        self._gpu, self._frac = self.state_spec.action_table()
        self._stepper = ArrivalStepper(tasks, self.cluster, self.realization, self.X)
        self._prepared = {}
        return self._observe(), self._info()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Place the pending task by ``action`` and move to the next task."""
        s = self._stepper
        if s is None or s.finished:
            raise RuntimeError("MachineArrivalEnv.step: call reset() first (the episode has ended)")
        a = int(action)
        valid = bool(0 <= a < self._mask.shape[0] and self._mask[a])
        if not valid:
            a = 0
        i, t = s.i, s.t
        s.place(int(self._gpu[a]), float(self._frac[a]))
        o = s.out
        reward = -(self.alpha * (o["end"][i] - t) / self.state_spec.time_scale
                   + self.beta * o["energy"][i] / self.state_spec.energy_scale)
        obs = self._observe()
        info = self._info()
        info["action_valid"] = valid
        return obs, float(reward), s.finished, False, info

    def action_masks(self) -> np.ndarray:
        """The feasible actions now (a copy): sb3-contrib's MaskablePPO calls this."""
        return self._mask.copy()

    # --- heuristics in the env's terms ------------------------------------------------
    def policy_action(self, policy: Any) -> int:
        """The action a project arrival policy (``EarliestFinishTime(fraction_step=0.25)``,
        ``RoundRobin()``, ...) takes now: its ``decide`` asked with the engine's inputs, its
        ``(gpu, fraction)`` found in the action table.  ValueError when the choice is not a
        feasible action (e.g. a fraction not in ``fractions``), or the policy is not a plain
        arrival policy (late, ordered queues, or learning from completions)."""
        s = self._stepper
        if s is None or s.finished:
            raise RuntimeError("MachineArrivalEnv.policy_action: no decision pending (reset() first)")
        entry = self._prepared.get(id(policy))
        if entry is None:
            if getattr(policy, "dispatch", "arrival") != "arrival" or getattr(policy, "queue_order", None) is not None:
                raise ValueError(f"policy {policy.name!r} is not a plain arrival policy (late dispatch or ordered queues)")
            if getattr(policy, "observe_every", 0):
                raise ValueError(f"policy {policy.name!r} learns from completions, which the env does not deliver")
            policy.prepare(self.tasks, self.cluster, self.X)
            if policy.clairvoyant:
                policy.reveal(self.realization)
            entry = self._prepared[id(policy)] = (policy, _decider(policy, True)[0])
        pdata, params = policy.kernel_data()
        g, f = entry[1](s.i, s.t, s.est, s.true_free, self.X, pdata, params)
        f = min(max(float(f), 0.0), float(self.X[s.i, MAX_F]))  # as the engine clamps it
        hit = np.flatnonzero(self._mask & (self._frac == f) & ((f == 0.0) | (self._gpu == int(g))))
        if not len(hit):
            raise ValueError(f"policy {policy.name!r} places task {s.i} on GPU {g} with fraction {f}, "
                             f"not a feasible action of the env (fractions {list(self.fractions)})")
        return int(hit[0])

    # --- internals ------------------------------------------------------------------
    def _observe(self) -> np.ndarray:
        """The DQN's state of the pending decision, and its mask (zeros once finished)."""
        s = self._stepper
        obs = np.zeros(self._n_state)
        if s.finished:
            self._mask[:] = False
            return obs
        features_into(obs, s.i, s.t, s.est, self.X, self._hdr)
        self._mask[:] = self._frac <= self.X[s.i, MAX_F]  # action 0 (fraction 0) always fits
        return obs

    def _info(self) -> dict[str, Any]:
        s = self._stepper
        info: dict[str, Any] = {"action_mask": self._mask.copy(), "time": s.t, "task": s.i,
                                "tasks_placed": s.decided}
        if s.finished:
            end = s.out["end"]
            info["mean_latency"] = float(np.mean(end - self.tasks.arrival))
            info["makespan"] = float(end.max() - self.tasks.arrival[0])
            info["energy_j"] = float(s.out["energy"].sum())
        return info

    def trace(self, name: str = "env") -> Trace:
        """The episode's schedule as the simulator's :class:`Trace` (complete once the episode
        has terminated; rows of tasks not placed yet are undefined)."""
        s = self._stepper
        if s is None:
            raise RuntimeError("MachineArrivalEnv.trace: call reset() first")
        o = s.out
        return Trace(name, self.tasks.task_id, self.tasks.arrival, s.ready.copy(), o["gpu"].copy(), o["frac"].copy(),
                     o["cs"].copy(), o["ce"].copy(), o["gs"].copy(), o["ge"].copy(), o["gmem"].copy(), o["end"].copy(),
                     o["energy"].copy())


def env_kwargs_from_config(cfg: dict[str, Any], split: str = "test", generated: bool = False,
                           n_tasks: int = DEFAULT_TASKS) -> dict[str, Any]:
    """The env's settings from a composed config: cluster and episodes as the late env's
    (``env.env_kwargs_from_config``: the simulate stage's split and noise, or generated
    episodes), and the arrival DQN's action fractions and reward weights (``dqn``)."""
    kw = _late_kwargs(cfg, split, generated, n_tasks, env_name="MachineArrivalEnv")
    d = cfg.get("dqn") or {}
    for key in ("fractions", "alpha", "beta"):
        if key in d:
            kw[key] = tuple(d[key]) if key == "fractions" else float(d[key])
    return kw
