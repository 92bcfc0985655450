"""The late engine one decision at a time, for callers outside numba (the Gymnasium env).

``late_engine._run_late`` runs a whole workload and calls the policy's ``pick`` kernel from
inside its loop.  An agent of an RL library cannot be called from there: it wants the
simulator to stop at each decision and resume when it has chosen.  :class:`LateStepper` is
that loop cut at its pick: :meth:`LateStepper.advance` runs events until a device is idle
with tasks waiting (the pick point of ``_run_late``'s inner loop), :meth:`LateStepper.apply`
carries out a pick with the loop's own rules and checks, and :meth:`LateStepper.wait` leaves
the idle devices idle until the next event.  Its event handling is the late engine's own
compiled functions (``next_event``, ``complete_parts``, ``_start``, ``_shortest_first``), and
the step order is ``_run_late``'s, so a run driven pick by pick with a late policy's choices is
that policy's schedule (tests/machine/test_env.py compares them trace for trace).

It also integrates ``N(t)``, the tasks arrived and not finished, for the late learners'
reward: :attr:`LateStepper.area` is ``integral_0^t N(s) ds`` up to the current event time
(``late_dqn_train.decision_rewards`` computes the same integral after a run).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hybridsched.devices import Cluster, Realization
from hybridsched.heap import heap_pop
from hybridsched.kinds.machine.engine import CPU_S, GPU_S, MAX_F, MEMORY
from hybridsched.kinds.machine.late_engine import (
    RESERVED,
    _shortest_first,
    _start,
    complete_parts,
    next_event,
    reserved_weights,
)
from hybridsched.kinds.machine.workload import TaskTable

# slots of the int state: pool size, released-heap size, completion-heap size, next root,
# tasks done, tasks arrived (the N(t) integral's arrival pointer), tasks in the system
_N_POOL, _RN, _DN, _NXT, _DONE, _NA, _NSYS = range(7)
# slots of the float state: now, the integral of N up to now
_T, _AREA = range(2)


@njit
def _integrate(x, arrival, ib, fb):
    """Extend ``integral N`` from the current time to ``x``: arrivals (every task's, roots and
    children alike, rows sorted by arrival) step N up inside the interval."""
    n = arrival.shape[0]
    cur = fb[_T]
    while ib[_NA] < n and arrival[ib[_NA]] <= x:
        a = arrival[ib[_NA]]
        if a > cur:
            fb[_AREA] += ib[_NSYS] * (a - cur)
            cur = a
        ib[_NSYS] += 1
        ib[_NA] += 1
    if x > cur:
        fb[_AREA] += ib[_NSYS] * (x - cur)
    fb[_T] = x


@njit
def _pick_point(ib, fb, running, run_end, rq_head, rq_tail, rq_work, idle, qlen, est):
    """The head of ``_run_late``'s inner loop: fill idle / qlen / est and say whether the policy
    is asked (tasks wait and a device is idle)."""
    if ib[_N_POOL] == 0:
        return False
    t = fb[_T]
    any_idle = False
    for d in range(running.shape[0]):
        idle[d] = 1 if running[d] < 0 else 0
        any_idle = any_idle or running[d] < 0
        qlen[d] = rq_tail[d] - rq_head[d]
        est[d] = t if running[d] < 0 else max(t, run_end[d])
        if qlen[d] > 0:
            est[d] += max(rq_work[d], 0.0)
    return any_idle


@njit
def _advance(skip_pool, ib, fb, X, arrival, noise_c, noise_g, launch_s, cpu_w, gpu_w, reserved, rweight, root_order,
             child_ptr, child_idx, pending, ready, pool, rh_t, rh_i, dh_t, dh_i, running, run_end, rq, rq_head, rq_tail,
             rq_work, idle, qlen, est, parts_left, gpu, frac, cs, ce, gs, ge, end, energy):
    """Run to the next pick point (1) or to the end of the run (0); ``skip_pool``: the policy
    waited, so go to the next event first (``_run_late``'s ``break`` out of its inner loop)."""
    n = X.shape[0]
    n_roots = root_order.shape[0]
    n_dev = running.shape[0]
    if not skip_pool and _pick_point(ib, fb, running, run_end, rq_head, rq_tail, rq_work, idle, qlen, est):
        return 1
    while ib[_DONE] < n:
        nxt = ib[_NXT]
        t = next_event(arrival[root_order[nxt]] if nxt < n_roots else np.inf, rh_t, ib[_RN], dh_t, ib[_DN])
        if t == np.inf:
            raise RuntimeError("late dispatch: the policy waited while every device was idle and no event was pending")
        _integrate(t, arrival, ib, fb)
        # 1. completions at t free their devices and may end tasks (and release children)
        dn, rn, ended = complete_parts(t, dh_t, dh_i, ib[_DN], running, gpu, frac, ce, ge, end, parts_left, child_ptr,
                                       child_idx, ready, pending, rh_t, rh_i, ib[_RN])
        ib[_DN] = dn
        ib[_RN] = rn
        ib[_DONE] += ended
        ib[_NSYS] -= ended
        # 2. tasks ready by t join the pool (roots in arrival order, then released children)
        n_pool = ib[_N_POOL]
        while nxt < n_roots and arrival[root_order[nxt]] <= t:
            pool[n_pool] = root_order[nxt]
            n_pool += 1
            nxt += 1
        while rn > 0 and rh_t[0] <= t:
            pool[n_pool] = rh_i[0]
            n_pool += 1
            rn = heap_pop(rh_t, rh_i, rn)
        ib[_N_POOL] = n_pool
        ib[_NXT] = nxt
        ib[_RN] = rn
        # 3. reserved parts first, then the policy's picks
        for d in range(n_dev):
            if running[d] < 0 and rq_head[d] < rq_tail[d]:
                if reserved > 0:
                    _shortest_first(rq, d, rq_head[d], rq_tail[d], frac, X, launch_s, rweight)
                i = rq[d, rq_head[d]]
                rq_head[d] += 1
                if d == 0:
                    dur = (1.0 - frac[i]) * X[i, CPU_S]
                    dn = _start(i, 0, 0, t, dur, noise_c[i], cpu_w, cs, ce, gs, ge, energy, running, run_end, dh_t,
                                dh_i, dn)
                else:
                    dur = launch_s + frac[i] * X[i, GPU_S]
                    dn = _start(i, 1, d, t, dur, noise_g[i], gpu_w, cs, ce, gs, ge, energy, running, run_end, dh_t,
                                dh_i, dn)
                rq_work[d] -= dur
        ib[_DN] = dn
        if _pick_point(ib, fb, running, run_end, rq_head, rq_tail, rq_work, idle, qlen, est):
            return 1
    return 0


@njit
def _apply(k, d, f, g2, ib, fb, X, noise_c, noise_g, launch_s, cpu_w, gpu_w, pool, dh_t, dh_i, running, run_end, rq,
           rq_head, rq_tail, rq_work, idle, parts_left, gpu, frac, cs, ce, gs, ge, gmem, energy):
    """Start pool position ``k`` on idle device ``d`` with GPU share ``f`` (the other part on GPU
    ``g2`` when a split starts on the CPU): ``_run_late``'s rules and checks, in its order."""
    n_pool = ib[_N_POOL]
    n_dev = running.shape[0]
    t = fb[_T]
    if k < 0 or k >= n_pool or d < 0 or d >= n_dev or idle[d] == 0:
        raise RuntimeError("late dispatch: the policy picked a task or device that is not available")
    i = pool[k]
    for q in range(k, n_pool - 1):  # keep the pool in ready order
        pool[q] = pool[q + 1]
    ib[_N_POOL] = n_pool - 1
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
    dn = ib[_DN]
    if f < 1.0:  # the CPU part: now, or last in the CPU's reserved queue
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
    ib[_DN] = dn


class LateStepper:
    """One late-dispatch run of ``tasks`` on ``cluster`` with ``realization``'s noise, advanced
    decision by decision (module docstring).  After :meth:`advance` returns True the pick
    point's inputs are attributes: :attr:`t`, :attr:`pool` (``pool[:n_pool]``, in ready order),
    :attr:`idle`, :attr:`est`, :attr:`qlen`, :attr:`ready` and the task matrix :attr:`X`, the
    arguments a late policy's ``pick`` kernel takes."""

    def __init__(self, tasks: TaskTable, cluster: Cluster, realization: Realization, X: np.ndarray,
                 reserved_order: str = "fifo") -> None:
        if reserved_order not in RESERVED:
            raise ValueError(f"reserved_order must be one of {list(RESERVED)}, got {reserved_order!r}")
        n = len(tasks)
        n_dev = cluster.n_devices
        self.n = n
        self.X = X
        self.tasks = tasks
        has_parents = np.diff(tasks.parent_ptr) > 0
        root_order = np.flatnonzero(~has_parents).astype(np.int64)  # rows are sorted by arrival
        child_ptr, child_idx = tasks.children_csr()
        self.ready = tasks.arrival.astype(np.float64).copy()
        nan = np.full(n, np.nan)
        self.out = dict(gpu=np.full(n, -1, dtype=np.int64), frac=np.zeros(n), cs=nan.copy(), ce=nan.copy(),
                        gs=nan.copy(), ge=nan.copy(), gmem=np.zeros(n), end=nan.copy(), energy=np.zeros(n))
        self.ib = np.zeros(7, dtype=np.int64)  # the int state (slots _N_POOL ...)
        self.fb = np.zeros(2)  # the float state (_T, _AREA)
        self.fb[_T] = float(tasks.arrival[0]) if n else 0.0
        self.pool = np.empty(n, dtype=np.int64)
        self.idle = np.zeros(n_dev, dtype=np.int64)
        self.qlen = np.zeros(n_dev, dtype=np.int64)
        self.est = np.zeros(n_dev)
        self.running = np.full(n_dev, -1, dtype=np.int64)
        run_end = np.zeros(n_dev)
        rq = np.empty((n_dev, n), dtype=np.int64)
        rq_head = np.zeros(n_dev, dtype=np.int64)
        rq_tail = np.zeros(n_dev, dtype=np.int64)
        rq_work = np.zeros(n_dev)
        parts_left = np.zeros(n, dtype=np.int64)
        dh_t, dh_i = np.empty(2 * n + 1), np.empty(2 * n + 1, dtype=np.int64)
        o = self.out
        arrival = tasks.arrival.astype(np.float64)
        launch, cpu_w, gpu_w = float(cluster.launch_s), float(cluster.cpu_busy_w), float(cluster.gpu_busy_w)
        noise_c = np.asarray(realization.cpu_factor, dtype=np.float64)
        noise_g = np.asarray(realization.gpu_factor, dtype=np.float64)
        # the argument lists of the compiled steps, built once (the same arrays every call); a
        # compiled caller that fuses several steps into one call takes them as two tuples
        self.advance_args = (self.ib, self.fb, X, arrival, noise_c, noise_g, launch, cpu_w, gpu_w,
                     RESERVED.index(reserved_order), reserved_weights(tasks, X, launch, reserved_order), root_order,
                     child_ptr, child_idx, np.diff(tasks.parent_ptr).astype(np.int64), self.ready, self.pool,
                     np.empty(n + 1), np.empty(n + 1, dtype=np.int64), dh_t, dh_i, self.running, run_end, rq, rq_head,
                     rq_tail, rq_work, self.idle, self.qlen, self.est, parts_left, o["gpu"], o["frac"], o["cs"],
                     o["ce"], o["gs"], o["ge"], o["end"], o["energy"])
        self.apply_args = (self.ib, self.fb, X, noise_c, noise_g, launch, cpu_w, gpu_w, self.pool, dh_t, dh_i,
                     self.running, run_end, rq, rq_head, rq_tail, rq_work, self.idle, parts_left, o["gpu"], o["frac"],
                     o["cs"], o["ce"], o["gs"], o["ge"], o["gmem"], o["energy"])

    @property
    def t(self) -> float:
        """The current event time."""
        return float(self.fb[_T])

    @property
    def n_pool(self) -> int:
        """How many tasks wait in the pool."""
        return int(self.ib[_N_POOL])

    @property
    def done(self) -> int:
        """How many tasks have ended."""
        return int(self.ib[_DONE])

    @property
    def area(self) -> float:
        """``integral N(s) ds`` from the first arrival to :attr:`t` (N: tasks arrived, not ended)."""
        return float(self.fb[_AREA])

    @property
    def finished(self) -> bool:
        """Every task has ended."""
        return self.done == self.n

    def advance(self) -> bool:
        """Run to the next pick point (True) or to the end of the run (False)."""
        return bool(_advance(False, *self.advance_args))

    def wait(self) -> bool:
        """Leave the idle devices idle until the next event; then as :meth:`advance`."""
        return bool(_advance(True, *self.advance_args))

    def apply(self, k: int, d: int, f: float, g2: int) -> None:
        """Start pool position ``k`` on idle device ``d`` with GPU share ``f`` (``g2``: the GPU of
        a split started on the CPU), as a ``pick`` kernel's ``(k, d, f, g2)``; RuntimeError for
        a pick that breaks the late engine's rules."""
        _apply(int(k), int(d), float(f), int(g2), *self.apply_args)
