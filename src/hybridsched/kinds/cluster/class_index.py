"""A feasibility index per demand class for the compiled cluster loop (``kernels.run_loop``).

Tasks of one demand class (equal CPU, memory, GPU count, GPU share and allowed models) fit the
same nodes, and best fit's, EFT's, the oracle's and FGD's keys of a node are the same for all
of them.  So each class keeps a min tree over the nodes whose leaf is that class's exact key of
the node - ``(key1, key2, node)`` compared lexicographically, or empty where the class does not
fit (random instead keeps a tree of counts of the fitting nodes).  An arrival then reads its node
from the root (best fit, FGD), from one range per GPU model (EFT, oracle: ``table[i, model]`` is the
first key, so the nodes are laid out by (model, node)), or draws a position among the fitting
nodes and walks down the counts (random): O(log nodes) instead of a scan over every fitting node.

Memory layout (the upkeep's cost is cache misses): a keyed entry is one record of
four float64 (key1, key2, node, leaf's fit), so two siblings share a cache line; inner entries
keep no count, so a path update stops at the first entry whose least key did not change;
random's counts are int32, eight to a record's 32 bytes.

The answer is the plain scan's, to the bit: a leaf's key is the scan's own key function
(``kernels.key_*``), and the scan (``kernels.scan_min``) keeps the first node (lowest index) of the
least ``(key1, key2)``, which is the lexicographic minimum of ``(key1, key2, node)``.

Updates are lazy: ``node_index.leaf`` appends every changed node to a log (``tr[11]``), and a
class replays the log since its last query when it is next asked (each node once), or rebuilds
its tree when more nodes changed than it has.  Classes beyond a memory budget (the rarest ones)
take the scan.  Tests: tests/cluster/test_golden_schedules.py (schedules equal main's before
this index) and tests/cluster/test_compiled_engine.py (equal to the Python loop).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hybridsched.kinds.cluster import kernels as K
from hybridsched.kinds.cluster import node_index as NI

_EMPTY = 1 << 62  # the node of an empty entry: after every real node
INDEX_ENTRIES = 8_000_000  # tree entries over all indexed classes at most (32 bytes each)

# slots of ``cx``, the index's arrays (see ``build``)
(_DEMAND, _SLOT, _BITS, _TREE, _GL, _PTR, _SLOT_OF, _NODE_AT, _MSTART, _SEEN, _TOKEN, _CNT) = range(12)
# fields of a tree entry ``cx[_TREE][s, x]``: one record of four float64 (the node and the count are
# small integers, exact in a float64), so an entry is half a cache line and two siblings share one
# (it was four arrays: four cache misses per entry touched)
_K1, _K2, _ND, _CT = range(4)


def build(inp, cluster, node_order: str = "node", pinned_gpu: bool = False, counted: bool = False) -> tuple:
    """The index arrays for a run: per task its class, per class its tree slot (-1: not indexed,
    the rarest classes beyond ``INDEX_ENTRIES``) and model bits; ``node_order`` "model" lays the
    leaves out by (GPU model, node) for per-model range queries; ``pinned_gpu`` keeps a GPU per
    (class, node) leaf (FGD's choice); ``counted``: random's index, a tree of counts of fitting nodes
    only (int32, eight times denser than the keyed entries; random needs no key), instead of the
    keyed tree (whose entries keep no count: the other policies only ask whether the root is empty,
    so a path update stops at the first entry whose least key did not change)."""
    allowed = np.ascontiguousarray(inp.allowed)
    demand, n_demand = K.demand_classes(inp.cpu, inp.mem, inp.k, inp.p, allowed)
    n_nodes = cluster.n_nodes
    size = 1
    while size < n_nodes:
        size *= 2
    counts = np.bincount(demand, minlength=n_demand)
    n_ix = min(n_demand, INDEX_ENTRIES // (2 * size))
    slot = np.full(n_demand, -1, dtype=np.int64)
    slot[np.argsort(-counts, kind="stable")[:n_ix]] = np.arange(n_ix)
    bits = np.zeros(n_demand, dtype=np.int64)
    first = np.zeros(n_demand, dtype=np.int64)
    first[demand[::-1]] = np.arange(len(demand))[::-1]  # a task of each class
    for j in range(allowed.shape[1]):
        bits |= allowed[first, j].astype(np.int64) << j
    model = np.asarray(cluster.node_model, dtype=np.int64)
    n_models = int(model.max()) + 1 if n_nodes else 1
    if node_order == "model":
        node_at = np.argsort(model, kind="stable").astype(np.int64)
        mstart = np.searchsorted(model[node_at], np.arange(n_models + 1)).astype(np.int64)
    else:
        node_at = np.arange(n_nodes, dtype=np.int64)
        mstart = np.array([0, n_nodes], dtype=np.int64)
    slot_of = np.empty(n_nodes, dtype=np.int64)
    slot_of[node_at] = np.arange(n_nodes)
    node_at = np.concatenate([node_at, np.full(size - n_nodes, -1, dtype=np.int64)])
    tree = np.empty((1, 2, 4) if counted else (n_ix, 2 * size, 4))
    tree[:, :, _K1] = np.inf
    tree[:, :, _K2] = np.inf
    tree[:, :, _ND] = _EMPTY
    tree[:, :, _CT] = 0.0
    return (demand, slot, bits, tree,
            np.full((n_ix, n_nodes) if pinned_gpu else (1, 1), -1, dtype=np.int64),
            np.full(n_ix, -1, dtype=np.int64), slot_of, node_at, mstart,
            np.zeros(max(n_nodes, 1), dtype=np.int64), np.zeros(1, dtype=np.int64),
            np.zeros((n_ix, 2 * size) if counted else (1, 1), dtype=np.int32))


@njit(cache=True, inline="always")
def fits(i, nd, st):  # pragma: no cover - compiled
    """``kernels._fits`` on the loop's state tuple."""
    return K._fits(i, nd, st[0], st[1], st[2], st[11], st[13], st[8], st[4], st[12], st[3])


@njit(cache=True, inline="always")
def _less(a1, a2, an, b1, b2, bn):  # pragma: no cover - compiled
    return a1 < b1 or (a1 == b1 and (a2 < b2 or (a2 == b2 and an < bn)))


@njit(cache=True, inline="always")
def _pull(tree, s, x):  # pragma: no cover - compiled
    """Entry ``x`` from its children; False when it did not change (its ancestors need no update).
    Inner entries keep no count (only a leaf's says whether its node fits)."""
    a, b = 2 * x, 2 * x + 1
    if _less(tree[s, b, _K1], tree[s, b, _K2], tree[s, b, _ND], tree[s, a, _K1], tree[s, a, _K2], tree[s, a, _ND]):
        a = b
    if tree[s, x, _K1] == tree[s, a, _K1] and tree[s, x, _K2] == tree[s, a, _K2] and tree[s, x, _ND] == tree[s, a, _ND]:
        return False
    tree[s, x, _K1], tree[s, x, _K2], tree[s, x, _ND] = tree[s, a, _K1], tree[s, a, _K2], tree[s, a, _ND]
    return True


@njit(cache=True, inline="always")
def _set_leaf(keyfn, cx, s, nd, i, st, pd):  # pragma: no cover - compiled
    """Class slot ``s``'s leaf of node ``nd`` (task ``i`` is of that class)."""
    tree, gl = cx[_TREE], cx[_GL]
    x = tree.shape[1] // 2 + cx[_SLOT_OF][nd]
    if fits(i, nd, st):
        v1, v2, g = keyfn(i, nd, st, pd)
        if gl.shape[0] > 1 or gl.shape[1] > 1:
            gl[s, nd] = g
        if tree[s, x, _K1] == v1 and tree[s, x, _K2] == v2 and tree[s, x, _CT] == 1.0:
            return 0  # unchanged (random's leaves change only when the fit does)
        tree[s, x, _K1], tree[s, x, _K2], tree[s, x, _ND], tree[s, x, _CT] = v1, v2, nd, 1.0
    else:
        if tree[s, x, _CT] == 0.0 and tree[s, x, _ND] == _EMPTY:
            return 0
        tree[s, x, _K1], tree[s, x, _K2], tree[s, x, _ND], tree[s, x, _CT] = np.inf, np.inf, _EMPTY, 0.0
    return x


@njit(cache=True, inline="always")
def _sync(leaf, inner, update, keyfn, cx, s, i, st, pd):  # pragma: no cover - compiled
    """Bring class slot ``s``'s tree up to date with the node changes logged since its last query:
    ``update`` the leaf of each logged node (once), or rebuild the whole tree (``leaf`` for every
    leaf slot, then ``inner`` for every inner entry, bottom up) when it was never built or more
    nodes changed than it has.  (Inlined, and so are the functions it is given: numba caches no
    function that passes a looping one as a value.)"""
    ptr, node_at, seen, token = cx[_PTR], cx[_NODE_AT], cx[_SEEN], cx[_TOKEN]
    log, logn = st[10][11], st[10][12]
    tot = logn[0]
    p0 = ptr[s]
    if p0 < 0 or tot - p0 >= min(seen.shape[0], log.shape[0]):
        size = node_at.shape[0]  # leaf slots (the nodes, then -1 up to a power of two)
        for slot in range(size):
            leaf(keyfn, cx, s, slot, node_at[slot], i, st, pd)
        for x in range(size - 1, 0, -1):
            inner(cx, s, x)
    else:
        token[0] += 1
        tk = token[0]
        cap = log.shape[0]
        for e in range(p0, tot):
            nd = log[e % cap]
            if seen[nd] != tk:
                seen[nd] = tk
                update(keyfn, cx, s, nd, i, st, pd)
    ptr[s] = tot


@njit(cache=True, inline="always")
def _leaf_keyed(keyfn, cx, s, slot, nd, i, st, pd):  # pragma: no cover - compiled
    if nd >= 0:
        _set_leaf(keyfn, cx, s, nd, i, st, pd)


@njit(cache=True, inline="always")
def _inner_keyed(cx, s, x):  # pragma: no cover - compiled
    _pull(cx[_TREE], s, x)


@njit(cache=True, inline="always")
def _update_keyed(keyfn, cx, s, nd, i, st, pd):  # pragma: no cover - compiled
    tree = cx[_TREE]
    x = _set_leaf(keyfn, cx, s, nd, i, st, pd) >> 1  # 0: the leaf did not change
    while x >= 1 and _pull(tree, s, x):
        x >>= 1


@njit(cache=True, inline="always")
def _leaf_count(keyfn, cx, s, slot, nd, i, st, pd):  # pragma: no cover - compiled
    cnt = cx[_CNT]
    cnt[s, cnt.shape[1] // 2 + slot] = 1 if nd >= 0 and fits(i, nd, st) else 0


@njit(cache=True, inline="always")
def _sum(cx, s, x):  # pragma: no cover - compiled
    cnt = cx[_CNT]
    cnt[s, x] = cnt[s, 2 * x] + cnt[s, 2 * x + 1]


@njit(cache=True, inline="always")
def _update_counts(keyfn, cx, s, nd, i, st, pd):  # pragma: no cover - compiled
    """A changed leaf adds its difference along its path."""
    cnt = cx[_CNT]
    x = cnt.shape[1] // 2 + cx[_SLOT_OF][nd]
    d = (1 if fits(i, nd, st) else 0) - cnt[s, x]
    if d != 0:
        while x >= 1:
            cnt[s, x] += d
            x >>= 1


@njit(cache=True, inline="always")
def refresh(keyfn, cx, s, i, st, pd):  # pragma: no cover - compiled
    """Class slot ``s``'s keyed tree (leaves keyed by ``keyfn``), up to date."""
    _sync(_leaf_keyed, _inner_keyed, _update_keyed, keyfn, cx, s, i, st, pd)


@njit(cache=True, inline="always")
def refresh_counts(cx, s, i, st):  # pragma: no cover - compiled
    """Random's count tree (``build(counted=True)``: a leaf is 1 where its node fits), up to date."""
    _sync(_leaf_count, _sum, _update_counts, None, cx, s, i, st, None)


@njit(cache=True)
def range_min(cx, s, lo, hi):  # pragma: no cover - compiled
    """The least ``(key1, key2, node)`` over leaf slots ``[lo, hi)`` of class slot ``s``."""
    tree = cx[_TREE]
    size = tree.shape[1] // 2
    b1, b2, bn = np.inf, np.inf, float(_EMPTY)
    lo += size
    hi += size
    while lo < hi:
        if lo & 1:
            if _less(tree[s, lo, _K1], tree[s, lo, _K2], tree[s, lo, _ND], b1, b2, bn):
                b1, b2, bn = tree[s, lo, _K1], tree[s, lo, _K2], tree[s, lo, _ND]
            lo += 1
        if hi & 1:
            hi -= 1
            if _less(tree[s, hi, _K1], tree[s, hi, _K2], tree[s, hi, _ND], b1, b2, bn):
                b1, b2, bn = tree[s, hi, _K1], tree[s, hi, _K2], tree[s, hi, _ND]
        lo >>= 1
        hi >>= 1
    return b1, b2, bn


@njit(cache=True)
def nth(cx, s, r):  # pragma: no cover - compiled
    """The node of the ``r``-th fitting leaf (0-based, in leaf order) of class slot ``s``."""
    cnt, node_at = cx[_CNT], cx[_NODE_AT]
    size = cnt.shape[1] // 2
    x = 1
    while x < size:
        c = cnt[s, 2 * x]
        if r < c:
            x = 2 * x
        else:
            r -= c
            x = 2 * x + 1
    return node_at[x - size]


@njit(cache=True)
def scan_candidates(cx, i, cand, st):  # pragma: no cover - compiled
    """Every node that fits task ``i``, in node order, into ``cand`` (the unindexed classes' way,
    as ``run_loop``'s ALL mode asks ``node_index.search``); returns how many."""
    k, p, cpu = st[0], st[1], st[2]
    tr = st[10]
    n_nodes = cx[_SEEN].shape[0]
    stack = np.empty(NI._MAX_DEPTH, dtype=np.int64)
    return NI.search(tr, n_nodes, cx[_BITS][cx[_DEMAND][i]], k[i], p[i], cpu[i], st[11][i], 0, n_nodes, cand, stack)


# --- the choice kernels with the index ------------------------------------------------------------
# A choice kernel here is a ``kernels`` choice kernel that also answers ``nc == -1``: an arrival
# (``run_loop``'s INDEXED mode) - it writes its node to ``cand[pos]`` and returns ``(pos, gpu)``,
# or ``(-1, -1)`` when no node fits.  With ``nc >= 0`` (a queue pass over released nodes) it is
# the scanning kernel.  A tree's leaf keys are the scan's own key functions (``kernels.key_*``).


@njit(cache=True, inline="always")
def indexed(scan, read, keyfn, cx, i, cand, nc, st, pd):  # pragma: no cover - compiled
    """The choice of ``scan`` (a ``kernels`` choice kernel) for task ``i``: an arrival of an indexed
    class reads its node from the class's tree, ``read(keyfn, cx, slot, i, cand, st, pd)``; an
    arrival of an unindexed class scans its fitting nodes; a queue pass scans ``cand[:nc]``.
    (Inlined, and so are the readers: numba caches no function that passes a looping one as a
    value.)"""
    if nc < 0:
        s = cx[_SLOT][cx[_DEMAND][i]]
        if s >= 0:
            return read(keyfn, cx, s, i, cand, st, pd)
        nc = scan_candidates(cx, i, cand, st)
        if nc == 0:
            return -1, -1
    return scan(i, cand, nc, st, pd)


@njit(cache=True, inline="always")
def _root(keyfn, cx, s, i, cand, st, pd):  # pragma: no cover - compiled
    """The least ``keyfn`` over class slot ``s``'s fitting nodes (the tree's root) and its pinned
    GPU; ``(-1, -1)`` when none fits (an empty leaf loses to every fitting one)."""
    refresh(keyfn, cx, s, i, st, pd)
    tree, gl = cx[_TREE], cx[_GL]
    if tree[s, 1, _ND] == _EMPTY:
        return -1, -1
    nd = np.int64(tree[s, 1, _ND])
    cand[0] = nd
    return 0, (gl[s, nd] if gl.shape[0] > 1 or gl.shape[1] > 1 else -1)


@njit(cache=True)
def choose_best_fit(i, cand, nc, st, pd):  # pragma: no cover - compiled
    """Best fit: the tree keyed by ``kernels.key_left``."""
    return indexed(K._choose_best_fit, _root, K.key_left, pd[1], i, cand, nc, st, pd)


@njit(cache=True)
def _read_random(keyfn, cx, s, i, cand, st, pd):  # pragma: no cover - compiled
    """One draw among the class's fitting nodes in node order (``kernels._choose_random``'s draw)."""
    refresh_counts(cx, s, i, st)
    n = cx[_CNT][s, 1]
    if n == 0:
        return -1, -1
    cand[0] = nth(cx, s, pd[0].integers(0, n))
    return 0, -1


@njit(cache=True)
def choose_random(i, cand, nc, st, pd):  # pragma: no cover - compiled
    return indexed(K._choose_random, _read_random, None, pd[1], i, cand, nc, st, pd)


@njit(cache=True, inline="always")
def _read_table(keyfn, cx, s, i, cand, st, pd):  # pragma: no cover - compiled
    """``kernels.key_table``'s least node: per GPU model the tree (leaves laid out by model, keyed by
    ``keyfn``, ``key_left``) gives the least (left after, node) of its nodes, whose first key is
    ``table[i, model]``."""
    table = pd[0]
    refresh(keyfn, cx, s, i, st, pd)
    if cx[_TREE][s, 1, _ND] == _EMPTY:
        return -1, -1
    mstart = cx[_MSTART]
    b1, b2, bn = np.inf, np.inf, float(_EMPTY)
    for m in range(mstart.shape[0] - 1):
        if mstart[m] == mstart[m + 1]:
            continue
        a1, a2, an = range_min(cx, s, mstart[m], mstart[m + 1])
        if an == _EMPTY:
            continue
        v1 = table[i, m]
        if _less(v1, a1, an, b1, b2, bn):
            b1, b2, bn = v1, a1, an
    cand[0] = np.int64(bn)
    return 0, -1


@njit(cache=True)
def choose_table(i, cand, nc, st, pd):  # pragma: no cover - compiled
    return indexed(K._choose_table, _read_table, K.key_left, pd[1], i, cand, nc, st, pd)


@njit(cache=True)
def choose_fgd(i, cand, nc, st, pd):  # pragma: no cover - compiled
    """FGD: the tree keyed by ``kernels.key_fgd``, with each leaf's pinned GPU."""
    return indexed(K._choose_fgd, _root, K.key_fgd, pd[18], i, cand, nc, st, pd)
