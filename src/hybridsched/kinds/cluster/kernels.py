"""The node-cluster event loop compiled with numba, for the policies whose choice has a kernel.

``engine.simulate`` runs this loop instead of its Python one when :func:`kernel_for` knows the
policy's exact class (a subclass may override anything, so it takes the Python loop).  The
loop is the Python engine's, step for step: the same event order (a completion at time t
before an arrival at t; all completions at one instant, then one queue pass over the nodes
they released), the same FIFO-with-backfilling queue ordered by ``queue_key`` (ties: arrival
order), the same fit test and best-fit GPU choice.  The tests compare whole trace frames
with the Python loop for every policy here on a slice of the real trace.

A choice kernel gets the task ``i``, the feasible nodes ``cand[:nc]`` (increasing index), the
state arrays ``st`` and the policy's data ``pd`` (a per-task-and-GPU-model ``table``, FGD's task
mix and caches, an int scratch ``ints``, a generator), and returns ``(position, gpu)``: ``gpu``
>= 0 pins the task to that GPU of the chosen node (FGD's GPU-share placement), -1 means best fit.
An arrival finds its feasible nodes through ``node_index`` instead of testing every node; for
first fit, round robin and greedy the index finds the chosen node directly.
A keyed policy (greedy, best fit, EFT / oracle, FGD) is one key function ``key_*`` (a node's key
for a task, lower preferred); its choice kernel is :func:`scan_min` over that key, and the class
index (``class_index.py``) keeps the same keys in its trees.  The kernels mirror ``policies.py``;
the policy objects stay the single source of their parameters (``prepare``/``fit`` run before
and this module reads their attributes).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from hybridsched.kinds.cluster import node_index as NI
from hybridsched.kinds.cluster.fragmentation import _fgd_one, _node_stat_one
from hybridsched.kinds.cluster.trace import MILLI
# (time, task) min-heap whose ties pop in task order, as heapq orders the Python loop's tuples
from hybridsched.heap import heap_pop as _heap_pop
from hybridsched.heap import heap_push as _heap_push

# how an arrival asks the node index (node_index.py) for its node: every feasible node (the
# kernel chooses), the first, the first from round robin's next node on, or greedy's least
# loaded one (the kernel then sees only that node)
ALL, FIRST, NEXT_FROM, LEAST_LOADED = 0, 1, 2, 3
# ... or the choice kernel finds the node itself (``choose(i, cand, -1, st, pd)``: its demand
# class's feasibility index, ``class_index.py``)
INDEXED = 4
# slots of the integer scalars ``ints`` (round robin's next node)
_RR_NEXT = 0


# --- choice kernels: (i, cand, nc, st, pd) -> (position in cand[:nc], pinned GPU or -1) --------
# ``st`` = (k, p, cpu, gpu_free, cpu_free, has_gpu, gpu_cap, cpu_milli, node_model, version),
# ``pd`` = the policy's own data (see ``kernel_for``).


@njit(cache=True, inline="always")
def _left_after(i, nd, st):
    """``NodePolicy.left_after`` for one node (same float operations in the same order)."""
    k, p, cpu, gpu_free, cpu_free, has_gpu = st[0], st[1], st[2], st[3], st[4], st[5]
    if k[i] > 0:
        s = 0.0
        for g in range(gpu_free.shape[1]):
            f = gpu_free[nd, g]
            s += f if f > 0 else 0.0
        free_gpu = s - k[i] * p[i]
        return free_gpu + (cpu_free[nd] - cpu[i]) / (MILLI * 1e3)
    return has_gpu[nd] * 1e12 + cpu_free[nd] - cpu[i]


@njit(cache=True)
def _choose_first(i, cand, nc, st, pd):
    return 0, -1


@njit(cache=True)
def _choose_round_robin(i, cand, nc, st, pd):
    ints = pd[0]
    nxt = ints[_RR_NEXT]
    pos = np.searchsorted(cand[:nc], nxt)
    if pos >= nc:
        pos = 0
    ints[_RR_NEXT] = cand[pos] + 1
    return pos, -1


@njit(cache=True)
def _choose_random(i, cand, nc, st, pd):
    """``Random.choose``: ``rng.integers(nc)`` on the policy's own generator (numba draws the
    same numbers from the same bit generator, and advances it as numpy does)."""
    return pd[0].integers(0, nc), -1


# --- a node's key for a task: (first key, tie-break key, pinned GPU or -1), lower preferred ------
# One function per policy, read by :func:`scan_min` (the policy's choice kernel, right after its
# key) and by the class index's trees (``class_index.py``); a one-key policy's second key is +inf
# (it never breaks a tie).


@njit(cache=True, inline="always")
def scan_min(keyfn, i, cand, nc, st, pd):
    """The first position of ``cand[:nc]`` with the least ``keyfn`` (first key, then second) and
    its pinned GPU: a choice kernel for every keyed policy.  Inlined, so that its caller names
    ``keyfn`` itself (numba cannot cache a function that passes a looping one as a value)."""
    best, b1, b2, bg = 0, np.inf, np.inf, -1
    for c in range(nc):
        v1, v2, g = keyfn(i, cand[c], st, pd)
        if v1 < b1 or (v1 == b1 and v2 < b2):
            best, b1, b2, bg = c, v1, v2, g
    return best, bg


@njit(cache=True)
def key_greedy(i, nd, st, pd):
    """``Greedy.score``: the GPU share in use for a GPU task, the CPU share for a CPU-only one."""
    k, gpu_free, cpu_free, gpu_cap, cpu_milli = st[0], st[3], st[4], st[6], st[7]
    if k[i] > 0:
        cap = 0.0
        fr = 0.0
        for g in range(gpu_free.shape[1]):
            cap += gpu_cap[nd, g]
            f = gpu_free[nd, g]
            fr += f if f > 0 else 0.0
        return 1.0 - fr / cap, np.inf, -1
    return 1.0 - cpu_free[nd] / cpu_milli[nd], np.inf, -1


@njit(cache=True)
def _choose_greedy(i, cand, nc, st, pd):
    return scan_min(key_greedy, i, cand, nc, st, pd)


@njit(cache=True)
def key_left(i, nd, st, pd):
    """``BestFit.score``: the room left after placing (``_left_after``)."""
    return _left_after(i, nd, st), np.inf, -1


@njit(cache=True)
def _choose_best_fit(i, cand, nc, st, pd):
    return scan_min(key_left, i, cand, nc, st, pd)


@njit(cache=True)
def key_table(i, nd, st, pd):
    """EFT / oracle: ``table[i, model of node]`` (estimated finish), ties best fit."""
    return pd[0][i, st[8][nd]], _left_after(i, nd, st), -1


@njit(cache=True)
def _choose_table(i, cand, nc, st, pd):
    return scan_min(key_table, i, cand, nc, st, pd)


@njit(cache=True)
def _fgd_score(i, nd, st, pd):
    """FGD's (fragmentation increase, GPU) of task ``i`` on node ``nd``: the per-node statistics and
    the per-shape scores are cached until the node changes (``version``), as
    ``fragmentation.FragCache`` does."""
    cpu, gpu_free, cpu_free, node_model, version = st[2], st[3], st[4], st[8], st[9]
    tk, tp, tcpu, tallow, tw, cnt, lt, frag, stat_ver = pd[0], pd[1], pd[2], pd[3], pd[4], pd[5], pd[6], pd[7], pd[8]
    shape, shape_k, shape_p, memo_d, memo_g, memo_v, cnt2, lt2, taken = (pd[9], pd[10], pd[11], pd[12], pd[13],
                                                                          pd[14], pd[15], pd[16], pd[17])
    s = shape[i]
    memo = s < memo_d.shape[0]  # only the most frequent shapes are memoised (a cap on memory)
    if memo and memo_v[s, nd] == version[nd]:
        return memo_d[s, nd], memo_g[s, nd]
    if stat_ver[nd] != version[nd]:
        _node_stat_one(nd, gpu_free, cpu_free, node_model, tk, tp, tcpu, tallow, tw, cnt, lt, frag)
        stat_ver[nd] = version[nd]
    v1, g = _fgd_one(nd, gpu_free, cpu_free, node_model, cnt, lt, frag, cpu[i], shape_k[s], shape_p[s], tk, tp,
                     tcpu, tallow, tw, cnt2, lt2, taken)
    if memo:
        memo_d[s, nd], memo_g[s, nd], memo_v[s, nd] = v1, g, version[nd]
    return v1, g


@njit(cache=True)
def key_fgd(i, nd, st, pd):
    """``FragmentationGradientDescent.choose``: least fragmentation increase (and the GPU that
    achieves it), ties best fit."""
    v1, g = _fgd_score(i, nd, st, pd)
    return v1, _left_after(i, nd, st), g


@njit(cache=True)
def _choose_fgd(i, cand, nc, st, pd):
    return scan_min(key_fgd, i, cand, nc, st, pd)


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


@njit(cache=True, inline="always")
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


# --- the waiting queue: one binary heap of task ids per demand class, ordered by (key, id) -----


@njit(cache=True, inline="always")
def _before(a, b, key):
    return key[a] < key[b] or (key[a] == key[b] and a < b)


@njit(cache=True)
def _qpush(h, base, size, x, key):
    """Push task ``x`` on the heap ``h[base:base + size]``; the caller grows ``size``."""
    j = size
    while j > 0:
        parent = (j - 1) >> 1
        if not _before(x, h[base + parent], key):
            break
        h[base + j] = h[base + parent]
        j = parent
    h[base + j] = x


@njit(cache=True)
def _qpop(h, base, size, key):
    """Remove ``h[base]`` (the first task) from a heap of ``size``; the caller shrinks ``size``."""
    size -= 1
    x = h[base + size]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= size:
            break
        if c + 1 < size and _before(h[base + c + 1], h[base + c], key):
            c += 1
        if not _before(h[base + c], x, key):
            break
        h[base + j] = h[base + c]
        j = c
    if size > 0:
        h[base + j] = x


@njit(inline="always")  # inlined into the entry bound to each choice (bound_loops.bind), so numba caches it
def run_loop(choose, mode, pd, ints, arrival, cpu, mem, k, p, allowed, node_model, key, run_time,
             cpu_free, mem_free, gpu_free, gpu_cap, cpu_milli, has_gpu, version,
             start, end, node_of, gpu_mask, demand, n_demand):
    """The whole run; fills start/end/node_of/gpu_mask. Returns 0, or -1 - i when the kernel
    chose an invalid position or GPU for task i (the caller raises).

    Arrivals find their node through the node index (``node_index``; ``mode``: see ALL ...
    LEAST_LOADED).  The queue is one heap per demand
    class ``demand[i]`` (equal cpu, memory, k, p and allowed models): tasks of a class fit the
    same nodes, so a queue pass only needs each class's first task, and takes them in queue
    order (key, then arrival) until none fits the released nodes - the task the plain in-order
    scan takes, since resources only shrink within a pass."""
    n = arrival.shape[0]
    N = cpu_free.shape[0]
    G = gpu_free.shape[1]
    M = allowed.shape[1]
    tr = NI.new(N, G, node_model, gpu_cap)
    for nd in range(N):
        NI.leaf(tr, nd, cpu_free, mem_free, gpu_free, cpu_milli)
    st = (k, p, cpu, gpu_free, cpu_free, has_gpu, gpu_cap, cpu_milli, node_model, version, tr, mem, mem_free,
          allowed)
    stack = np.empty(NI._MAX_DEPTH, dtype=np.int64)
    # running tasks: (end, id) heap
    ht = np.empty(n + 1)
    hi = np.empty(n + 1, dtype=np.int64)
    hn = 0
    # waiting tasks: per class heap in q[cbase[c]:cbase[c] + csize[c]]; active = nonempty classes
    cbase = np.zeros(n_demand + 1, dtype=np.int64)
    for i in range(n):
        cbase[demand[i] + 1] += 1
    for c in range(n_demand):
        cbase[c + 1] += cbase[c]
    csize = np.zeros(n_demand, dtype=np.int64)
    q = np.empty(n, dtype=np.int64)
    active = np.empty(n_demand, dtype=np.int64)
    active_pos = np.full(n_demand, -1, dtype=np.int64)
    n_active = 0
    heads = np.empty(n_demand, dtype=np.int64)  # a pass's heap of class heads
    cand = np.empty(N, dtype=np.int64)
    released = np.empty(N, dtype=np.int64)
    rel_mark = np.zeros(N, dtype=np.bool_)
    pick = np.empty(max(G, 1), dtype=np.int64)
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
                m = gpu_mask[i]
                for g in range(G):
                    if (m >> g) & 1:
                        gpu_free[nd, g] += p[i]
                version[nd] += 1
                NI.leaf(tr, nd, cpu_free, mem_free, gpu_free, cpu_milli)
                if not rel_mark[nd]:
                    rel_mark[nd] = True
                    released[nrel] = nd
                    nrel += 1
            rel = np.sort(released[:nrel])
            for r in range(nrel):
                rel_mark[rel[r]] = False
            if n_active == 0:
                continue
            # one pass over the queue (backfilling): the classes whose first task fits a released node
            nh = 0
            for a in range(n_active):
                c = active[a]
                i = q[cbase[c]]
                for r in range(nrel):
                    if _fits(i, rel[r], k, p, cpu, mem, allowed, node_model, cpu_free, mem_free, gpu_free):
                        _qpush(heads, 0, nh, i, key)
                        nh += 1
                        break
            while nh > 0:
                i = heads[0]
                _qpop(heads, 0, nh, key)
                nh -= 1
                nc = 0
                for r in range(nrel):
                    if _fits(i, rel[r], k, p, cpu, mem, allowed, node_model, cpu_free, mem_free, gpu_free):
                        cand[nc] = rel[r]
                        nc += 1
                if nc == 0:
                    continue  # fits no released node any more, nor will it in this pass
                c = demand[i]
                _qpop(q, cbase[c], csize[c], key)
                csize[c] -= 1
                if csize[c] > 0:
                    _qpush(heads, 0, nh, q[cbase[c]], key)
                    nh += 1
                else:
                    a = active_pos[c]
                    n_active -= 1
                    active[a] = active[n_active]
                    active_pos[active[a]] = a
                    active_pos[c] = -1
                hn = _start(choose, pd, st, i, cand, nc, -1, False, t, cpu, mem, k, p, run_time, node_model,
                            cpu_free, mem_free, gpu_free, cpu_milli, version, start, end, node_of, gpu_mask, pick,
                            tr, ht, hi, hn)
                if hn < 0:
                    return -1 - i
        else:
            i = nxt
            nxt += 1
            t = arrival[i]
            bits = np.int64(0)
            for j in range(M):
                if allowed[i, j]:
                    bits |= np.int64(1) << j
            ki, pi, ci, mi = k[i], p[i], cpu[i], mem[i]
            gi = -1  # INDEXED: the chosen node is cand[0], pinned GPU gi
            if mode == INDEXED:
                pos, gi = choose(i, cand, -1, st, pd)
                nc = 0
                if pos >= 0:
                    cand[0] = cand[pos]
                    nc = 1
            elif mode == LEAST_LOADED:
                nc = 0
                nd = NI.least_loaded(tr, bits, ki, pi, ci, mi, stack)
                if nd >= 0:
                    cand[0] = nd
                    nc = 1
            elif mode == FIRST:
                nc = NI.search(tr, N, bits, ki, pi, ci, mi, 0, 1, cand, stack)
            elif mode == NEXT_FROM:
                nc = NI.search(tr, N, bits, ki, pi, ci, mi, ints[_RR_NEXT], 1, cand, stack)
                if nc == 0:
                    nc = NI.search(tr, N, bits, ki, pi, ci, mi, 0, 1, cand, stack)
            else:
                nc = NI.search(tr, N, bits, ki, pi, ci, mi, 0, N, cand, stack)
            if nc > 0:
                hn = _start(choose, pd, st, i, cand, nc, gi, mode == INDEXED, t, cpu, mem, k, p, run_time, node_model,
                            cpu_free, mem_free, gpu_free, cpu_milli, version, start, end, node_of, gpu_mask, pick,
                            tr, ht, hi, hn)
                if hn < 0:
                    return -1 - i
            else:
                c = demand[i]
                _qpush(q, cbase[c], csize[c], i, key)
                csize[c] += 1
                if csize[c] == 1:
                    active[n_active] = c
                    active_pos[c] = n_active
                    n_active += 1
    return 0


@njit(inline="always")  # takes the choice: inlined with the loop (bound_loops.bind)
def _start(choose, pd, st, i, cand, nc, gi, indexed, t, cpu, mem, k, p, run_time, node_model, cpu_free,
           mem_free, gpu_free, cpu_milli, version, start, end, node_of, gpu_mask, pick, tr, ht, hi, hn):
    """Start task ``i`` at ``t`` on the node the choice kernel picks among ``cand[:nc]`` (``indexed``:
    the class index already chose ``cand[0]`` with pinned GPU ``gi``): place it, update the node
    index and push its completion on the (end, id) heap.  Returns the heap's new size, or -1 when
    the kernel chose an invalid position or GPU."""
    if indexed:
        err = _commit(0, gi, i, cand, 1, t, cpu, mem, k, p, run_time, node_model,
                      cpu_free, mem_free, gpu_free, version, start, end, node_of, gpu_mask, pick)
    else:
        err = _place(choose, pd, st, i, cand, nc, t, cpu, mem, k, p, run_time, node_model,
                     cpu_free, mem_free, gpu_free, version, start, end, node_of, gpu_mask, pick)
    if err:
        return -1
    NI.leaf(tr, node_of[i], cpu_free, mem_free, gpu_free, cpu_milli)
    return _heap_push(ht, hi, hn, end[i], i)


@njit(inline="always")  # takes the choice: inlined with the loop (bound_loops.bind)
def _place(choose, pd, st, i, cand, nc, t, cpu, mem, k, p, run_time, node_model,
           cpu_free, mem_free, gpu_free, version, start, end, node_of, gpu_mask, pick):
    """Take the kernel's node and GPUs for task ``i`` and update the state arrays; True when the
    kernel's choice is invalid."""
    pos, g = choose(i, cand, nc, st, pd)
    return _commit(pos, g, i, cand, nc, t, cpu, mem, k, p, run_time, node_model,
                   cpu_free, mem_free, gpu_free, version, start, end, node_of, gpu_mask, pick)


@njit
def _commit(pos, g, i, cand, nc, t, cpu, mem, k, p, run_time, node_model,
            cpu_free, mem_free, gpu_free, version, start, end, node_of, gpu_mask, pick):
    """Start task ``i`` at ``t`` on ``cand[pos]`` (GPU ``g`` pinned, -1: best fit); True if the
    choice is invalid."""
    if pos < 0 or pos >= nc:
        return True
    nd = cand[pos]
    kk = k[i]
    m = 0
    if kk > 0:
        if g >= 0:
            if kk != 1 or gpu_free[nd, g] < p[i]:
                return True
            pick[0] = g
        else:
            _best_fit_into(gpu_free[nd], kk, p[i], pick)
        for j in range(kk):
            gpu_free[nd, pick[j]] -= p[i]
            m |= np.int64(1) << pick[j]
    gpu_mask[i] = m
    cpu_free[nd] -= cpu[i]
    mem_free[nd] -= mem[i]
    version[nd] += 1
    rt = run_time[i, node_model[nd]]
    start[i] = t
    end[i] = t + rt
    node_of[i] = nd
    return False


# --- which policies have a kernel ------------------------------------------------------------


class Kernel(NamedTuple):
    """How ``run_loop`` runs one policy: its choice kernel and data, and how arrivals search."""

    choose: object  # the choice kernel (a numba dispatcher)
    mode: int  # ALL ... LEAST_LOADED
    data: tuple  # the kernel's own data (``pd``)
    ints: np.ndarray  # int scalars (round robin's next node), shared by the loop and the kernel


def demand_classes(cpu: np.ndarray, mem: np.ndarray, k: np.ndarray, p: np.ndarray, allowed: np.ndarray
                   ) -> tuple[np.ndarray, int]:
    """Per task, the index of its demand class (same cpu, memory, GPU count and share, allowed
    models), and the number of classes.  Each column is coded on its own (a 1-D unique), then
    the codes are combined: one 2-D unique over the rows would sort them as bytes, far slower."""
    n = len(cpu)
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    bits = (allowed.astype(np.int64) << np.arange(allowed.shape[1], dtype=np.int64)).sum(axis=1)
    code = np.zeros(n, dtype=np.int64)
    for col in (cpu, mem, k, p, bits):
        _, inv = np.unique(col, return_inverse=True)
        inv = np.asarray(inv).reshape(-1)
        code = code * (int(inv.max()) + 1) + inv
        _, code = np.unique(code, return_inverse=True)  # renumber densely: the products stay small
        code = np.asarray(code).reshape(-1).astype(np.int64)
    return code, int(code.max()) + 1
