"""Lower bounds on makespan and mean JCT of a node-cluster run; they hold for every policy.

Relaxation: each task runs ``best_i`` = its true run time on the fastest GPU model that it is
allowed on and that the cluster has (CPU-only tasks: their duration), starting at arrival.

* mean JCT >= mean(best_i) (no task waits, every task on its best model);
* makespan >= max_i(arrival_i + best_i), and >= ``s + W(s) / C`` for every arrival time ``s``,
  where ``W(s)`` is the GPU work (GPU-seconds at best speed) of the tasks arriving at or after
  ``s`` and ``C`` the cluster's GPU count (fluid relaxation); the same with CPU work and cores.
Both are measured from the first arrival.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybridsched.kinds.cluster.trace import MILLI
from hybridsched.kinds.cluster.nodes import NodeCluster, RunInputs, fits_empty


@dataclass(frozen=True)
class NodeLowerBound:
    makespan: float
    mean_latency: float  # mean JCT


def best_run_times(inp: RunInputs, cluster: NodeCluster) -> np.ndarray:
    """Per task, its true run time on the fastest GPU model it may use in this cluster (allowed,
    present, on a node it fits); CPU-only tasks: their duration."""
    usable = np.zeros_like(inp.run_time, dtype=bool)
    fits = fits_empty(inp, cluster)
    for j in range(len(cluster.models)):
        usable[:, j] = fits[:, cluster.node_model == j].any(axis=1)
    return np.where(usable, inp.run_time, np.inf).min(axis=1)


def lower_bound(inp: RunInputs, cluster: NodeCluster) -> NodeLowerBound:
    """Both bounds for the tasks of ``inp`` on ``cluster`` (true run times)."""
    best = best_run_times(inp, cluster)
    a = inp.arrival
    order = np.argsort(a, kind="stable")
    t0 = a[order[0]]
    fluid = -np.inf
    for work, cap in ((inp.k * inp.p / MILLI * best, max(cluster.total_gpus, 1)),
                      (inp.cpu * best, float(cluster.nodes.cpu_milli.sum()))):
        suffix = np.cumsum(work[order][::-1])[::-1]
        fluid = max(fluid, float(np.max(a[order] + suffix / cap)))
    return NodeLowerBound(makespan=float(max(np.max(a + best), fluid) - t0), mean_latency=float(np.mean(best)))


def contention_bound(inp: RunInputs, cluster: NodeCluster) -> float:
    """A lower bound on mean JCT that sees contention for the pooled GPUs and CPUs (docs/cluster.md,
    "Lower bound"): for each pool (GPU milli, CPU milli), the tasks that use it form a
    fractional schedule on one machine of the pool's capacity, whose mean busy times are bounded
    by the preemptive shortest-work-first schedule (Goemans 1997); a task's completion is its
    mean busy time plus half its run time.  The larger pool's total, with the solo bound for
    the tasks outside the pool, over the tasks; never below :func:`lower_bound`'s mean."""
    best = best_run_times(inp, cluster)
    a = inp.arrival
    n = len(a)
    if n == 0:
        return 0.0
    solo = a + best
    total = float(solo.sum())
    pools = ((inp.k * inp.p / MILLI, float(cluster.total_gpus)), (inp.cpu, float(cluster.nodes.cpu_milli.sum())))
    for demand, cap in pools:
        use = (demand > 0) & (best > 0)
        if not use.any() or cap <= 0:
            continue
        work = demand[use] * best[use] / cap  # time on the pooled machine at full rate
        mbt = mean_busy_times(a[use], work)
        pooled = float(np.sum(mbt + best[use] / 2.0))
        total = max(total, float(solo[~use].sum()) + max(float(solo[use].sum()), pooled))
    return (total - float(a.sum())) / n


def mean_busy_times(release: np.ndarray, work: np.ndarray) -> np.ndarray:
    """Mean busy time of each job in the preemptive schedule on one unit-speed machine that
    always runs the released job of least (original) ``work``; ties by index.  Its sum is the
    least sum of mean busy times of any fractional schedule with these releases and works."""
    import heapq

    order = np.argsort(release, kind="stable")
    m = np.zeros(len(work))
    left = work.astype(np.float64).copy()
    heap: list[tuple[float, int]] = []
    t, nxt = float(release[order[0]]), 0
    while nxt < len(order) or heap:
        if not heap:
            t = max(t, float(release[order[nxt]]))
        while nxt < len(order) and release[order[nxt]] <= t:
            j = int(order[nxt])
            heapq.heappush(heap, (float(work[j]), j))
            nxt += 1
        w, j = heap[0]
        until = float(release[order[nxt]]) if nxt < len(order) else np.inf
        run = min(left[j], until - t)
        m[j] += (2 * t + run) * run / 2.0  # integral of s over [t, t + run]
        left[j] -= run
        t += run
        if left[j] <= 0:
            heapq.heappop(heap)
    return m / work
