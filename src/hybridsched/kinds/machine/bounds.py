"""Provable lower bounds on makespan and mean completion time of a realised workload.

Both hold for every policy that obeys the engine's rules, clairvoyant or not, because
they relax those rules:

* a task alone on an empty machine with the best continuous split ``f`` takes
  ``d_i = min_f max((1 - f) C_i, L_i + f G_i)``; with dependencies it cannot end before
  ``EF_i = max(arrival_i, max_parents EF_p) + d_i`` (critical path);
* every split uses at least ``w_i = min(C_i, (1 - m_i) C_i + L_i + m_i G_i)`` device-seconds
  (busy time is linear in ``f``), so the tasks arriving at or after ``s`` need at least
  ``s + sum w / n_devices`` to finish (work-conserving fluid relaxation).

``C, G, L`` are the *actual* CPU time, GPU compute+transfer time and launch overhead of
the run (nominal times times the realised noise); ``m_i`` the memory-feasible max fraction.

These two ignore contention between tasks. ``bounds_lp`` adds an interval-indexed LP
relaxation that sees it; ``mean_latency`` is the larger of the two latency bounds, and
both are reported (``mean_latency_solo``, ``mean_latency_lp``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybridsched.kinds.machine.bounds_lp import LPSettings, estimate_variables, lp_lower_bound
from hybridsched.devices import Cluster, Realization
from hybridsched.kinds.machine.workload import TaskTable


@dataclass(frozen=True)
class LowerBound:
    """Makespan bound, the larger latency bound, and each latency bound on its own
    (``mean_latency_lp`` is NaN when the LP was not solved)."""

    makespan: float
    mean_latency: float
    mean_latency_solo: float
    mean_latency_lp: float
    lp_solve_s: float


def best_alone_seconds(cpu: np.ndarray, gpu: np.ndarray, launch: np.ndarray, max_f: np.ndarray) -> np.ndarray:
    """Shortest time of each task alone, over continuous fractions in [0, max_f]."""
    f = np.clip((cpu - launch) / (cpu + gpu), 0.0, max_f)  # where both parts end together
    split = np.maximum((1.0 - f) * cpu, launch + f * gpu)
    return np.where(f > 0, np.minimum(cpu, split), cpu)


def lower_bound(tasks: TaskTable, cluster: Cluster, realization: Realization,
                lp: LPSettings | None = LPSettings()) -> LowerBound:
    """Lower bounds on makespan (from the first arrival) and on mean latency (end - arrival);
    ``lp=None`` skips the LP (the solo bound alone)."""
    cpu = cluster.cpu_seconds(tasks.size) * realization.cpu_factor
    gpu = cluster.gpu_seconds(tasks.size, tasks.intensity, tasks.memory_mb) * realization.gpu_factor
    launch = cluster.launch_s * realization.gpu_factor
    m = cluster.max_fraction(tasks.memory_mb)
    d = best_alone_seconds(cpu, gpu, launch, m)
    work = np.minimum(cpu, (1.0 - m) * cpu + launch + m * gpu)

    ef = _earliest_finish(tasks, d)
    order = np.argsort(tasks.arrival, kind="stable")
    a = tasks.arrival[order]
    suffix_work = np.cumsum(work[order][::-1])[::-1]
    fluid = np.max(a + suffix_work / cluster.n_devices)
    t0 = a[0]
    solo = float(np.mean(ef - tasks.arrival))
    lp_mean, lp_s = float("nan"), 0.0
    if lp is not None and lp.max_variables is not None:
        horizon = float(ef.max() - (ef - d).min()) + float(work.sum())
        size = estimate_variables(len(tasks), horizon, float(np.median(d)), lp)
        if size > lp.max_variables:
            print(f"LP bound skipped: about {size:,} variables for {len(tasks):,} tasks, more than "
                  f"sim.bound_lp.max_variables {lp.max_variables:,}; the bound is the solo bound (raise the "
                  f"limit to run it)", flush=True)
            lp = None
        else:
            print(f"LP bound: {len(tasks):,} tasks, about {size:,} variables ...", flush=True)
    if lp is not None:
        res = lp_lower_bound(tasks, cluster, realization, ready=ef - d, best_alone=d, settings=lp)
        lp_mean, lp_s = res.mean_latency, res.solve_s
    return LowerBound(makespan=float(max(ef.max(), fluid) - t0), mean_latency=float(max(solo, np.nan_to_num(lp_mean))),
                      mean_latency_solo=solo, mean_latency_lp=lp_mean, lp_solve_s=lp_s)


def _earliest_finish(tasks: TaskTable, d: np.ndarray) -> np.ndarray:
    ef = tasks.arrival + d
    if not tasks.has_deps:
        return ef
    # Kahn order, so parents are final before their children.
    child_ptr, child_idx = tasks.children_csr()
    pending = np.diff(tasks.parent_ptr).copy()
    start = tasks.arrival.copy()
    stack = list(np.flatnonzero(pending == 0))
    while stack:
        i = stack.pop()
        ef[i] = start[i] + d[i]
        for c in child_idx[child_ptr[i] : child_ptr[i + 1]]:
            start[c] = max(start[c], ef[i])
            pending[c] -= 1
            if pending[c] == 0:
                stack.append(c)
    return ef
