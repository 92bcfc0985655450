"""The late-binding engine (``sim.dispatch: late``): decisions when a device frees.

In the arrival engine (``engine.py``) every task is placed when it becomes ready, onto FIFO
device queues.  Here a ready task waits in one central *pool*; whenever a device (the CPU or
a GPU) is idle and the pool is not empty, the policy's ``pick`` kernel chooses which waiting
task starts there and with which split, or to leave the idle devices idle until the next
event (an arrival, a release or a completion).

**Split tasks.**  The split ``f`` is chosen when the task's first part starts: ``pick``
names the idle device ``d`` that starts now and the GPU share ``f`` (``d = 0``, the CPU,
needs ``f < 1``; a GPU needs ``f > 0``).  The other part (if ``0 < f < 1``) goes to its own
device, the CPU or the GPU ``g2`` that ``pick`` names: it starts at once if that device is
idle, otherwise it joins that device's *reserved* queue, which runs before any pool task
when the device frees: FIFO among reserved parts, or, with the policy's ``reserved_order``
``"spt"``, the part of least nominal seconds first (ties: the earlier queued), or with ``"rank"``
the least nominal seconds ÷ (1 + the task's upward rank below ÷ the mean best time alone): a part
that DAG tasks wait behind goes earlier, and without dependencies ``rank`` is ``spt``.  So a split task never waits in the pool
twice, and no device ever runs two parts at once.

**What a policy sees** (``pick(t, pool, n_pool, idle, est, qlen, X, ready, pdata, params)
-> (k, d, f, g2)``): the time, the waiting rows ``pool[:n_pool]`` in the order they became
ready, which devices are idle now, each device's *believed* free time ``est`` (now for an idle
one; the running part's start plus its nominal duration, never before now, plus the nominal
durations of its reserved parts), the reserved parts per device ``qlen``, the task matrix
and each task's ready time; ``k`` is the pool position picked, or -1 to wait.  Nothing here
reveals the noise.  A pick that breaks the rules (a busy device, ``f`` on the wrong side)
raises; a wait while every device is idle and no event is pending raises too (the run could
never end), so a policy must start something then.

As in ``engine.py`` one loop, ``_run_late``, serves both callers: compiled by numba, or as
plain Python (``_run_late.py_func`` with the kernel's ``py_func``), the reference path the
tests compare against.  Late mode has no online learning (``observe``) and no streaming.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hybridsched.devices import Cluster, Realization
from hybridsched.kinds.machine.bounds import best_alone_seconds
from hybridsched.kinds.machine.engine import CPU_S, GPU_S, MAX_F, MEMORY, Trace, task_matrix
from hybridsched.heap import heap_pop, heap_push
from hybridsched.kinds.machine.workload import TaskTable


@njit
def _start(i, part, d, t, dur, noise, watts, cs, ce, gs, ge, energy, running, run_end, dh_t, dh_i, dn):
    """Start part ``part`` (0 CPU, 1 GPU) of task ``i`` on device ``d`` at ``t``; returns the
    completion heap's new size.  ``run_end[d]`` is the believed (nominal) end."""
    real = dur * noise
    if part == 0:
        cs[i] = t
        ce[i] = t + real
    else:
        gs[i] = t
        ge[i] = t + real
    energy[i] += real * watts
    running[d] = i
    run_end[d] = t + dur
    return heap_push(dh_t, dh_i, dn, t + real, 2 * i + part)


@njit
def next_event(t_root, rh_t, rn, dh_t, dn):
    """The earliest of the next root arrival ``t_root`` (inf: none left), the earliest released
    child and the earliest part completion."""
    t = t_root
    if rn > 0 and rh_t[0] < t:
        t = rh_t[0]
    if dn > 0 and dh_t[0] < t:
        t = dh_t[0]
    return t


@njit
def complete_parts(t, dh_t, dh_i, dn, running, gpu, frac, ce, ge, end, parts_left, child_ptr, child_idx, ready,
                   pending, rh_t, rh_i, rn):
    """Every part completion at or before ``t``: free its device, end a task whose parts are all
    done and release its children whose parents all ended (into the ready heap).  Returns the
    heaps' new sizes and the number of tasks ended."""
    ended = 0
    while dn > 0 and dh_t[0] <= t:
        item = dh_i[0]
        dn = heap_pop(dh_t, dh_i, dn)
        i = item >> 1
        running[0 if (item & 1) == 0 else gpu[i] + 1] = -1
        parts_left[i] -= 1
        if parts_left[i] == 0:
            e = ce[i] if frac[i] < 1.0 else ge[i]
            if frac[i] > 0.0 and frac[i] < 1.0:
                e = max(ce[i], ge[i])
            end[i] = e
            ended += 1
            for q in range(child_ptr[i], child_ptr[i + 1]):
                c = child_idx[q]
                ready[c] = max(ready[c], e)
                pending[c] -= 1
                if pending[c] == 0:
                    rn = heap_push(rh_t, rh_i, rn, ready[c], c)
    return dn, rn, ended


RESERVED = ("fifo", "spt", "rank")  # a policy's reserved_order -> the loop's ``reserved`` code


def rank_below(tasks: TaskTable, alone: np.ndarray) -> np.ndarray:
    """Each task's upward rank below it: the longest chain of best-alone seconds among its
    descendants (HEFT's upward rank without the task itself; 0 without children)."""
    below = np.zeros(len(tasks))
    if tasks.has_deps:
        child_ptr, child_idx = tasks.children_csr()
        for i in range(len(tasks) - 1, -1, -1):  # children come after their parents in row order
            kids = child_idx[child_ptr[i]: child_ptr[i + 1]]
            if len(kids):
                below[i] = float(np.max(below[kids] + alone[kids]))
    return below


def reserved_weights(tasks: TaskTable, X: np.ndarray, launch_s: float, reserved_order: str) -> np.ndarray:
    """The divisor of a reserved part's nominal seconds in the ``spt``/``rank`` orders: 1, or
    1 + rank below ÷ the mean best time alone (``rank``)."""
    if reserved_order != "rank":
        return np.ones(len(tasks))
    alone = best_alone_seconds(X[:, CPU_S], X[:, GPU_S], np.full(len(tasks), launch_s), X[:, MAX_F])
    return 1.0 + rank_below(tasks, alone) / max(float(alone.mean()), 1e-12)


@njit
def _shortest_first(rq, d, head, tail, frac, X, launch_s, rweight):
    """Move the reserved part of least nominal seconds ÷ ``rweight`` on device ``d`` to the
    queue's head, keeping the others in queue order (ties: the earlier queued)."""
    best_q = head
    best = np.inf
    for q in range(head, tail):
        j = rq[d, q]
        v = (1.0 - frac[j]) * X[j, CPU_S] if d == 0 else launch_s + frac[j] * X[j, GPU_S]
        v = v / rweight[j]
        if v < best:
            best = v
            best_q = q
    j = rq[d, best_q]
    for q in range(best_q, head, -1):
        rq[d, q] = rq[d, q - 1]
    rq[d, head] = j


@njit(nogil=True)
def _run_late(pick, X, pdata, params, arrival, noise_c, noise_g, launch_s, cpu_w, gpu_w, n_dev, reserved,
              rweight, root_order, child_ptr, child_idx, pending, ready,
              gpu, frac, cs, ce, gs, ge, gmem, end, energy):
    """Run every task to completion (module docstring); fills the per-task output arrays."""
    n = X.shape[0]
    n_roots = root_order.shape[0]
    pool = np.empty(n, dtype=np.int64)
    n_pool = 0
    rh_t = np.empty(n + 1)  # released children, by ready time
    rh_i = np.empty(n + 1, dtype=np.int64)
    rn = 0
    dh_t = np.empty(2 * n + 1)  # part completions (item 2 * task + part)
    dh_i = np.empty(2 * n + 1, dtype=np.int64)
    dn = 0
    running = np.full(n_dev, -1, dtype=np.int64)
    run_end = np.zeros(n_dev)
    rq = np.empty((n_dev, n), dtype=np.int64)  # reserved parts per device (FIFO)
    rq_head = np.zeros(n_dev, dtype=np.int64)
    rq_tail = np.zeros(n_dev, dtype=np.int64)
    rq_work = np.zeros(n_dev)  # their nominal seconds
    idle = np.zeros(n_dev, dtype=np.int64)
    qlen = np.zeros(n_dev, dtype=np.int64)
    est = np.zeros(n_dev)
    parts_left = np.zeros(n, dtype=np.int64)
    nxt = 0
    done = 0
    while done < n:
        t = next_event(arrival[root_order[nxt]] if nxt < n_roots else np.inf, rh_t, rn, dh_t, dn)
        if t == np.inf:
            raise RuntimeError("late dispatch: the policy waited while every device was idle and no event was pending")
        # 1. completions at t free their devices and may end tasks (and release children)
        dn, rn, ended = complete_parts(t, dh_t, dh_i, dn, running, gpu, frac, ce, ge, end, parts_left, child_ptr,
                                       child_idx, ready, pending, rh_t, rh_i, rn)
        done += ended
        # 2. tasks ready by t join the pool (roots in arrival order, then released children)
        while nxt < n_roots and arrival[root_order[nxt]] <= t:
            pool[n_pool] = root_order[nxt]
            n_pool += 1
            nxt += 1
        while rn > 0 and rh_t[0] <= t:
            pool[n_pool] = rh_i[0]
            n_pool += 1
            rn = heap_pop(rh_t, rh_i, rn)
        # 3. reserved parts first, then the policy's picks, while a device is idle
        for d in range(n_dev):
            if running[d] < 0 and rq_head[d] < rq_tail[d]:
                if reserved > 0:
                    _shortest_first(rq, d, rq_head[d], rq_tail[d], frac, X, launch_s, rweight)
                i = rq[d, rq_head[d]]
                rq_head[d] += 1
                if d == 0:
                    dur = (1.0 - frac[i]) * X[i, CPU_S]
                    dn = _start(i, 0, 0, t, dur, noise_c[i], cpu_w, cs, ce, gs, ge, energy, running, run_end, dh_t, dh_i, dn)
                else:
                    dur = launch_s + frac[i] * X[i, GPU_S]
                    dn = _start(i, 1, d, t, dur, noise_g[i], gpu_w, cs, ce, gs, ge, energy, running, run_end, dh_t, dh_i, dn)
                rq_work[d] -= dur
        while n_pool > 0:
            any_idle = False
            for d in range(n_dev):
                idle[d] = 1 if running[d] < 0 else 0
                any_idle = any_idle or running[d] < 0
                qlen[d] = rq_tail[d] - rq_head[d]
                est[d] = t if running[d] < 0 else max(t, run_end[d])
                if qlen[d] > 0:
                    est[d] += max(rq_work[d], 0.0)
            if not any_idle:
                break
            k, d, f, g2 = pick(t, pool, n_pool, idle, est, qlen, X, ready, pdata, params)
            if k < 0:
                break
            if k >= n_pool or d < 0 or d >= n_dev or idle[d] == 0:
                raise RuntimeError("late dispatch: the policy picked a task or device that is not available")
            i = pool[k]
            for q in range(k, n_pool - 1):  # keep the pool in ready order
                pool[q] = pool[q + 1]
            n_pool -= 1
            f = min(max(f, 0.0), X[i, MAX_F])
            if d == 0:
                if f >= 1.0:
                    raise RuntimeError("late dispatch: a task started on the CPU needs a GPU share below 1")
                g = g2
                if f > 0.0 and (g < 0 or g >= n_dev - 1):
                    raise RuntimeError("late dispatch: a split task started on the CPU needs a GPU index")
            else:
                if f <= 0.0:
                    raise RuntimeError("late dispatch: a task started on a GPU needs a GPU share above 0")
                g = d - 1
            frac[i] = f
            parts_left[i] = (1 if f < 1.0 else 0) + (1 if f > 0.0 else 0)
            if f < 1.0:  # the CPU part: now, or first in the CPU's reserved queue
                dur = (1.0 - f) * X[i, CPU_S]
                if running[0] < 0 and rq_head[0] == rq_tail[0]:
                    dn = _start(i, 0, 0, t, dur, noise_c[i], cpu_w, cs, ce, gs, ge, energy, running, run_end, dh_t, dh_i, dn)
                else:
                    rq[0, rq_tail[0]] = i
                    rq_tail[0] += 1
                    rq_work[0] += dur
            if f > 0.0:  # the GPU part on g
                gpu[i] = g
                gmem[i] = f * X[i, MEMORY]
                dg = g + 1
                dur = launch_s + f * X[i, GPU_S]
                if running[dg] < 0 and rq_head[dg] == rq_tail[dg]:
                    dn = _start(i, 1, dg, t, dur, noise_g[i], gpu_w, cs, ce, gs, ge, energy, running, run_end, dh_t, dh_i, dn)
                else:
                    rq[dg, rq_tail[dg]] = i
                    rq_tail[dg] += 1
                    rq_work[dg] += dur
    return done


def run_loop(loop, pick, X: np.ndarray, pdata: np.ndarray, params, tasks: TaskTable, cluster: Cluster,
             realization: Realization, reserved_order: str = "fifo") -> tuple[int, np.ndarray, dict[str, np.ndarray]]:
    """Run the late loop (``_run_late`` or its ``py_func``) with ``pick`` on ``tasks``:
    ``(tasks done, ready times, output columns)``; trainers call it with their own ``pick``."""
    n = len(tasks)
    has_parents = np.diff(tasks.parent_ptr) > 0
    root_order = np.flatnonzero(~has_parents).astype(np.int64)  # rows are sorted by arrival
    child_ptr, child_idx = tasks.children_csr()
    pending = np.diff(tasks.parent_ptr).astype(np.int64)
    ready = tasks.arrival.astype(np.float64).copy()
    nan = np.full(n, np.nan)
    out = dict(gpu=np.full(n, -1, dtype=np.int64), frac=np.zeros(n), cs=nan.copy(), ce=nan.copy(), gs=nan.copy(),
               ge=nan.copy(), gmem=np.zeros(n), end=nan.copy(), energy=np.zeros(n))
    done = loop(pick, X, pdata, params, tasks.arrival, realization.cpu_factor, realization.gpu_factor, cluster.launch_s,
                cluster.cpu_busy_w, cluster.gpu_busy_w, cluster.n_devices, RESERVED.index(reserved_order),
                reserved_weights(tasks, X, cluster.launch_s, reserved_order), root_order, child_ptr, child_idx, pending,
                ready, *out.values())
    return int(done), ready, out


def simulate_late(tasks: TaskTable, cluster: Cluster, policy, realization: Realization, compiled: bool = True) -> Trace:
    """Run a late-dispatch ``policy`` (one with a ``pick_kernel``) on ``tasks``; same inputs, same trace."""
    kernel = getattr(type(policy), "pick_kernel", None)
    if kernel is None:
        from hybridsched.errors import HybridschedError

        raise HybridschedError(f"sim.dispatch=late: policy {policy.name!r} has no late-dispatch kernel (pick_kernel)")
    n = len(tasks)
    X = task_matrix(tasks, cluster)
    policy.prepare(tasks, cluster, X)
    pdata, params = policy.kernel_data()
    loop, pick = (_run_late, kernel) if compiled else (_run_late.py_func, kernel.py_func)
    done, ready, out = run_loop(loop, pick, X, pdata, params, tasks, cluster, realization,
                                getattr(policy, "reserved_order", "fifo"))
    if done != n:
        raise RuntimeError(f"late engine finished {done} of {n} tasks")  # unreachable for acyclic input
    o = out
    return Trace(policy.name, tasks.task_id, tasks.arrival, ready, o["gpu"], o["frac"], o["cs"], o["ce"], o["gs"],
                 o["ge"], o["gmem"], o["end"], o["energy"])
