"""The node-cluster event loop compiled with numba, for the policies whose choice has a kernel.

``engine.simulate`` runs this loop instead of its Python one when :func:`kernel_for` knows the
policy's exact class (a subclass may override anything, so it takes the Python loop).  The
loop is the Python engine's, step for step: the same event order (a completion at time t
before an arrival at t; all completions at one instant, then one queue pass over the nodes
they released), the same FIFO-with-backfilling queue ordered by ``queue_key`` (ties: arrival
order), the same fit test and best-fit GPU choice.  The tests compare whole trace frames
with the Python loop for every policy here on a slice of the real trace.

A choice kernel gets the task ``i``, the feasible nodes ``cand[:nc]`` (increasing index), the
task and state arrays and the policy's data (a per-task-and-GPU-model ``table``, FGD's task
mix, a float vector ``params`` of the policy's weights, an int scratch ``ints``), and returns ``(position, gpu)``: ``gpu`` >= 0 pins the task to
that GPU of the chosen node (FGD's GPU-share placement), -1 means best fit.
The kernels mirror ``policies.py``; the policy objects stay the single source of their
parameters (``prepare``/``fit`` run as before and this module reads their attributes).
"""

from __future__ import annotations

from fractions import Fraction
from math import lcm

import numpy as np
from numba import njit

from hybridsched.kinds.cluster.trace import MILLI
# (time, task) min-heap whose ties pop in task order, as heapq orders the Python loop's tuples
from hybridsched.kinds.machine.timeline import heap_pop as _heap_pop
from hybridsched.kinds.machine.timeline import heap_push as _heap_push

# slots of the integer scalars S_I
_RR_NEXT = 0


@njit(cache=True)
def _left_after(i, nd, k, p, cpu, gpu_free, cpu_free, has_gpu):
    """``NodePolicy.left_after`` for one node (same float operations in the same order)."""
    if k[i] > 0:
        s = 0.0
        for g in range(gpu_free.shape[1]):
            f = gpu_free[nd, g]
            s += f if f > 0 else 0.0
        free_gpu = s - k[i] * p[i]
        return free_gpu + (cpu_free[nd] - cpu[i]) / (MILLI * 1e3)
    return has_gpu[nd] * 1e12 + cpu_free[nd] - cpu[i]


@njit(cache=True)
def _choose_first(i, cand, nc, k, p, cpu, gpu_free, cpu_free, has_gpu, gpu_cap, cpu_milli, node_model,
                  table, types_k, types_p, weights, params, ints):
    return 0, -1


@njit(cache=True)
def _choose_round_robin(i, cand, nc, k, p, cpu, gpu_free, cpu_free, has_gpu, gpu_cap, cpu_milli, node_model,
                        table, types_k, types_p, weights, params, ints):
    nxt = ints[_RR_NEXT]
    pos = np.searchsorted(cand[:nc], nxt)
    if pos >= nc:
        pos = 0
    ints[_RR_NEXT] = cand[pos] + 1
    return pos, -1


@njit(cache=True)
def _choose_greedy(i, cand, nc, k, p, cpu, gpu_free, cpu_free, has_gpu, gpu_cap, cpu_milli, node_model,
                   table, types_k, types_p, weights, params, ints):
    best, best_load = 0, np.inf
    for c in range(nc):
        nd = cand[c]
        if k[i] > 0:
            cap = 0.0
            fr = 0.0
            for g in range(gpu_free.shape[1]):
                cap += gpu_cap[nd, g]
                f = gpu_free[nd, g]
                fr += f if f > 0 else 0.0
            load = 1.0 - fr / cap
        else:
            load = 1.0 - cpu_free[nd] / cpu_milli[nd]
        if load < best_load:
            best, best_load = c, load
    return best, -1


@njit(cache=True)
def _choose_best_fit(i, cand, nc, k, p, cpu, gpu_free, cpu_free, has_gpu, gpu_cap, cpu_milli, node_model,
                     table, types_k, types_p, weights, params, ints):
    best, best_v = 0, np.inf
    for c in range(nc):
        v = _left_after(i, cand[c], k, p, cpu, gpu_free, cpu_free, has_gpu)
        if v < best_v:
            best, best_v = c, v
    return best, -1


@njit(cache=True)
def _choose_table(i, cand, nc, k, p, cpu, gpu_free, cpu_free, has_gpu, gpu_cap, cpu_milli, node_model,
                  table, types_k, types_p, weights, params, ints):
    """Lowest ``table[i, model of node]`` (estimated finish), ties best fit."""
    best, b1, b2 = 0, np.inf, np.inf
    for c in range(nc):
        nd = cand[c]
        v1 = table[i, node_model[nd]]
        v2 = _left_after(i, nd, k, p, cpu, gpu_free, cpu_free, has_gpu)
        if v1 < b1 or (v1 == b1 and v2 < b2):
            best, b1, b2 = c, v1, v2
    return best, -1


@njit(cache=True)
def _best_fit_into(row, kk, pp, out):
    """The ``kk`` GPUs of ``row`` with the least free milli that still hold ``pp`` (stable ties:
    lower index first), written to ``out[:kk]`` in that order."""
    G = row.shape[0]
    used = np.zeros(G, dtype=np.bool_)
    for j in range(kk):
        bg, bv = -1, np.inf
        for g in range(G):
            if not used[g] and row[g] >= pp and row[g] < bv:
                bg, bv = g, row[g]
        used[bg] = True
        out[j] = bg


@njit(cache=True)
def _fits(i, nd, k, p, cpu, mem, allowed, node_model, cpu_free, mem_free, gpu_free):
    """``ClusterState.fits`` for one (task, node)."""
    if not (cpu[i] <= cpu_free[nd] and mem[i] <= mem_free[nd] and allowed[i, node_model[nd]]):
        return False
    if k[i] == 0:
        return True
    n_ok = 0
    for g in range(gpu_free.shape[1]):
        if gpu_free[nd, g] >= p[i]:
            n_ok += 1
    return n_ok >= k[i]


@njit
def run_loop(choose, arrival, cpu, mem, k, p, allowed, node_model, key, run_time,
             cpu_free, mem_free, gpu_free, gpu_cap, cpu_milli, has_gpu,
             table, types_k, types_p, weights, params, ints, start, end, node_of, gpu_mask, demand, n_demand):
    """The whole run; fills start/end/node_of/gpu_mask. Returns 0, or -1 - i when the kernel
    chose an invalid position or GPU for task i (the caller raises).

    ``demand[i]``: the task's demand class (equal cpu, memory, k, p and allowed models): within
    one queue pass resources only shrink, so once a class fits none of the released nodes its
    other queued tasks are skipped without a fit test (the same result, fewer tests)."""
    n = arrival.shape[0]
    N = cpu_free.shape[0]
    G = gpu_free.shape[1]
    ht = np.empty(n + 1)
    hi = np.empty(n + 1, dtype=np.int64)
    hn = 0
    q_ids = np.empty(n + 1, dtype=np.int64)
    q_keys = np.empty(n + 1)
    qn = 0
    cand = np.empty(N, dtype=np.int64)
    released = np.empty(N, dtype=np.int64)
    rel_mark = np.zeros(N, dtype=np.bool_)
    pick = np.empty(G, dtype=np.int64)
    failed = np.zeros(n_demand, dtype=np.int64)  # pass number in which the class last fit nowhere
    n_pass = 0
    gpus_of = np.full((n, G), -1, dtype=np.int64)  # chosen GPUs per task (-1 = none)
    nxt = 0
    while nxt < n or hn > 0:
        if hn > 0 and (nxt >= n or ht[0] <= arrival[nxt]):
            t = ht[0]
            nrel = 0
            while hn > 0 and ht[0] == t:
                i = hi[0]
                hn = _heap_pop(ht, hi, hn)
                nd = node_of[i]
                cpu_free[nd] += cpu[i]
                mem_free[nd] += mem[i]
                for j in range(G):
                    g = gpus_of[i, j]
                    if g >= 0:
                        gpu_free[nd, g] += p[i]
                if not rel_mark[nd]:
                    rel_mark[nd] = True
                    released[nrel] = nd
                    nrel += 1
            rel = np.sort(released[:nrel])
            for r in range(nrel):
                rel_mark[rel[r]] = False
            # one pass over the queue (backfilling): earlier tasks fit nowhere and resources only shrink
            n_pass += 1
            s = 0
            while s < qn and nrel > 0:
                j = s
                found = False
                nc = 0
                while j < qn:
                    i = q_ids[j]
                    nc = 0
                    if failed[demand[i]] == n_pass:
                        j += 1
                        continue
                    for r in range(nrel):
                        if _fits(i, rel[r], k, p, cpu, mem, allowed, node_model, cpu_free, mem_free, gpu_free):
                            cand[nc] = rel[r]
                            nc += 1
                    if nc > 0:
                        found = True
                        break
                    failed[demand[i]] = n_pass
                    j += 1
                if not found:
                    break
                i = q_ids[j]
                for jj in range(j, qn - 1):
                    q_ids[jj] = q_ids[jj + 1]
                    q_keys[jj] = q_keys[jj + 1]
                qn -= 1
                err = _place(choose, i, cand, nc, t, arrival, cpu, mem, k, p, run_time, node_model,
                             cpu_free, mem_free, gpu_free, gpu_cap, cpu_milli, has_gpu, table, types_k, types_p,
                             weights, params, ints, start, end, node_of, gpus_of, pick)
                if err:
                    return -1 - i
                hn = _heap_push(ht, hi, hn, end[i], i)
                s = j
        else:
            i = nxt
            nxt += 1
            t = arrival[i]
            nc = 0
            for nd in range(N):
                if _fits(i, nd, k, p, cpu, mem, allowed, node_model, cpu_free, mem_free, gpu_free):
                    cand[nc] = nd
                    nc += 1
            if nc > 0:
                err = _place(choose, i, cand, nc, t, arrival, cpu, mem, k, p, run_time, node_model,
                             cpu_free, mem_free, gpu_free, gpu_cap, cpu_milli, has_gpu, table, types_k, types_p,
                             weights, params, ints, start, end, node_of, gpus_of, pick)
                if err:
                    return -1 - i
                hn = _heap_push(ht, hi, hn, end[i], i)
            else:
                # insert after every queued task with key <= key[i] (np.searchsorted side="right")
                lo, hi_ = 0, qn
                while lo < hi_:
                    mid = (lo + hi_) >> 1
                    if q_keys[mid] <= key[i]:
                        lo = mid + 1
                    else:
                        hi_ = mid
                for jj in range(qn, lo, -1):
                    q_ids[jj] = q_ids[jj - 1]
                    q_keys[jj] = q_keys[jj - 1]
                q_ids[lo] = i
                q_keys[lo] = key[i]
                qn += 1
    for i in range(n):
        m = 0
        for j in range(G):
            if gpus_of[i, j] >= 0:
                m |= 1 << gpus_of[i, j]
        gpu_mask[i] = m
    return 0


@njit
def _place(choose, i, cand, nc, t, arrival, cpu, mem, k, p, run_time, node_model,
           cpu_free, mem_free, gpu_free, gpu_cap, cpu_milli, has_gpu, table, types_k, types_p, weights, params,
           ints, start, end, node_of, gpus_of, pick):
    pos, g = choose(i, cand, nc, k, p, cpu, gpu_free, cpu_free, has_gpu, gpu_cap, cpu_milli, node_model,
                    table, types_k, types_p, weights, params, ints)
    if pos < 0 or pos >= nc:
        return True
    nd = cand[pos]
    kk = k[i]
    if kk > 0:
        if g >= 0:
            if kk != 1 or gpu_free[nd, g] < p[i]:
                return True
            pick[0] = g
        else:
            _best_fit_into(gpu_free[nd], kk, p[i], pick)
        # the Python engine stores the GPUs sorted; the mask does not care, the release order neither
        for j in range(kk):
            gpu_free[nd, pick[j]] -= p[i]
            gpus_of[i, j] = pick[j]
    cpu_free[nd] -= cpu[i]
    mem_free[nd] -= mem[i]
    rt = run_time[i, node_model[nd]]
    start[i] = t
    end[i] = t + rt
    node_of[i] = nd
    return False


# --- which policies have a kernel ------------------------------------------------------------


def kernel_for(policy) -> tuple | None:
    """(choose kernel, table, types_k, types_p, weights, params) for a policy with a compiled
    choice, else None.  A policy may supply its own: a ``kernel()`` method returning that tuple."""
    from hybridsched.kinds.cluster import policies as P

    empty2 = np.zeros((0, 0))
    none = (np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), np.zeros(0))
    simple = {P.NodePolicy: _choose_first, P.RoundRobin: _choose_round_robin, P.Greedy: _choose_greedy,
              P.BestFit: _choose_best_fit}
    cls = type(policy)
    if cls in simple:
        return (simple[cls], empty2, *none)
    if cls is P.EarliestFinishTime:
        speed = policy.cluster.model_speed()
        # estimate[i] / speed[model]; CPU-only tasks: 0 everywhere (policies.EstimatePolicy.choose)
        table = np.where(policy.inp.k[:, None] > 0, policy.estimate[:, None] / speed[None, :], 0.0)
        return (_choose_table, table, *none)
    if cls is P.Oracle:
        return (_choose_table, np.ascontiguousarray(policy.inp.run_time), *none)
    own = getattr(cls, "kernel", None)  # a policy's own compiled choice (e.g. cem.ScoredEFT)
    return own(policy) if own is not None else None


def demand_classes(cpu: np.ndarray, mem: np.ndarray, k: np.ndarray, p: np.ndarray, allowed: np.ndarray
                   ) -> tuple[np.ndarray, int]:
    """Per task, the index of its demand class (same cpu, memory, GPU count and share, allowed
    models), and the number of classes."""
    rows = np.column_stack([cpu, mem, k.astype(np.float64), p, allowed.astype(np.float64)])
    _, inverse = np.unique(rows, axis=0, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1).astype(np.int64)
    return inverse, int(inverse.max()) + 1 if len(inverse) else 0
