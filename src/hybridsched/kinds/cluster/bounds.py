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


def lower_bound(inp: RunInputs, cluster: NodeCluster) -> NodeLowerBound:
    """Both bounds for the tasks of ``inp`` on ``cluster`` (true run times)."""
    # models each task could ever use: allowed, present in the cluster, and on a node it fits
    usable = np.zeros_like(inp.run_time, dtype=bool)
    fits = fits_empty(inp, cluster)
    for j in range(len(cluster.models)):
        usable[:, j] = fits[:, cluster.node_model == j].any(axis=1)
    best = np.where(usable, inp.run_time, np.inf).min(axis=1)
    a = inp.arrival
    order = np.argsort(a, kind="stable")
    t0 = a[order[0]]
    fluid = -np.inf
    for work, cap in ((inp.k * inp.p / MILLI * best, max(cluster.total_gpus, 1)),
                      (inp.cpu * best, float(cluster.nodes.cpu_milli.sum()))):
        suffix = np.cumsum(work[order][::-1])[::-1]
        fluid = max(fluid, float(np.max(a[order] + suffix / cap)))
    return NodeLowerBound(makespan=float(max(np.max(a + best), fluid) - t0), mean_latency=float(np.mean(best)))
