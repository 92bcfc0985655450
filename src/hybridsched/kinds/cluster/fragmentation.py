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


@njit(cache=True)
def _frag_one(free, cpu_free, model, tk, tp, tcpu, tallow, tw):  # pragma: no cover - compiled
    """Weighted fragmented milli of one node (``free``: its GPU slots, -1 = none)."""
    total = 0.0
    for g in range(free.shape[0]):
        if free[g] > 0:
            total += free[g]
    s = 0.0
    for t in range(tk.shape[0]):
        if not tallow[t, model] or cpu_free < tcpu[t]:
            s += tw[t] * total
            continue
        if tk[t] == 0:
            continue  # a CPU-only type that fits strands no GPU
        cnt = 0
        lt = 0.0
        for g in range(free.shape[0]):
            f = free[g]
            if f >= tp[t]:
                cnt += 1
            elif f > 0:
                lt += f
        s += tw[t] * (lt if cnt >= tk[t] else total)
    return s


@njit(cache=True)
def _frag_nodes(free, cpu_free, model, tk, tp, tcpu, tallow, tw):  # pragma: no cover - compiled
    out = np.empty(free.shape[0])
    for c in range(free.shape[0]):
        out[c] = _frag_one(free[c], cpu_free[c], model[c], tk, tp, tcpu, tallow, tw)
    return out


@njit(cache=True)
def _fgd_scores(free, cpu_free, model, pod_cpu, k, p, tk, tp, tcpu, tallow, tw):  # pragma: no cover
    """Per node (rows of ``free``): the least increase of weighted fragmentation over the ways
    to place the pod, and for a GPU-sharing pod the GPU that achieves it (lowest index on ties;
    GPUs with equal free milli are the same choice); -1 for other pods (tightest GPUs)."""
    n, g_slots = free.shape
    delta = np.empty(n)
    best_gpu = np.full(n, -1, dtype=np.int64)
    row = np.empty(g_slots)
    taken = np.zeros(g_slots, dtype=np.bool_)
    for c in range(n):
        before = _frag_one(free[c], cpu_free[c], model[c], tk, tp, tcpu, tallow, tw)
        cpu_after = cpu_free[c] - pod_cpu
        for g in range(g_slots):
            row[g] = free[c, g]
        if k == 1 and p < _WHOLE:
            best = np.inf
            for g in range(g_slots):
                f = free[c, g]
                if f < p:
                    continue
                seen = False
                for h in range(g):
                    if free[c, h] == f:
                        seen = True
                        break
                if seen:
                    continue
                row[g] = f - p
                after = _frag_one(row, cpu_after, model[c], tk, tp, tcpu, tallow, tw)
                row[g] = f
                if after < best:
                    best = after
                    best_gpu[c] = g
            delta[c] = best - before
        else:
            # the k GPUs that fit tightest (for whole GPUs: the idle ones, all alike)
            taken[:] = False
            for _ in range(k):
                pick = -1
                for g in range(g_slots):
                    if not taken[g] and free[c, g] >= p and (pick < 0 or free[c, g] < free[c, pick]):
                        pick = g
                taken[pick] = True
                row[pick] -= p
            delta[c] = _frag_one(row, cpu_after, model[c], tk, tp, tcpu, tallow, tw) - before
    return delta, best_gpu


def _mix_args(mix: TaskMix) -> tuple:
    return (mix.k.astype(np.int64), mix.p.astype(np.float64), mix.cpu.astype(np.float64),
            np.ascontiguousarray(mix.allowed), mix.count.astype(np.float64))


def mix_fragmentation(free: np.ndarray, cpu_free: np.ndarray, model: np.ndarray, mix: TaskMix) -> np.ndarray:
    """Count-weighted fragmented GPU milli of each node (rows of ``free``, -1 = no GPU slot)
    with free CPU ``cpu_free`` and GPU model index ``model``; divide by ``mix.total`` for the
    expectation per pod."""
    return _frag_nodes(np.ascontiguousarray(free, dtype=np.float64), np.asarray(cpu_free, np.float64),
                       np.asarray(model, np.int64), *_mix_args(mix))


def fgd_scores(free: np.ndarray, cpu_free: np.ndarray, model: np.ndarray, pod_cpu: float, k: int, p: float,
               mix: TaskMix) -> tuple[np.ndarray, np.ndarray]:
    """FGD's node scores: per node, the least increase of count-weighted fragmentation when
    the pod (``pod_cpu`` milli-CPU, ``k`` GPUs of ``p`` milli) is placed there, and for a
    GPU-sharing pod the GPU that gives it (-1 otherwise).  Every node must fit the pod."""
    return _fgd_scores(np.ascontiguousarray(free, dtype=np.float64), np.asarray(cpu_free, np.float64),
                       np.asarray(model, np.int64), float(pod_cpu), int(k), float(p), *_mix_args(mix))
