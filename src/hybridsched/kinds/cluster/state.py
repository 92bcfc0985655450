"""What a node-cluster scheduler sees: free resources per node and GPU, the clock, queue and
running counts (:class:`ClusterState`), and the best-fit GPU choice.

Below both the engine (``engine.py``, which updates the state) and the policies
(``policies.py``, which read it), so neither imports the other.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hybridsched.kinds.cluster.nodes import POD_CLASSES, NodeCluster, RunInputs, pod_class


class ClusterState:
    """What a scheduler can see: free resources now, the clock, queue and running counts."""

    def __init__(self, cluster: NodeCluster) -> None:
        self.cluster = cluster
        self.cpu_free = cluster.nodes.cpu_milli.astype(np.float64).copy()
        self.mem_free = cluster.nodes.memory_mib.astype(np.float64).copy()
        # -1 marks a GPU slot the node does not have: it never fits and never counts as free
        self.gpu_free = np.where(cluster.gpu_cap > 0, cluster.gpu_cap, -1.0)
        self.gpu_sorted = -np.sort(-self.gpu_free, axis=1)  # per node, free milli in decreasing order
        self.version = np.zeros(cluster.n_nodes, dtype=np.int64)  # bumped by every change of a node
        self.n_class = np.zeros((cluster.n_nodes, len(POD_CLASSES)), dtype=np.int64)  # pods per node and class
        self.t = 0.0
        self.n_waiting = 0
        self.n_running = 0

    def fits(self, inp: RunInputs, rows: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """(len(rows), len(nodes)) bool: task ``rows[a]`` fits node ``nodes[b]`` now."""
        ok = (inp.cpu[rows, None] <= self.cpu_free[None, nodes]) & (inp.mem[rows, None] <= self.mem_free[None, nodes])
        ok &= inp.allowed[rows][:, self.cluster.node_model[nodes]]
        k = inp.k[rows]
        # the k-th largest free GPU on the node must hold p milli (k = 0: no GPU needed)
        kth = self.gpu_sorted[nodes][:, np.maximum(k - 1, 0)].T
        ok &= (k[:, None] == 0) | (kth >= inp.p[rows, None])
        return ok

    def fits_one(self, inp: RunInputs, i: int) -> np.ndarray:
        """(N,) bool: task ``i`` fits each node now (:meth:`fits` for one task, compiled)."""
        return _fits_one(inp.cpu[i], inp.mem[i], int(inp.k[i]), inp.p[i], inp.allowed[i], self.cpu_free,
                         self.mem_free, self.cluster.node_model, self.gpu_sorted)

    def take(self, n: int, gpus: np.ndarray, cpu: float, mem: float, p: float, sign: float) -> None:
        """Allocate (sign -1) or release (+1) resources on node ``n``."""
        self.n_class[n, pod_class(len(gpus), p)] -= int(sign)
        self.version[n] += 1
        self.cpu_free[n] += sign * cpu
        self.mem_free[n] += sign * mem
        if len(gpus):
            self.gpu_free[n, gpus] += sign * p
            self.gpu_sorted[n] = -np.sort(-self.gpu_free[n])


@njit(cache=True)
def _fits_one(cpu, mem, k, p, allowed, cpu_free, mem_free, node_model, gpu_sorted):  # pragma: no cover
    ok = np.empty(cpu_free.shape[0], dtype=np.bool_)
    for n in range(cpu_free.shape[0]):
        ok[n] = (cpu <= cpu_free[n] and mem <= mem_free[n] and allowed[node_model[n]]
                 and (k == 0 or (k <= gpu_sorted.shape[1] and gpu_sorted[n, k - 1] >= p)))
    return ok


def best_fit_gpus(state: ClusterState, n: int, k: int, p: float) -> np.ndarray:
    """The ``k`` GPUs of node ``n`` with the least free capacity that still holds ``p`` each."""
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    free = state.gpu_free[n]
    ok = np.flatnonzero(free >= p)
    return np.sort(ok[np.argsort(free[ok], kind="stable")[:k]])
