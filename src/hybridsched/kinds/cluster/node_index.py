"""An index over the nodes of the compiled cluster loop (``kernels.run_loop``): a binary tree whose
leaves are the nodes and whose inner entries hold the maxima and minima of their leaves.

Per leaf: free CPU, free memory, the k-th largest free GPU for every k (k GPUs hold a share p
exactly when the k-th largest holds it), the GPU model as a bit, and greedy's GPU and CPU load,
computed with the very expressions of its choice kernel.  A subtree whose maxima cannot hold a
task has no node that fits it; one whose minima hold it (and whose models are all allowed)
fits on every node.  So an arrival finds its nodes without testing every node (the test of a
single leaf is the exact one, ``kernels._fits``):

* :func:`search`: the fitting nodes in increasing order (all, or the first from an index on);
* :func:`least_loaded`: greedy's node, by branch and bound: a subtree's least load bounds its
  nodes' loads.  (The same bound for best fit's and EFT's keys prunes little: the nodes with
  the least room left are mostly full ones that do not fit, so those policies take
  :func:`search`.)

Every answer is the one a plain scan over the nodes gives (tests/cluster/test_compiled_engine.py).
"""

from __future__ import annotations

import numpy as np
from numba import njit


_FIT_NONE, _FIT_SOME, _FIT_ALL = 0, 1, 2
_MAX_DEPTH = 130  # stack entries: two per tree level


@njit(cache=True)
def new(n_nodes, n_gpu_slots, node_model, gpu_cap):  # pragma: no cover - compiled
    """An index of ``n_nodes`` nodes (fill it with :func:`leaf` for every node)."""
    size = 1
    while size < n_nodes:
        size *= 2
    g = max(n_gpu_slots, 1)
    hi_cpu, hi_mem, hi_gpu = np.full(2 * size, -np.inf), np.full(2 * size, -np.inf), np.full((2 * size, g), -np.inf)
    lo_cpu, lo_mem, lo_gpu = np.full(2 * size, np.inf), np.full(2 * size, np.inf), np.full((2 * size, g), np.inf)
    bits = np.zeros(2 * size, dtype=np.int64)
    cnt = np.zeros(2 * size, dtype=np.int64)
    load_gpu, load_cpu = np.full(2 * size, np.inf), np.full(2 * size, np.inf)
    cap = np.zeros(n_nodes)
    for nd in range(n_nodes):
        bits[size + nd] = np.int64(1) << node_model[nd]
        cnt[size + nd] = 1
        for j in range(gpu_cap.shape[1]):
            cap[nd] += gpu_cap[nd, j]
    for x in range(size - 1, 0, -1):
        bits[x] = bits[2 * x] | bits[2 * x + 1]
        cnt[x] = cnt[2 * x] + cnt[2 * x + 1]
    # every node change, in order (a ring; ``class_index`` replays it per demand class)
    log = np.zeros(2 * n_nodes + 64, dtype=np.int64)
    logn = np.zeros(1, dtype=np.int64)
    return (hi_cpu, hi_mem, hi_gpu, lo_cpu, lo_mem, lo_gpu, bits, cnt, load_gpu, load_cpu, cap, log, logn)


@njit(cache=True)
def leaf(tr, nd, cpu_free, mem_free, gpu_free, cpu_milli):  # pragma: no cover - compiled
    """Refresh node ``nd``'s leaf and its ancestors after its free resources changed."""
    hi_cpu, hi_mem, hi_gpu, lo_cpu, lo_mem, lo_gpu, bits, cnt, load_gpu, load_cpu, cap, log, logn = tr
    log[logn[0] % log.shape[0]] = nd
    logn[0] += 1
    size = cnt.shape[0] // 2
    x = size + nd
    hi_cpu[x] = lo_cpu[x] = cpu_free[nd]
    hi_mem[x] = lo_mem[x] = mem_free[nd]
    G = gpu_free.shape[1]
    fr = 0.0
    for g in range(G):
        v = gpu_free[nd, g]
        fr += v if v > 0 else 0.0
        j = g  # insertion sort, decreasing: column j = the (j+1)-th largest
        while j > 0 and hi_gpu[x, j - 1] < v:
            hi_gpu[x, j] = hi_gpu[x, j - 1]
            j -= 1
        hi_gpu[x, j] = v
    for g in range(G):
        lo_gpu[x, g] = hi_gpu[x, g]
    # greedy's loads, as its key computes them (kernels.key_greedy)
    load_gpu[x] = 1.0 - fr / cap[nd] if cap[nd] > 0 else np.inf
    load_cpu[x] = 1.0 - cpu_free[nd] / cpu_milli[nd]
    x >>= 1
    while x >= 1:
        a, b = 2 * x, 2 * x + 1
        # an entry that does not change leaves its ancestors as they are: stop there
        same = _put(hi_cpu, x, max(hi_cpu[a], hi_cpu[b]))
        same &= _put(lo_cpu, x, min(lo_cpu[a], lo_cpu[b]))
        same &= _put(hi_mem, x, max(hi_mem[a], hi_mem[b]))
        same &= _put(lo_mem, x, min(lo_mem[a], lo_mem[b]))
        for g in range(G):
            same &= _put2(hi_gpu, x, g, max(hi_gpu[a, g], hi_gpu[b, g]))
            same &= _put2(lo_gpu, x, g, min(lo_gpu[a, g], lo_gpu[b, g]))
        same &= _put(load_gpu, x, min(load_gpu[a], load_gpu[b]))
        same &= _put(load_cpu, x, min(load_cpu[a], load_cpu[b]))
        if same:
            break
        x >>= 1


@njit(cache=True, inline="always")
def _put(arr, x, v):  # pragma: no cover - compiled
    """``arr[x] = v``; whether it held ``v`` already."""
    same = arr[x] == v
    arr[x] = v
    return same


@njit(cache=True, inline="always")
def _put2(arr, x, g, v):  # pragma: no cover - compiled
    """``arr[x, g] = v``; whether it held ``v`` already."""
    same = arr[x, g] == v
    arr[x, g] = v
    return same


@njit(cache=True, inline="always")
def _fit(tr, x, tbits, k, p, cpu, mem):  # pragma: no cover - compiled
    """Whether a task fits no node under ``x``, maybe some, or every one."""
    hi_cpu, hi_mem, hi_gpu, lo_cpu, lo_mem, lo_gpu, bits = tr[0], tr[1], tr[2], tr[3], tr[4], tr[5], tr[6]
    if tr[7][x] == 0 or hi_cpu[x] < cpu or hi_mem[x] < mem or (bits[x] & tbits) == 0:
        return _FIT_NONE
    if k > 0 and hi_gpu[x, k - 1] < p:
        return _FIT_NONE
    if lo_cpu[x] >= cpu and lo_mem[x] >= mem and (bits[x] & ~tbits) == 0 and (k == 0 or lo_gpu[x, k - 1] >= p):
        return _FIT_ALL
    return _FIT_SOME


@njit(cache=True)
def search(tr, n_nodes, tbits, k, p, cpu, mem, lo, limit, cand, stack):  # pragma: no cover - compiled
    """The nodes of index >= ``lo`` that fit the task (model bits ``tbits``, ``k`` GPUs of ``p``,
    ``cpu``, ``mem``), in increasing order, at most ``limit``, into ``cand``; returns how many."""
    size = tr[7].shape[0] // 2
    nc = 0
    stack[0] = 1
    top = 1
    while top > 0:
        top -= 1
        x = stack[top]
        span = size >> _level(x)
        first = x * span - size
        if first + span <= lo:
            continue
        f = _fit(tr, x, tbits, k, p, cpu, mem)
        if f == _FIT_NONE:
            continue
        if f == _FIT_ALL or x >= size:
            for nd in range(max(first, lo), min(first + span, n_nodes)):
                cand[nc] = nd
                nc += 1
                if nc >= limit:
                    return nc
            continue
        stack[top] = 2 * x + 1  # the left subtree (lower nodes) on top: searched first
        stack[top + 1] = 2 * x
        top += 2
    return nc


@njit(cache=True, inline="always")
def _level(x):  # pragma: no cover - compiled
    d = 0
    while x > 1:
        x >>= 1
        d += 1
    return d


@njit(cache=True, inline="always")
def _bound(tr, x, k):  # pragma: no cover - compiled
    """Lower bound of greedy's load over the nodes under ``x``: the least of their loads."""
    return tr[8][x] if k > 0 else tr[9][x]


@njit(cache=True)
def least_loaded(tr, tbits, k, p, cpu, mem, stack):  # pragma: no cover - compiled
    """The fitting node with the least greedy load (``kernels._choose_greedy``: GPU share in use
    for a GPU task, CPU share for a CPU-only one), lowest index on ties; -1 if none fits.  A
    leaf's test is exact and its bound is its load."""
    size = tr[7].shape[0] // 2
    b1, bn = np.inf, np.int64(1) << 62
    stack[0] = 1
    top = 1
    while top > 0:
        top -= 1
        x = stack[top]
        if _fit(tr, x, tbits, k, p, cpu, mem) == _FIT_NONE:
            continue
        first = x * (size >> _level(x)) - size
        l1 = _bound(tr, x, k)
        if l1 > b1 or (l1 == b1 and first >= bn):
            continue
        if x >= size:
            b1, bn = l1, x - size
            continue
        a, c = 2 * x, 2 * x + 1
        if _bound(tr, a, k) > _bound(tr, c, k):  # the subtree with the smaller bound on top: searched first
            a, c = c, a
        stack[top] = c
        stack[top + 1] = a
        top += 2
    return bn if bn < (np.int64(1) << 62) else -1
