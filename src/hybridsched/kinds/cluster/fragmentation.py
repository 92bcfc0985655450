"""GPU fragmentation as defined by FGD (Weng et al., "Beware of Fragmentation", ATC 2023).

A node's fragmentation for a task type ``m`` (``k`` GPUs of ``p`` milli each, ``c`` milli-CPU,
allowed GPU models) is the idle GPU milli that ``m`` cannot use: all of it if ``m`` cannot run on
the node at all (model not allowed, too little free CPU, fewer than ``k`` GPUs with ``p`` free),
else the idle milli of the GPUs with less than ``p`` free (a CPU-only type that fits strands
nothing).  The expected fragmentation weights the types by their counts in a workload.
Memory is not part of the measure (as in the paper's simulator).

Two task mixes use the same kernels:

* the time-driven runs' mix (:func:`task_mix`, :func:`gpu_task_mix`): every distinct ``(k, p)``
  of the GPU tasks, no CPU requirement, any model;
* the paper's *typical pods* (:func:`typical_pods`): the most frequent (CPU, GPU milli, GPU
  count, GPU model) shapes of a pod list until they cover a share (95 %) of its pods, CPU-only
  shapes included.

Weights are whole counts, so equal expectations compare equal exactly (ties are real ties);
divide by :attr:`TaskMix.total` for the expectation per pod.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from hybridsched.kinds.cluster.trace import GPU_SPEC_SEP, MILLI

_WHOLE = float(MILLI)  # a GPU-sharing pod asks for less than this on one GPU


@dataclass(frozen=True)
class TaskMix:
    """Task types ``(k, p, cpu, allowed models)`` with their counts in ``total`` pods."""

    k: np.ndarray  # (T,) int64, GPUs needed (0 = CPU-only type)
    p: np.ndarray  # (T,) float64, milli on each of them
    cpu: np.ndarray  # (T,) float64, milli-CPU (0 = not part of the measure)
    allowed: np.ndarray  # (T, n_models) bool: the type may run on GPU model j
    count: np.ndarray  # (T,) float64, whole counts
    total: float  # pods the counts are out of (the expectation per pod divides by it)

    def __len__(self) -> int:
        return len(self.k)


def task_mix(num_gpu: np.ndarray, gpu_milli: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct GPU demands ``(k, p)`` of the GPU tasks and their popularity (shares sum to 1)."""
    num_gpu, gpu_milli = np.asarray(num_gpu), np.asarray(gpu_milli)
    gpu = num_gpu > 0
    if not gpu.any():
        return np.zeros((0, 2)), np.zeros(0)
    pairs = np.column_stack([num_gpu[gpu], gpu_milli[gpu]]).astype(np.float64)
    types, counts = np.unique(pairs, axis=0, return_counts=True)
    return types, counts / counts.sum()


def gpu_task_mix(num_gpu: np.ndarray, gpu_milli: np.ndarray, n_models: int) -> TaskMix:
    """:func:`task_mix` as a :class:`TaskMix`: no CPU requirement, every model allowed."""
    num_gpu, gpu_milli = np.asarray(num_gpu), np.asarray(gpu_milli)
    gpu = num_gpu > 0
    pairs = np.column_stack([num_gpu[gpu], gpu_milli[gpu]]).astype(np.float64).reshape(-1, 2)
    types, counts = np.unique(pairs, axis=0, return_counts=True)
    t = len(types)
    return TaskMix(types[:, 0].astype(np.int64), types[:, 1].copy(), np.zeros(t), np.ones((t, n_models), bool),
                   counts.astype(np.float64), float(counts.sum()))


def typical_pods(cpu: np.ndarray, num_gpu: np.ndarray, gpu_milli: np.ndarray, gpu_spec: np.ndarray,
                 models: tuple[str, ...], coverage: float = 0.95) -> TaskMix:
    """The paper's typical pods: (CPU, GPU milli, GPU count, gpu_spec) shapes by decreasing
    count (ties: smaller shape first) until they cover ``coverage`` of the pods; counts out of
    all pods.  ``models`` are the cluster's GPU models (the columns of ``allowed``)."""
    n = len(cpu)
    if n == 0:
        raise ValueError("typical_pods: no pods")
    spec = np.asarray(gpu_spec, dtype=object).astype(str)
    keys = np.column_stack([np.asarray(cpu, np.float64), np.asarray(gpu_milli, np.float64),
                            np.asarray(num_gpu, np.float64)])
    spec_codes, spec_idx = np.unique(spec, return_inverse=True)
    rows, counts = np.unique(np.column_stack([keys, spec_idx]), axis=0, return_counts=True)
    order = np.lexsort((*rows.T[::-1], -counts))  # count desc, then the shape ascending
    rows, counts = rows[order], counts[order]
    covered = np.cumsum(counts) / n
    keep = int(np.searchsorted(covered, coverage - 1e-12)) + 1  # first prefix reaching the coverage
    rows, counts = rows[:keep], counts[:keep]
    allowed = np.ones((keep, len(models)), dtype=bool)
    for r, s in enumerate(spec_codes[rows[:, 3].astype(np.int64)]):
        if s:
            want = set(s.split(GPU_SPEC_SEP))
            allowed[r] = [m in want for m in models]
    return TaskMix(rows[:, 2].astype(np.int64), rows[:, 1].copy(), rows[:, 0].copy(), allowed,
                   counts.astype(np.float64), float(n))


def node_fragmentation(free: np.ndarray, types: np.ndarray, popularity: np.ndarray) -> np.ndarray:
    """Expected fragmented GPU milli of each row of ``free`` (nodes x GPU slots, -1 = no GPU)
    for the task mix ``types`` (k, p) with ``popularity`` (GPU-only view: no CPU, any model)."""
    fr = np.clip(free, 0, None)
    ge = free[:, None, :] >= types[None, :, 1, None]  # (C, M, G): GPU can hold type m's share
    usable = ge.sum(axis=2) >= types[None, :, 0]  # (C, M): type m fits the node at all
    stranded = (fr[:, None, :] * ~ge).sum(axis=2)
    frag = np.where(usable, stranded, fr.sum(axis=1)[:, None])
    return frag @ popularity


# --- compiled kernels shared by the time-driven runs and the paper's protocol -----------------
# Per node and type: ``cnt`` GPUs that hold the type's share, ``lt`` idle milli on the others;
# from them and the idle total, the node's fragmentation for the type (``_type_frag``).


@njit(cache=True)
def _type_frag(t, cnt, lt, total, cpu_free, model, tk, tcpu, tallow):  # pragma: no cover - compiled
    """Fragmented milli of a node for type ``t``: all idle milli if the type cannot run there,
    else the idle milli of the GPUs too small for its share (none for a CPU-only type)."""
    if not tallow[t, model] or cpu_free < tcpu[t] or (tk[t] > 0 and cnt < tk[t]):
        return total
    return lt if tk[t] > 0 else 0.0


@njit(cache=True)
def _moved(cnt, lt, f_old, f_new, share):  # pragma: no cover - compiled
    """Per-type counts after one GPU goes from ``f_old`` to ``f_new`` free milli (both >= 0)."""
    if f_old >= share:
        cnt -= 1
    elif f_old > 0:
        lt -= f_old
    if f_new >= share:
        cnt += 1
    elif f_new > 0:
        lt += f_new
    return cnt, lt


@njit(cache=True)
def _node_stat_one(n, free, cpu_free, model, tk, tp, tcpu, tallow, tw, cnt, lt, frag):  # pragma: no cover
    """Fill ``cnt[n]``, ``lt[n]`` (per type) and ``frag[n]`` (weighted) for node ``n``."""
    total = 0.0
    for g in range(free.shape[1]):
        if free[n, g] > 0:
            total += free[n, g]
    s = 0.0
    for t in range(tk.shape[0]):
        c = 0
        lv = 0.0
        for g in range(free.shape[1]):
            f = free[n, g]
            if f >= tp[t]:
                c += 1
            elif f > 0:
                lv += f
        cnt[n, t] = c
        lt[n, t] = lv
        s += tw[t] * _type_frag(t, c, lv, total, cpu_free[n], model[n], tk, tcpu, tallow)
    frag[n] = s


@njit(cache=True)
def _node_stats(rows, free, cpu_free, model, tk, tp, tcpu, tallow, tw, cnt, lt, frag):  # pragma: no cover
    """:func:`_node_stat_one` for every node in ``rows``."""
    for n in rows:
        _node_stat_one(n, free, cpu_free, model, tk, tp, tcpu, tallow, tw, cnt, lt, frag)


@njit(cache=True)
def _fgd_one(n, free, cpu_free, model, cnt, lt, frag, pod_cpu, k, p, tk, tp, tcpu, tallow, tw,
             cnt2, lt2, taken):  # pragma: no cover - compiled
    """FGD's score of node ``n`` (whose stats are current): the least increase of weighted
    fragmentation over the ways to place the pod, and for a GPU-sharing pod the GPU that gives
    it (lowest index on ties; GPUs with equal free milli are the same choice), -1 otherwise
    (the tightest GPUs: for whole GPUs the idle ones, all alike).  A candidate GPU changes the
    per-type counts in O(types) instead of a fresh O(GPUs x types) pass.  ``cnt2``, ``lt2``
    (types) and ``taken`` (GPU slots) are scratch."""
    n_t = tk.shape[0]
    g_slots = free.shape[1]
    m = model[n]
    best_gpu = -1
    total = 0.0
    for g in range(g_slots):
        if free[n, g] > 0:
            total += free[n, g]
    cpu_after = cpu_free[n] - pod_cpu
    if k == 1 and p < _WHOLE:
        best = np.inf
        for g in range(g_slots):
            f = free[n, g]
            if f < p:
                continue
            seen = False
            for h in range(g):
                if free[n, h] == f:
                    seen = True
                    break
            if seen:
                continue
            after = 0.0
            for t in range(n_t):
                c, lv = _moved(cnt[n, t], lt[n, t], f, f - p, tp[t])
                after += tw[t] * _type_frag(t, c, lv, total - p, cpu_after, m, tk, tcpu, tallow)
            if after < best:
                best = after
                best_gpu = g
        return best - frag[n], best_gpu
    for t in range(n_t):
        cnt2[t] = cnt[n, t]
        lt2[t] = lt[n, t]
    taken[:] = False
    for _ in range(k):
        pick = -1
        for g in range(g_slots):
            if not taken[g] and free[n, g] >= p and (pick < 0 or free[n, g] < free[n, pick]):
                pick = g
        taken[pick] = True
        for t in range(n_t):
            cnt2[t], lt2[t] = _moved(cnt2[t], lt2[t], free[n, pick], free[n, pick] - p, tp[t])
    after = 0.0
    for t in range(n_t):
        after += tw[t] * _type_frag(t, cnt2[t], lt2[t], total - k * p, cpu_after, m, tk, tcpu, tallow)
    return after - frag[n], best_gpu


@njit(cache=True)
def _fgd_from_stats(rows, free, cpu_free, model, cnt, lt, frag, pod_cpu, k, p,
                    tk, tp, tcpu, tallow, tw):  # pragma: no cover - compiled
    """:func:`_fgd_one` for every node of ``rows``: (score increase, GPU or -1) arrays."""
    delta = np.empty(rows.shape[0])
    best_gpu = np.full(rows.shape[0], -1, dtype=np.int64)
    cnt2 = np.empty(tk.shape[0], dtype=np.int64)
    lt2 = np.empty(tk.shape[0])
    taken = np.zeros(free.shape[1], dtype=np.bool_)
    for j in range(rows.shape[0]):
        delta[j], best_gpu[j] = _fgd_one(rows[j], free, cpu_free, model, cnt, lt, frag, pod_cpu, k, p,
                                         tk, tp, tcpu, tallow, tw, cnt2, lt2, taken)
    return delta, best_gpu


def _mix_args(mix: TaskMix) -> tuple:
    return (mix.k.astype(np.int64), mix.p.astype(np.float64), mix.cpu.astype(np.float64),
            np.ascontiguousarray(mix.allowed), mix.count.astype(np.float64))


class FragCache:
    """Per-node fragmentation statistics for one mix, refreshed only for nodes whose state
    changed (``ClusterState.version``), and FGD's scores per pod shape (CPU, GPUs, milli),
    kept per node until that node changes: between two placements one node changes, so a
    repeated shape costs O(changed nodes) instead of O(feasible nodes x types)."""

    MAX_SHAPES = 256  # memoised pod shapes (a cap on memory: N floats per shape)

    def __init__(self, mix: TaskMix, n_nodes: int) -> None:
        self.mix = mix
        self.args = _mix_args(mix)
        self.cnt = np.zeros((n_nodes, len(mix)), dtype=np.int64)
        self.lt = np.zeros((n_nodes, len(mix)))
        self.frag = np.zeros(n_nodes)
        self.version = np.full(n_nodes, -1, dtype=np.int64)
        self._memo: dict[tuple[float, int, float], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def refresh(self, nodes: np.ndarray, free: np.ndarray, cpu_free: np.ndarray, model: np.ndarray,
                version: np.ndarray) -> None:
        """Bring the statistics of ``nodes`` up to date with the state arrays."""
        stale = nodes[self.version[nodes] != version[nodes]]
        if len(stale):
            _node_stats(stale, free, cpu_free, model, *self.args, self.cnt, self.lt, self.frag)
            self.version[stale] = version[stale]

    def fgd(self, nodes: np.ndarray, free: np.ndarray, cpu_free: np.ndarray, model: np.ndarray,
            version: np.ndarray, pod_cpu: float, k: int, p: float) -> tuple[np.ndarray, np.ndarray]:
        """:func:`fgd_scores` of ``nodes`` (rows of the state arrays, whose versions are ``version``)."""
        key = (float(pod_cpu), int(k), float(p))
        memo = self._memo.get(key)
        if memo is None:
            if len(self._memo) >= self.MAX_SHAPES:
                self._memo.clear()
            n = len(self.frag)
            memo = self._memo[key] = (np.zeros(n), np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64))
        delta, gpu, seen = memo
        stale = nodes[seen[nodes] != version[nodes]]
        if len(stale):
            self.refresh(stale, free, cpu_free, model, version)
            delta[stale], gpu[stale] = _fgd_from_stats(stale, free, cpu_free, model, self.cnt, self.lt, self.frag,
                                                       key[0], key[1], key[2], *self.args)
            seen[stale] = version[stale]
        return delta[nodes], gpu[nodes]


def _stats(free: np.ndarray, cpu_free: np.ndarray, model: np.ndarray, mix: TaskMix) -> tuple:
    free = np.ascontiguousarray(free, dtype=np.float64)
    cpu_free, model = np.asarray(cpu_free, np.float64), np.asarray(model, np.int64)
    cache = FragCache(mix, len(free))
    rows = np.arange(len(free))
    cache.refresh(rows, free, cpu_free, model, np.zeros(len(free), dtype=np.int64))
    return cache, rows, free, cpu_free, model


def mix_fragmentation(free: np.ndarray, cpu_free: np.ndarray, model: np.ndarray, mix: TaskMix) -> np.ndarray:
    """Count-weighted fragmented GPU milli of each node (rows of ``free``, -1 = no GPU slot)
    with free CPU ``cpu_free`` and GPU model index ``model``; divide by ``mix.total`` for the
    expectation per pod."""
    return _stats(free, cpu_free, model, mix)[0].frag


def fgd_scores(free: np.ndarray, cpu_free: np.ndarray, model: np.ndarray, pod_cpu: float, k: int, p: float,
               mix: TaskMix) -> tuple[np.ndarray, np.ndarray]:
    """FGD's node scores: per node, the least increase of count-weighted fragmentation when
    the pod (``pod_cpu`` milli-CPU, ``k`` GPUs of ``p`` milli) is placed there, and for a
    GPU-sharing pod the GPU that gives it (-1 otherwise).  Every node must fit the pod."""
    cache, rows, free, cpu_free, model = _stats(free, cpu_free, model, mix)
    return cache.fgd(rows, free, cpu_free, model, np.zeros(len(rows), dtype=np.int64), pod_cpu, k, p)
