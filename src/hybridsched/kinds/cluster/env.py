"""The cluster kind's queue mode as a Gymnasium environment (``hybridsched/cluster-queue-v0``).

``import hybridsched.envs`` registers the id; then ``gymnasium.make("hybridsched/cluster-queue-v0",
pods=..., nodes=..., gavel_path=...)``.  docs/train-your-own-agent.md shows its settings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
from gymnasium import spaces

from hybridsched.errors import HybridschedError
from hybridsched.kinds.cluster.nodes import CPU_MODEL, NodeCluster, fits_any_node, run_inputs
from hybridsched.kinds.cluster.policies import EarliestFinishTime, NodePolicy, Oracle
from hybridsched.kinds.cluster.queue_engine import QueueOrder, QueueRun
from hybridsched.kinds.cluster.queue_order import BACKLOG_SCALE
from hybridsched.kinds.cluster.speeds import speed_table
from hybridsched.kinds.cluster.trace import MILLI, NodeTable, PodTable, read_node_list, read_pod_trace

ENV_ID = "hybridsched/cluster-queue-v0"
# the node policies a name picks (queue mode needs a duration estimate); an instance may be given instead
NODE_POLICIES: dict[str, type[NodePolicy]] = {"eft": EarliestFinishTime, "oracle": Oracle}
# one row per candidate pod, each column >= 0
FEATURES = ("est", "wait", "wait_ratio", "gpus", "cpu", "mem", "slow_now", "fit_share", "backlog", "gpu_busy")
N_FEATURES = len(FEATURES)
HOUR = 3600.0


def read_pods(pods: PodTable | str | Path, time_compression: float = 1.0) -> PodTable:
    """A pod table: given, or read from a split file the generate stage wrote (``.parquet``) or
    a pod list CSV in the trace's schema (its creation times divided by ``time_compression``)."""
    if isinstance(pods, PodTable):
        return pods
    p = Path(pods)
    if p.suffix == ".parquet":
        if not p.is_file():
            raise HybridschedError(f"{p}: not found (the pod table of a split; run the generate stage)")
        return PodTable.from_frame(pd.read_parquet(p), source=str(p))
    return read_pod_trace(p, float(time_compression))[0]


def read_node_table(nodes: NodeTable | str | Path) -> NodeTable:
    """A node table: given, or read from ``nodes.parquet`` (generate's sample) or a node list CSV."""
    if isinstance(nodes, NodeTable):
        return nodes
    p = Path(nodes)
    if p.suffix == ".parquet":
        if not p.is_file():
            raise HybridschedError(f"{p}: not found (the node sample; run the generate stage)")
        return NodeTable.from_frame(pd.read_parquet(p), source=str(p))
    return read_node_list(p)


class ClusterQueueEnv(gym.Env):
    """The queue mode with greedy backfilling (``queue_engine.py``): at every event (an arrival,
    or the completions of one instant) the agent picks, one pod at a time, which pending pod
    starts next; the node policy (``eft`` by default) places it; the pass goes on while some
    pending pod fits a node, then the clock moves to the next event.

    **Episode.**  One run of ``pods`` (a pod table, or a file's path: a split's ``.parquet`` as
    the generate stage writes it, or a pod list CSV of the trace's schema with its creation
    times divided by ``time_compression``) on the nodes of ``nodes`` (table, ``nodes.parquet``
    or node list CSV) with the Gavel speeds of ``gavel_path`` (``reference_model``: the GPU the
    durations were measured on).  With ``window = (min_pods, max_pods)`` each episode is a
    window of consecutive pods of random length and start instead, shifted to start at 0, its
    arrivals divided by a load factor ``U(*load)`` (the queue trainer's scenarios,
    ``queue_train.py``), drawn with the env's RNG; ``reset(seed=...)`` seeds it.  The node
    policy is fitted once on ``train_pods`` (default: ``pods``).  Each step is one decision; an
    event where no pending pod fits is passed over.  The episode terminates when every pod has
    ended; it is never truncated.

    **Observation, mask and action**: a ``Box`` of shape ``(max_candidates, N_FEATURES)``
    (float64, each entry >= 0): one row per candidate, the pending pods that fit some node now,
    in arrival order (rows past the last candidate are 0; candidates past ``max_candidates``
    are not offered, ``info["candidates"]`` counts them all).  The columns (:data:`FEATURES`):
    ``log1p(est / 1 h)`` (the node policy's estimate), ``log1p(wait / 1 h)``,
    ``log1p(wait / est)``, ``log1p(GPUs)`` (GPU share summed), cores and memory over the largest
    node's, ``slow_now`` (``log`` of the fastest allowed speed over the fastest among the nodes
    it fits now, as ``LearnedOrder``'s), the share of the nodes it fits now, then two columns
    the same in every row: the backlog ``log1p(pods pending) / 4`` and the share of the
    cluster's GPU capacity in use.  ``Discrete(max_candidates)`` actions, one per row;
    :meth:`action_masks` (sb3-contrib's MaskablePPO reads it) and ``info["action_mask"]`` give
    the feasible ones.  A masked-out action starts candidate 0 and sets ``info["action_valid"]``
    to False.

    **Reward** (what the queue learners minimise, ``queue_train.py``: the mean JCT): decision
    ``k`` at time ``t_k`` earns ``-integral_{t_k}^{t_k+1} N(t) dt / m``, ``N`` the pods arrived
    and not ended, ``m`` the episode's mean estimated run time (at least 1 s); the last
    decision's runs to the last pod's end.  The first decision is at the first arrival, so an
    episode's return is minus the total JCT over ``m``: maximising it minimises the mean JCT
    (``info["mean_jct"]`` at the end).  Decisions of one pass share an instant: all but the
    pass's last earn 0.

    ``info``: ``action_mask``, ``candidates``, ``time``, ``pending`` (pods waiting),
    ``pods_done``; after a step ``action_valid``; at the end ``mean_jct`` and ``makespan`` (s).
    :meth:`policy_action` gives the action a :class:`~queue_engine.QueueOrder` (``fifo``,
    ``sjf``, ``learned`` ...) takes now, so that driven by it the env gives
    ``simulate_queue(..., backfill="greedy")``'s schedule; :meth:`trace` is the episode's
    schedule as the engine's ``NodeTrace``.
    """

    metadata = {"render_modes": []}

    def __init__(self, pods: PodTable | str | Path, nodes: NodeTable | str | Path, gavel_path: str | Path,
                 reference_model: str = "G2", train_pods: PodTable | str | Path | None = None,
                 node_policy: str | NodePolicy = "eft", time_compression: float = 1.0,
                 window: tuple[int, int] | None = None, load: tuple[float, float] = (1.0, 1.0),
                 max_candidates: int = 32, render_mode: str | None = None) -> None:
        if int(max_candidates) < 1:
            raise HybridschedError(f"ClusterQueueEnv: max_candidates must be >= 1, got {max_candidates}")
        if isinstance(node_policy, str) and node_policy not in NODE_POLICIES:
            raise HybridschedError(f"ClusterQueueEnv: node_policy must be one of {sorted(NODE_POLICIES)} or a "
                                   f"policy instance with a duration estimate, got {node_policy!r}")
        self.pods = read_pods(pods, time_compression)
        node_table = read_node_table(nodes)
        models = sorted({str(m) for m in node_table.model if m != CPU_MODEL})
        self.cluster = NodeCluster.build(node_table, speed_table(gavel_path, models, str(reference_model)))
        if window is not None:
            lo, hi = (int(v) for v in window)
            if not 1 <= lo <= hi:
                raise HybridschedError(f"ClusterQueueEnv: window must be (min_pods, max_pods) with "
                                       f"1 <= min_pods <= max_pods, got {window!r}")
            window = (lo, hi)
        lo_load, hi_load = (float(v) for v in load)
        if not 0 < lo_load <= hi_load < np.inf:
            raise HybridschedError(f"ClusterQueueEnv: load must be (low, high) with 0 < low <= high, got {load!r}")
        self.window, self.load = window, (lo_load, hi_load)
        self.node_policy = NODE_POLICIES[node_policy]() if isinstance(node_policy, str) else node_policy
        self.node_policy.fit(self.pods if train_pods is None else read_pods(train_pods, time_compression))
        self.max_candidates = int(max_candidates)
        self.render_mode = render_mode
        high = np.full((self.max_candidates, N_FEATURES), np.finfo(np.float64).max)
        self.observation_space = spaces.Box(low=np.zeros_like(high), high=high, dtype=np.float64)
        self.action_space = spaces.Discrete(self.max_candidates)
        speed = self.cluster.model_speed()
        self._gpu_speed = speed[self.cluster.node_model]  # (N,) each node's mean GPU speed
        self._gpu_cap = float(self.cluster.gpu_cap.sum())
        self._cpu_top = float(node_table.cpu_milli.max())
        self._mem_top = float(node_table.memory_mib.max())
        full = run_inputs(self.pods, self.cluster)
        fits = fits_any_node(full, self.cluster)
        if not fits.all():  # at construction, not at a later reset (a window may hold it)
            bad = int(np.flatnonzero(~fits)[0])
            raise HybridschedError(f"ClusterQueueEnv: pod {self.pods.name[bad]!r} fits no node of the cluster "
                                   f"even when it is empty")
        self._full_inp = None if window is not None else full
        self._run: QueueRun | None = None
        self._mask = np.zeros(self.max_candidates, dtype=np.bool_)
        self._cand = np.zeros(0, dtype=np.int64)

    # --- the Gymnasium API --------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start an episode (class docstring); ``seed`` seeds the env's RNG."""
        super().reset(seed=seed)
        inp = self._full_inp if self._full_inp is not None else self._draw_window()
        run = QueueRun(inp, self.cluster, self.node_policy, None, "greedy")
        self._run, self.inp = run, inp
        est = np.maximum(np.asarray(run.est, dtype=np.float64), 1.0)
        self._est = est
        self._m = float(np.mean(est))
        gpu = inp.k > 0
        node_speed = np.where(gpu[:, None], self._gpu_speed[None, :], 1.0)  # (pods, N)
        self._node_speed = node_speed
        self._best_speed = np.where(inp.allowed[:, self.cluster.node_model], node_speed, 0.0).max(axis=1)
        self._static = np.column_stack([np.log1p(est / HOUR), np.log1p(inp.k * inp.p / MILLI),
                                        inp.cpu / self._cpu_top, inp.mem / self._mem_top])
        self._events = run.events()
        self._passes = 0
        self._scores: dict[int, np.ndarray] = {}
        self._prepared: dict[int, QueueOrder] = {}
        self._done = False
        self._cand = np.zeros(0, dtype=np.int64)
        obs = self._next_decision()
        self._area_at = run.area  # rewards count from the first decision on
        return obs, self._info()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Start candidate ``action`` where the node policy places it, and run to the next decision."""
        run = self._run
        if run is None or self._done:
            raise RuntimeError("ClusterQueueEnv.step: call reset() first (the episode has ended)")
        a = int(action)
        valid = 0 <= a < self.max_candidates and bool(self._mask[a])
        i = int(self._cand[a if valid else 0])
        run.start_pod(i)
        self._cand = self._cand[self._cand != i]  # resources only shrink within a pass: the rest are re-checked
        obs = self._next_decision()
        reward = -(run.area - self._area_at) / self._m
        self._area_at = run.area
        info = self._info()
        info["action_valid"] = valid
        return obs, reward, self._done, False, info

    def action_masks(self) -> np.ndarray:
        """The feasible actions now (a copy): sb3-contrib's MaskablePPO calls this."""
        return self._mask.copy()

    # --- heuristics in the env's terms ------------------------------------------------
    def policy_action(self, order: QueueOrder) -> int:
        """The action the queue order ``order`` takes now: its scores at the start of this pass
        (as ``simulate_queue`` computes them, once a pass), the lowest-scored candidate (ties:
        arrival order).  ValueError when that candidate is past ``max_candidates``."""
        run = self._run
        if run is None or self._done:
            raise RuntimeError("ClusterQueueEnv.policy_action: no decision pending (reset() first)")
        if id(order) not in self._prepared:
            order.prepare(self.inp, self.cluster, run.est)
            self._prepared[id(order)] = order
        key = id(order)
        if key not in self._scores:
            state = run.state
            now_waiting, state.n_waiting = state.n_waiting, len(self._pass_ids)
            try:
                sc = np.asarray(order.scores(self._pass_ids, state.t, state, self._pass_fit), dtype=np.float64)
            finally:
                state.n_waiting = now_waiting
            self._scores[key] = sc
        sc = self._scores[key][np.searchsorted(self._pass_ids, self._cand)]
        pos = int(np.lexsort((self._cand, sc))[0])
        if pos >= self.max_candidates:
            raise ValueError(f"order {order.name!r} picks candidate {pos}, past max_candidates "
                             f"({self.max_candidates})")
        return pos

    def trace(self):
        """The episode's schedule so far as the engine's ``NodeTrace`` (pods not started: NaN, node -1)."""
        if self._run is None:
            raise RuntimeError("ClusterQueueEnv.trace: call reset() first")
        return self._run.trace()

    # --- internals ------------------------------------------------------------------
    def _draw_window(self):
        """A window of consecutive pods (env's RNG), shifted to 0, arrivals divided by the load."""
        rng = self.np_random
        assert self.window is not None
        n = len(self.pods)
        size = int(rng.integers(min(self.window[0], n), min(self.window[1], n) + 1))
        start = int(rng.integers(0, n - size + 1))
        factor = float(rng.uniform(*self.load))
        pods = self.pods.subset(np.arange(start, start + size))
        pods.arrival = (pods.arrival - pods.arrival[0]) / factor
        return run_inputs(pods, self.cluster)

    def _next_decision(self) -> np.ndarray:
        """Run to the next decision (candidates that fit now) or the end; its observation."""
        run = self._run
        assert run is not None
        state, inp = run.state, self.inp
        if len(self._cand):  # the pass goes on: which of its candidates still fit
            self._cand = self._cand[state.fits(inp, self._cand, run.all_nodes).any(axis=1)]
        while not len(self._cand):
            try:
                next(self._events)
            except StopIteration:
                self._done = True
                self._mask[:] = False
                return np.zeros(self.observation_space.shape)
            if not run.queue:
                continue
            run.begin_pass()
            self._passes += 1
            self._scores = {}
            self._pass_ids = np.array(run.queue, dtype=np.int64)  # arrival order: sorted
            self._pass_fit = state.fits(inp, self._pass_ids, run.all_nodes)
            self._cand = self._pass_ids[self._pass_fit.any(axis=1)]
        return self._observe()

    def _observe(self) -> np.ndarray:
        run = self._run
        assert run is not None
        state, inp = run.state, self.inp
        c = self._cand[:self.max_candidates]
        m = len(c)
        self._mask[:] = False
        self._mask[:m] = True
        obs = np.zeros((self.max_candidates, N_FEATURES))
        fit = state.fits(inp, c, run.all_nodes)
        wait = state.t - inp.arrival[c]
        now = np.where(fit, self._node_speed[c], 0.0).max(axis=1)
        obs[:m, 0] = self._static[c, 0]
        obs[:m, 1] = np.log1p(wait / HOUR)
        obs[:m, 2] = np.log1p(wait / self._est[c])
        obs[:m, 3:6] = self._static[c, 1:]
        obs[:m, 6] = np.maximum(np.log(self._best_speed[c] / np.maximum(now, 1e-9)), 0.0)
        obs[:m, 7] = fit.mean(axis=1)
        obs[:m, 8] = np.log1p(len(run.queue)) / BACKLOG_SCALE
        if self._gpu_cap > 0:
            obs[:m, 9] = 1.0 - float(np.clip(state.gpu_free, 0.0, None).sum()) / self._gpu_cap
        return obs

    def _info(self) -> dict[str, Any]:
        run = self._run
        assert run is not None
        info: dict[str, Any] = {"action_mask": self._mask.copy(), "candidates": int(len(self._cand)),
                                "time": float(run.state.t), "pending": len(run.queue), "pods_done": run.ended}
        if self._done:
            info["mean_jct"] = float(np.mean(run.end - self.inp.arrival))
            info["makespan"] = float(run.end.max() - self.inp.arrival[0])
        return info


def env_kwargs_from_config(cfg: dict[str, Any], split: str = "test", window: tuple[int, int] | None = None,
                           load: tuple[float, float] = (1.0, 1.0)) -> dict[str, Any]:
    """The env's settings from a composed config (``params.yaml``, or Hydra's ``compose`` as
    plain containers): the generate stage's files (``paths.workload_dir``: the ``split``'s pods,
    the node sample; the node policy fitted on the training split, as the stages fit it) and the
    Gavel speeds of ``nodes``; ``window``/``load``: episodes drawn from that split instead."""
    w = cfg["workload"]
    if w.get("kind") != "cluster":
        raise HybridschedError(f"ClusterQueueEnv: workload.kind is {w.get('kind')!r}; the env is the cluster kind's")
    if split not in ("train", "test"):
        raise HybridschedError(f"ClusterQueueEnv: split must be train or test, got {split!r}")
    d = Path(cfg["paths"]["workload_dir"])
    return {"pods": str(d / f"{split}.parquet"), "nodes": str(d / "nodes.parquet"),
            "train_pods": str(d / "train.parquet"), "gavel_path": cfg["nodes"]["gavel_path"],
            "reference_model": str(cfg["nodes"].get("reference_model", "G2")), "window": window, "load": load}
