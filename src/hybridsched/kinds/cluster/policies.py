"""Node-placement policies: where a task goes among the nodes it fits now, and the queue order.

One small interface (the engine calls nothing else):

* ``fit(train)``: learn from the training split (estimates, task mix); default no-op;
* ``prepare(inp, cluster)``: batched work before a run (calls ``bind``);
* ``queue_key()``: per task, the order of the waiting queue (lower first; None = arrival);
* ``choose(i, nodes, state)``: the position in ``nodes`` (feasible nodes, increasing index)
  of the node task ``i`` goes to;
* ``gpus(i, node, state)``: which GPUs of that node (None = best fit: the GPUs with the least
  free capacity that still hold the task; for whole GPUs the lowest-index idle ones);
* ``finish(state)``: end of a run.

The scoring policies also expose the two pieces the paper's fragmentation protocol
(``fgd_protocol.py``) runs them by, so both protocols share one implementation:

* ``bind(inp, cluster, rng)``: what scoring reads (no run times needed);
* ``score(i, nodes, state)``: one score per feasible node, lower preferred.  The time-driven
  ``choose`` takes the first minimum (after a policy's own tie-break key, if any); the
  protocol draws uniformly among the minima.

What a policy may read: the task's pod fields (resources, qos, gpu_spec), the clock, free
resources, the GPU models' mean speeds (``NodeCluster.model_speed``).  Only the oracle reads
true run times and the per-job-type speeds.

Baselines use FIFO (arrival order); policies with a duration estimate order the queue by it
(shortest estimated first) - that is where an estimate pays off in a work-conserving cluster,
since every feasible node starts the task now and the node choice only sets its speed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hybridsched.kinds.cluster.state import ClusterState
from hybridsched.kinds.cluster.fragmentation import FragCache, TaskMix, gpu_task_mix, typical_pods
from hybridsched.kinds.cluster.nodes import NodeCluster, RunInputs, pod_class
from hybridsched.kinds.cluster.trace import MILLI, PodTable

if TYPE_CHECKING:
    from hybridsched.kinds.cluster.kernels import Kernel

_TIES = ("choose", "score", "gpus", "left_after")  # what a compiled choice with best-fit ties reproduces

# DotProd's normalisation: the largest node of the trace (128 cores, 8 GPUs)
DOT_CPU_MILLI = 128_000.0
DOT_GPU_MILLI = 8_000.0


def keeps(policy: NodePolicy, cls: type, methods: tuple[str, ...] = ("choose", "score", "gpus")) -> bool:
    """Whether ``policy``'s class still runs ``cls``'s ``methods``: a compiled choice reproduces
    exactly those, so a subclass that overrides one runs in the Python loop instead."""
    return all(getattr(type(policy), m) is getattr(cls, m) for m in methods)


class NodePolicy:
    """Base class: FIFO queue, first feasible node, best-fit GPUs."""

    name: str = "policy"

    def fit(self, train: PodTable) -> None:
        """Learn from the training split (default: nothing to learn)."""

    def bind(self, inp: RunInputs, cluster: NodeCluster, rng: np.random.Generator | None = None) -> None:
        """What scoring reads: the pods' arrays, the cluster, and a random generator (default:
        seeded with the policy's ``seed``, 0 if it has none)."""
        self.inp = inp
        self.cluster = cluster
        self.has_gpu = cluster.nodes.n_gpu > 0
        self.rng = rng if rng is not None else np.random.default_rng(getattr(self, "seed", 0))

    def prepare(self, inp: RunInputs, cluster: NodeCluster) -> None:
        self.bind(inp, cluster)
        self.speed = cluster.model_speed()[cluster.node_model]  # mean speed of each node's GPU model

    def queue_key(self) -> np.ndarray | None:
        return None

    def score(self, i: int, nodes: np.ndarray, state: ClusterState) -> np.ndarray:
        """Score of each feasible node for task ``i``, lower preferred (base: all alike)."""
        return np.zeros(len(nodes))

    def choose(self, i: int, nodes: np.ndarray, state: ClusterState) -> int:
        return _first_min(self.score(i, nodes, state))

    def gpus(self, i: int, node: int, state: ClusterState) -> np.ndarray | None:
        return None

    def kernel(self) -> Kernel | None:
        """The compiled form of this policy's choice (``kernel_choice``; the engine runs the
        compiled loop with it), None for the Python loop.  Called after ``prepare``."""
        from hybridsched.kinds.cluster import kernel_choice as K

        return K.first_kernel(self) if keeps(self, NodePolicy) else None

    def finish(self, state: ClusterState) -> None:
        """End of a run (learning policies close their last transition here)."""

    # --- shared scores (lower = preferred) -----------------------------------------------------
    def left_after(self, i: int, nodes: np.ndarray, state: ClusterState) -> np.ndarray:
        """Best-fit score: GPU tasks, the node's free GPU milli after placing; CPU-only tasks, nodes
        without GPUs first (GPU nodes keep their CPUs for GPU tasks), then free CPU after."""
        inp = self.inp
        if inp.k[i] > 0:
            free_gpu = np.clip(state.gpu_free[nodes], 0, None).sum(axis=1) - inp.k[i] * inp.p[i]
            return free_gpu + (state.cpu_free[nodes] - inp.cpu[i]) / (MILLI * 1e3)
        return self.has_gpu[nodes] * 1e12 + state.cpu_free[nodes] - inp.cpu[i]


def _first_min(*keys: np.ndarray) -> int:
    """Position of the lexicographic minimum (first key most significant; ties: first position)."""
    return int(np.lexsort(tuple(reversed(keys)))[0])


class RoundRobin(NodePolicy):
    """The next feasible node after the one used last, cycling through the node list."""

    name = "round_robin"
    role = "baseline"  # kinds.base.declaration

    def prepare(self, inp, cluster) -> None:
        super().prepare(inp, cluster)
        self._next = 0

    def choose(self, i, nodes, state) -> int:
        pos = int(np.searchsorted(nodes, self._next))
        pos = pos if pos < len(nodes) else 0
        self._next = int(nodes[pos]) + 1
        return pos

    def kernel(self) -> Kernel | None:
        from hybridsched.kinds.cluster import kernel_choice as K

        return K.round_robin_kernel(self) if keeps(self, RoundRobin, ("choose", "score", "gpus", "prepare")) else None


class Random(NodePolicy):
    """A uniformly random feasible node (seeded); with ``random_gpus`` also random fitting GPUs
    within it (the paper's Random), else the best-fit GPUs."""

    name = "random"
    role = "baseline"  # kinds.base.declaration

    def __init__(self, seed: int = 0, random_gpus: bool = False) -> None:
        self.seed = seed
        self.random_gpus = random_gpus

    def choose(self, i, nodes, state) -> int:
        return int(self.rng.integers(len(nodes)))

    def gpus(self, i, node, state):
        if not self.random_gpus:
            return None
        return random_gpus(state.gpu_free[node], int(self.inp.k[i]), self.inp.p[i], self.rng)

    def kernel(self) -> Kernel | None:
        from hybridsched.kinds.cluster import kernel_choice as K

        return K.random_kernel(self) if keeps(self, Random) and not self.random_gpus else None


class Greedy(NodePolicy):
    """Least-loaded feasible node: most free GPU share for GPU tasks, most free CPU share for
    CPU-only tasks (spreads load; the opposite of packing)."""

    name = "greedy"

    def score(self, i, nodes, state) -> np.ndarray:
        if self.inp.k[i] > 0:
            cap = self.cluster.gpu_cap[nodes].sum(axis=1)
            return 1.0 - np.clip(state.gpu_free[nodes], 0, None).sum(axis=1) / cap
        return 1.0 - state.cpu_free[nodes] / self.cluster.nodes.cpu_milli[nodes]

    def kernel(self) -> Kernel | None:
        from hybridsched.kinds.cluster import kernel_choice as K

        return K.greedy_kernel(self) if keeps(self, Greedy) else None


class BestFit(NodePolicy):
    """Packing, GPU first: the feasible node (and GPUs) left with the least free GPU milli
    (CPU-only tasks: nodes without GPUs first, then least free CPU); see :meth:`left_after`."""

    name = "best_fit"

    def score(self, i, nodes, state) -> np.ndarray:
        return self.left_after(i, nodes, state)

    def kernel(self) -> Kernel | None:
        from hybridsched.kinds.cluster import kernel_choice as K

        return K.best_fit_kernel(self) if keeps(self, BestFit, _TIES) else None


class BestFitNormalized(NodePolicy):
    """The paper's BestFit: least free capacity left after placing, over [CPU, total GPU milli]
    with equal weights, each min-max normalised across the feasible nodes."""

    name = "best_fit_normalized"

    def score(self, i, nodes, state) -> np.ndarray:
        inp = self.inp
        cpu_left = state.cpu_free[nodes] - inp.cpu[i]
        gpu_left = np.clip(state.gpu_free[nodes], 0, None).sum(axis=1) - inp.k[i] * inp.p[i]
        return _minmax(cpu_left) + _minmax(gpu_left)


class DotProd(NodePolicy):
    """The paper's DotProd (Tetris-like): the node whose free [CPU, GPU milli] vector has the
    smallest dot product with the task's request, both scaled by the largest node (128 cores,
    8 GPUs); the simulator's score 1 - dot/2 is highest there."""

    name = "dot_prod"

    def score(self, i, nodes, state) -> np.ndarray:
        inp = self.inp
        free_gpu = np.clip(state.gpu_free[nodes], 0, None).sum(axis=1)
        return (state.cpu_free[nodes] / DOT_CPU_MILLI * (inp.cpu[i] / DOT_CPU_MILLI)
                + free_gpu / DOT_GPU_MILLI * (inp.k[i] * inp.p[i] / DOT_GPU_MILLI))


class GpuClustering(NodePolicy):
    """The paper's GpuClustering: nodes that already hold tasks of the same class (GPU-sharing,
    whole-GPU, CPU-only; ``nodes.POD_CLASSES``) first, then the most allocated GPU share."""

    name = "gpu_clustering"

    def score(self, i, nodes, state) -> np.ndarray:
        same = state.n_class[nodes, pod_class(int(self.inp.k[i]), self.inp.p[i])] > 0
        cap = self.cluster.gpu_cap[nodes].sum(axis=1)
        free = np.clip(state.gpu_free[nodes], 0, None).sum(axis=1)
        allocated = np.divide(cap - free, cap, out=np.zeros(len(nodes)), where=cap > 0)
        return np.where(same, 0.0, 2.0) + (1.0 - allocated)


class GpuPacking(NodePolicy):
    """The paper's GpuPacking: nodes whose GPUs are partly allocated first, idle nodes last;
    within a tier the tightest fit (a GPU-sharing task: the least milli left on the GPU it takes;
    other tasks: the least GPU milli left on the node)."""

    name = "gpu_packing"

    def score(self, i, nodes, state) -> np.ndarray:
        inp = self.inp
        free = state.gpu_free[nodes]
        idle = ~np.any((free >= 0) & (free < self.cluster.gpu_cap[nodes]), axis=1)
        if inp.k[i] == 1 and inp.p[i] < MILLI:
            left = np.where(free >= inp.p[i], free - inp.p[i], np.inf).min(axis=1)
        else:
            left = np.clip(free, 0, None).sum(axis=1) - inp.k[i] * inp.p[i]
        return idle * PACKING_TIER + left


PACKING_TIER = 1e6  # above any node's GPU milli (64 GPUs at most): idle nodes always rank last


class FragmentationGradientDescent(NodePolicy):
    """FGD (Weng et al., ATC 2023): place each task where it increases the expected GPU
    fragmentation of the cluster least (``fragmentation.fgd_scores``); a GPU-sharing task takes
    the GPU that achieves it.  The task mix comes from ``fit``'s pods:

    * ``coverage: null`` (the time-driven default): every distinct ``(k, p)`` of the GPU tasks,
      no CPU or model condition; ties (and CPU-only tasks, which change nothing then) go best fit;
    * ``coverage: 0.95`` (the paper): the typical pods, the most frequent (CPU, GPU milli, GPU
      count, GPU model) shapes covering that share of the pods, CPU-only ones included."""

    name = "fgd"

    def __init__(self, coverage: float | None = None) -> None:
        if coverage is not None and not 0 < coverage <= 1:
            raise ValueError(f"fgd coverage must be in (0, 1] or null, got {coverage}")
        self.coverage = coverage
        self._mix_pods: PodTable | None = None

    def fit(self, train: PodTable) -> None:
        self._mix_pods = train  # the mix needs the cluster's models: built in bind

    def bind(self, inp, cluster, rng=None) -> None:
        super().bind(inp, cluster, rng)
        pods = inp.tasks if self._mix_pods is None else self._mix_pods  # not fitted: the run's own mix
        self.mix = self.task_mix(pods, cluster.models)
        self._cand: tuple[np.ndarray, np.ndarray] | None = None
        self._cache: tuple[ClusterState, FragCache] | None = None

    def task_mix(self, pods: PodTable, models: tuple[str, ...]) -> TaskMix:
        """The mix this FGD measures fragmentation with (see the class docstring)."""
        if self.coverage is None:
            return gpu_task_mix(pods.num_gpu, pods.gpu_milli, len(models))
        return typical_pods(pods.cpu_milli, pods.num_gpu, pods.gpu_milli, pods.gpu_spec, models, self.coverage)

    def score(self, i, nodes, state) -> np.ndarray:
        inp = self.inp
        if self._cache is None or self._cache[0] is not state:  # a new run: fresh statistics
            self._cache = (state, FragCache(self.mix, self.cluster.n_nodes))
        cache, model = self._cache[1], self.cluster.node_model
        delta, gpu = cache.fgd(nodes, state.gpu_free, state.cpu_free, model, state.version, inp.cpu[i],
                               int(inp.k[i]), inp.p[i])
        self._cand = (nodes, gpu)
        return delta

    def choose(self, i, nodes, state) -> int:
        return _first_min(self.score(i, nodes, state), self.left_after(i, nodes, state))

    def kernel(self) -> Kernel | None:
        from hybridsched.kinds.cluster import kernel_choice as K

        return K.fgd_kernel(self) if keeps(self, FragmentationGradientDescent, _TIES) else None

    def gpus(self, i, node, state):
        nodes, gpu = self._cand
        g = int(gpu[np.searchsorted(nodes, node)])
        return None if g < 0 else np.array([g])


def random_gpus(free: np.ndarray, k: int, p: float, rng: np.random.Generator) -> np.ndarray:
    """``k`` GPUs drawn uniformly among those of a node (free milli ``free``) that hold ``p``."""
    ok = np.flatnonzero(free >= p)
    return np.sort(rng.choice(ok, size=k, replace=False)) if k else np.zeros(0, dtype=np.int64)


def _minmax(v: np.ndarray) -> np.ndarray:
    """``v`` scaled to [0, 1] across its entries (all equal: zeros)."""
    lo, hi = v.min(), v.max()
    return (v - lo) / (hi - lo) if hi > lo else np.zeros(len(v))


class EstimatePolicy(NodePolicy):
    """Earliest estimated finish: the queue runs the shortest estimated task first, and a task
    goes to the feasible node whose GPU model is fastest on average (every feasible node starts
    it now, so that is its earliest estimated finish); ties best-fit.  Subclasses set
    ``estimate`` (seconds on the reference GPU) in ``prepare``."""

    estimate: np.ndarray

    def queue_key(self) -> np.ndarray:
        return self.estimate

    def choose(self, i, nodes, state) -> int:
        finish = self.estimate[i] / self.speed[nodes] if self.inp.k[i] > 0 else np.zeros(len(nodes))
        return _first_min(finish, self.left_after(i, nodes, state))


class EarliestFinishTime(EstimatePolicy):
    """EFT with a class-mean estimate: the mean training duration of the task's (qos, num_gpu)
    class (falling back to the qos class, then to the overall mean)."""

    name = "eft"

    def fit(self, train: PodTable) -> None:
        df = train.to_frame()
        self._by_class = df.groupby(["qos", "num_gpu"])["duration"].mean().to_dict()
        self._by_qos = df.groupby("qos")["duration"].mean().to_dict()
        self._overall = float(df["duration"].mean())

    def prepare(self, inp, cluster) -> None:
        super().prepare(inp, cluster)
        if not hasattr(self, "_overall"):
            raise RuntimeError("eft needs fit(train) before a run")
        t = inp.tasks
        self.estimate = np.array([self._by_class.get((q, k), self._by_qos.get(q, self._overall))
                                  for q, k in zip(t.qos, t.num_gpu, strict=True)], dtype=np.float64)

    def kernel(self) -> Kernel | None:
        from hybridsched.kinds.cluster import kernel_choice as K

        return K.table_kernel(self, K.estimate_table(self)) if keeps(self, EarliestFinishTime, _TIES) else None


class Oracle(EstimatePolicy):
    """Clairvoyant: true run times, and per task the node whose model runs its job type fastest;
    the queue runs the truly shortest task first."""

    name = "oracle"
    role = "clairvoyant"  # kinds.base.declaration

    def prepare(self, inp, cluster) -> None:
        super().prepare(inp, cluster)
        self.estimate = inp.run_time.min(axis=1)

    def choose(self, i, nodes, state) -> int:
        finish = self.inp.run_time[i, self.cluster.node_model[nodes]]
        return _first_min(finish, self.left_after(i, nodes, state))

    def kernel(self) -> Kernel | None:
        from hybridsched.kinds.cluster import kernel_choice as K

        return K.table_kernel(self, self.inp.run_time) if keeps(self, Oracle, _TIES) else None

