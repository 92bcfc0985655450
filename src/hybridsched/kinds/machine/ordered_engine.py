"""Placement at arrival onto device queues kept in a chosen order (between arrival and late dispatch).

The arrival engine (``engine.py``) places each task when it becomes ready and runs every
device's queue first-come first-served.  Here the placement is the same (the same ``decide``
kernel, the same believed and true free times, so the same ``(gpu, fraction)`` for the same
history), but each device runs its queued parts in a chosen **queue order** whenever it frees:

| order  | a queued part's key, lowest first                                         |
|--------|---------------------------------------------------------------------------|
| fifo   | the decision's sequence number: the arrival engine exactly (tested)       |
| spt    | its nominal seconds: shortest predicted processing time first             |
| wspt   | its nominal seconds / (1 + the task's priority): weighted by priority     |

Ties go to the earlier decision.  A split task's CPU and GPU parts wait in their own devices'
queues independently, as in the arrival engine.  A device's work does not depend on the order
(every queued part is released when it is queued, and a device never idles with a queue), so
the free times the policy sees are the arrival engine's; only which part runs when changes,
and with it when dependants become ready.  The keys use nominal seconds, never the noise.

As in ``engine.py`` one loop, ``_run_ordered``, serves both callers: compiled by numba, or as
plain Python (``.py_func`` with the kernel's ``py_func``), the reference path tests compare
against.  Online learning (``observe``) is not supported here: the wrapper refuses such policies.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hybridsched.devices import Cluster, Realization
from hybridsched.heap import heap_pop, heap_push
from hybridsched.kinds.machine.engine import (CPU_S, GPU_S, MAX_F, MEMORY, Trace, _decider, dependency_arrays,
                                              output_arrays, task_matrix)
from hybridsched.kinds.machine.late_engine import complete_parts, next_event
from hybridsched.kinds.machine.workload import TaskTable

ORDERS = ("fifo", "spt", "wspt")


@njit
def _start_next(d, t, qt, qi, qn, dec, frac, X, launch_s, noise_c, noise_g, running, cs, ce, gs, ge, dh_t, dh_i, dn):
    """Start the lowest-key part queued on idle device ``d`` at ``t``; the completion heap's new size."""
    i = dec[qi[d, 0]]
    qn[d] = heap_pop(qt[d], qi[d], qn[d])
    running[d] = i
    if d == 0:
        e = t + (1.0 - frac[i]) * X[i, CPU_S] * noise_c[i]
        cs[i] = t
        ce[i] = e
        return heap_push(dh_t, dh_i, dn, e, 2 * i)
    e = t + (launch_s + frac[i] * X[i, GPU_S]) * noise_g[i]
    gs[i] = t
    ge[i] = e
    return heap_push(dh_t, dh_i, dn, e, 2 * i + 1)


@njit(nogil=True)
def _run_ordered(decide, X, pdata, params, arrival, noise_c, noise_g, launch_s, cpu_w, gpu_w, n_dev, order, priority,
                 root_order, child_ptr, child_idx, pending, ready, gpu, frac, cs, ce, gs, ge, gmem, end, energy):
    """Run every task to completion (module docstring); fills the per-task output arrays and
    returns the number of tasks finished.  ``order``: the index of the queue order in ``ORDERS``."""
    n = X.shape[0]
    n_roots = root_order.shape[0]
    rh_t = np.empty(n + 1)  # released children, by ready time
    rh_i = np.empty(n + 1, dtype=np.int64)
    rn = 0
    dh_t = np.empty(2 * n + 1)  # part completions (item 2 * task + part)
    dh_i = np.empty(2 * n + 1, dtype=np.int64)
    dn = 0
    qt = np.empty((n_dev, n + 1))  # each device's queued parts: key, decision number
    qi = np.empty((n_dev, n + 1), dtype=np.int64)
    qn = np.zeros(n_dev, dtype=np.int64)
    dec = np.empty(n, dtype=np.int64)  # decision number -> task
    est = np.zeros(n_dev)
    true_free = np.zeros(n_dev)
    running = np.full(n_dev, -1, dtype=np.int64)
    parts_left = np.zeros(n, dtype=np.int64)
    nxt = 0
    seq = 0
    done = 0
    while done < n:
        t = next_event(arrival[root_order[nxt]] if nxt < n_roots else np.inf, rh_t, rn, dh_t, dn)
        if t == np.inf:
            raise RuntimeError("ordered queues: no event is pending but tasks are unfinished")
        # 1. completions at t free their devices and may end tasks (and release children)
        dn, rn, ended = complete_parts(t, dh_t, dh_i, dn, running, gpu, frac, ce, ge, end, parts_left, child_ptr,
                                       child_idx, ready, pending, rh_t, rh_i, rn)
        done += ended
        # 2. tasks ready by t are placed in the arrival engine's order (by ready time, roots first on ties)
        while True:
            root_ok = nxt < n_roots and arrival[root_order[nxt]] <= t
            if rn > 0 and rh_t[0] <= t and not (root_ok and arrival[root_order[nxt]] <= rh_t[0]):
                i = rh_i[0]
                rn = heap_pop(rh_t, rh_i, rn)
            elif root_ok:
                i = root_order[nxt]
                nxt += 1
            else:
                break
            for d in range(n_dev):  # as engine._loop: the scheduler sees which devices are idle
                if true_free[d] <= t or est[d] < t:
                    est[d] = t
            g, f = decide(i, t, est, true_free, X, pdata, params)
            f = min(max(f, 0.0), X[i, MAX_F])
            dec[seq] = i
            w = 1.0 + priority[i] if order == 2 else 1.0
            eng = 0.0
            if f < 1.0:
                dur = (1.0 - f) * X[i, CPU_S]
                real = dur * noise_c[i]
                true_free[0] = max(t, true_free[0]) + real
                est[0] += dur
                eng += real * cpu_w
                qn[0] = heap_push(qt[0], qi[0], qn[0], float(seq) if order == 0 else dur / w, seq)
            else:
                cs[i] = np.nan
                ce[i] = np.nan
            if f > 0.0:
                d = g + 1
                dur = launch_s + f * X[i, GPU_S]
                real = dur * noise_g[i]
                true_free[d] = max(t, true_free[d]) + real
                est[d] += dur
                eng += real * gpu_w
                qn[d] = heap_push(qt[d], qi[d], qn[d], float(seq) if order == 0 else dur / w, seq)
                gmem[i] = f * X[i, MEMORY]
                gpu[i] = g
            else:
                gs[i] = np.nan
                ge[i] = np.nan
                gmem[i] = 0.0
                gpu[i] = -1
            frac[i] = f
            energy[i] = eng
            parts_left[i] = (1 if f < 1.0 else 0) + (1 if f > 0.0 else 0)
            seq += 1
        # 3. every idle device starts its queue's first part
        for d in range(n_dev):
            if running[d] < 0 and qn[d] > 0:
                dn = _start_next(d, t, qt, qi, qn, dec, frac, X, launch_s, noise_c, noise_g, running, cs, ce, gs, ge,
                                 dh_t, dh_i, dn)
    return done


def simulate_ordered(tasks: TaskTable, cluster: Cluster, policy, realization: Realization,
                     compiled: bool = True) -> Trace:
    """Run ``policy.placement`` (an arrival-mode policy) with device queues in ``policy.queue_order``."""
    placement, order = policy.placement, policy.queue_order
    n = len(tasks)
    X = task_matrix(tasks, cluster)
    placement.prepare(tasks, cluster, X)
    if placement.clairvoyant:
        placement.reveal(realization)
    decide, use_compiled = _decider(placement, compiled)
    pdata, params = placement.kernel_data()
    root_order, child_ptr, child_idx, pending = dependency_arrays(tasks)
    ready = tasks.arrival.astype(np.float64).copy()
    out = output_arrays(n)
    loop = _run_ordered if use_compiled else _run_ordered.py_func
    done = loop(decide, X, pdata, params, tasks.arrival, realization.cpu_factor, realization.gpu_factor,
                cluster.launch_s, cluster.cpu_busy_w, cluster.gpu_busy_w, cluster.n_devices, ORDERS.index(order),
                tasks.priority.astype(np.float64), root_order, child_ptr, child_idx, pending, ready,
                *out.values())
    if done != n:
        raise RuntimeError(f"ordered engine finished {done} of {n} tasks")  # unreachable for acyclic input
    o = out
    return Trace(policy.name, tasks.task_id, tasks.arrival, ready, o["gpu"], o["frac"], o["cs"], o["ce"], o["gs"],
                 o["ge"], o["gmem"], o["end"], o["energy"])
