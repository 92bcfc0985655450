"""Node-placement policies: where a task goes among the nodes it fits now, and the queue order.

One small interface (the engine calls nothing else):

* ``fit(train)``: learn from the training split (estimates, task mix); default no-op;
* ``prepare(inp, cluster)``: batched work before a run;
* ``queue_key()``: per task, the order of the waiting queue (lower first; None = arrival);
* ``choose(i, nodes, state)``: the position in ``nodes`` (feasible nodes, increasing index)
  of the node task ``i`` goes to;
* ``gpus(i, node, state)``: which GPUs of that node (None = best fit: the GPUs with the least
  free capacity that still hold the task);
* ``finish(state)``: end of a run.

What a policy may read: the task's pod fields (resources, qos, gpu_spec), the clock, free
resources, the GPU models' mean speeds (``NodeCluster.model_speed``).  Only the oracle reads
true run times and the per-job-type speeds.

Baselines use FIFO (arrival order); policies with a duration estimate order the queue by it
(shortest estimated first) - that is where an estimate pays off in a work-conserving cluster,
since every feasible node starts the task now and the node choice only sets its speed.
"""

from __future__ import annotations

import numpy as np

from hybridsched.kinds.cluster.trace import MILLI, PodTable
from hybridsched.kinds.cluster.nodes import NodeCluster, RunInputs
from hybridsched.kinds.cluster.engine import ClusterState
from hybridsched.kinds.cluster.fragmentation import node_fragmentation, task_mix


class NodePolicy:
    """Base class: FIFO queue, first feasible node, best-fit GPUs."""

    name: str = "policy"

    def fit(self, train: PodTable) -> None:
        """Learn from the training split (default: nothing to learn)."""

    def prepare(self, inp: RunInputs, cluster: NodeCluster) -> None:
        self.inp = inp
        self.cluster = cluster
        self.has_gpu = cluster.nodes.n_gpu > 0
        self.speed = cluster.model_speed()[cluster.node_model]  # mean speed of each node's GPU model

    def queue_key(self) -> np.ndarray | None:
        return None

    def choose(self, i: int, nodes: np.ndarray, state: ClusterState) -> int:
        return 0

    def gpus(self, i: int, node: int, state: ClusterState) -> np.ndarray | None:
        return None

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

    def prepare(self, inp, cluster) -> None:
        super().prepare(inp, cluster)
        self._next = 0

    def choose(self, i, nodes, state) -> int:
        pos = int(np.searchsorted(nodes, self._next))
        pos = pos if pos < len(nodes) else 0
        self._next = int(nodes[pos]) + 1
        return pos


class Random(NodePolicy):
    """A uniformly random feasible node (seeded)."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def prepare(self, inp, cluster) -> None:
        super().prepare(inp, cluster)
        self._rng = np.random.default_rng(self.seed)

    def choose(self, i, nodes, state) -> int:
        return int(self._rng.integers(len(nodes)))


class Greedy(NodePolicy):
    """Least-loaded feasible node: most free GPU share for GPU tasks, most free CPU share for
    CPU-only tasks (spreads load; the opposite of packing)."""

    name = "greedy"

    def choose(self, i, nodes, state) -> int:
        if self.inp.k[i] > 0:
            cap = self.cluster.gpu_cap[nodes].sum(axis=1)
            load = 1.0 - np.clip(state.gpu_free[nodes], 0, None).sum(axis=1) / cap
        else:
            load = 1.0 - state.cpu_free[nodes] / self.cluster.nodes.cpu_milli[nodes]
        return _first_min(load)


class BestFit(NodePolicy):
    """Packing: the feasible node (and GPUs) left with the least free capacity."""

    name = "best_fit"

    def choose(self, i, nodes, state) -> int:
        return _first_min(self.left_after(i, nodes, state))


class FragmentationGradientDescent(NodePolicy):
    """FGD (Weng et al., ATC 2023): place each task where it increases the expected GPU
    fragmentation of the cluster least.

    A node's fragmentation for a task type ``m = (k GPUs of p milli)`` is the free GPU milli
    that ``m`` cannot use: all of it if fewer than ``k`` GPUs have ``p`` free, else the free
    milli of the GPUs with less than ``p`` free.  Its expected fragmentation weights the types
    by their popularity in the training split (GPU tasks only; CPU and memory are left out of
    the measure).  For a GPU-sharing task every (node, GPU) pair is a candidate; ties and
    CPU-only tasks go best-fit."""

    name = "fgd"

    def fit(self, train: PodTable) -> None:
        self.types, self.popularity = task_mix(train.num_gpu, train.gpu_milli)

    def prepare(self, inp, cluster) -> None:
        super().prepare(inp, cluster)
        if not hasattr(self, "types"):  # not fitted: the run's own mix (tests)
            self.types, self.popularity = task_mix(inp.k, inp.p)
        self._gpu_choice: np.ndarray | None = None

    def choose(self, i, nodes, state) -> int:
        inp = self.inp
        self._gpu_choice = None
        if inp.k[i] == 0 or not len(self.types):
            return _first_min(self.left_after(i, nodes, state))
        free = state.gpu_free[nodes]  # (C, G)
        if inp.k[i] == 1 and inp.p[i] < MILLI:
            # one candidate per (node, GPU that holds the share)
            cn, cg = np.nonzero(free >= inp.p[i])
            after = free[cn].copy()
            after[np.arange(len(cn)), cg] -= inp.p[i]
        else:
            cn = np.arange(len(nodes))
            cg = None
            after = free.copy()
            for c, nd in enumerate(nodes):
                after[c, _best_fit_row(free[c], int(inp.k[i]), inp.p[i])] -= inp.p[i]
        delta = node_fragmentation(after, self.types, self.popularity) - node_fragmentation(free[cn], self.types,
                                                                                           self.popularity)
        best = _first_min(delta, self.left_after(i, nodes, state)[cn])
        if cg is not None:
            self._gpu_choice = np.array([cg[best]])
        return int(cn[best])

    def gpus(self, i, node, state):
        return self._gpu_choice


def _best_fit_row(free: np.ndarray, k: int, p: float) -> np.ndarray:
    ok = np.flatnonzero(free >= p)
    return ok[np.argsort(free[ok], kind="stable")[:k]]


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


class Oracle(EstimatePolicy):
    """Clairvoyant: true run times, and per task the node whose model runs its job type fastest;
    the queue runs the truly shortest task first."""

    name = "oracle"

    def prepare(self, inp, cluster) -> None:
        super().prepare(inp, cluster)
        self.estimate = inp.run_time.min(axis=1)

    def choose(self, i, nodes, state) -> int:
        finish = self.inp.run_time[i, self.cluster.node_model[nodes]]
        return _first_min(finish, self.left_after(i, nodes, state))

