"""The FGD paper's experiment under the rules of its own simulator (``fgd.rules: k8s_simulator``).

The ATC'23 paper's numbers come from ``hkust-adsl/kubernetes-scheduler-simulator`` (Go,
Apache-2.0): a Kubernetes scheduler framework with one score plugin per policy.  This module
re-implements, in our own code, the rules that decide its placements.  It copies no code; each
rule below names the Go file and function it follows (paths in that repository).

Rules (``R1`` ... ``R13``; the tests in ``tests/cluster/test_fgd_k8s_rules.py`` check each on a
hand-made cluster of one to four nodes; the cluster itself is the node list's GPU nodes, see
:func:`gpu_nodes`):

R1  Node choice and ties -- ``vendor/k8s.io/kubernetes/pkg/scheduler/core/generic_scheduler.go``,
    ``selectHost``: the highest total score wins; among equal scores the lexicographically
    smallest node name.  ``pkg/simulator/simulator.go``, ``syncClusterResourceList``: nodes are
    sorted by name, then node ``i`` is renamed ``"%04d-" % perm[i] + name`` with ``perm =
    rand.Perm(n)`` drawn once per seed.  So a tie goes to the first node of a per-seed random
    order (:func:`tie_order`), for every pod and every policy alike.
R2  Feasibility -- ``pkg/simulator/plugin/open_gpu_share.go``, ``Filter`` (GPU model, enough GPUs
    with the pod's share free) and Kubernetes' default resource fit (CPU, memory, at most 110
    pods per node).  CPU-only pods pass the GPU filter on every node.
R3  Scores are ``int64`` in [0, 100], higher is better, truncated toward zero
    (``framework.MaxNodeScore``; each plugin's ``Score`` ends in ``int64(...)``).
R4  Random -- ``plugin/random_score.go``, ``PreScore``: one feasible node drawn uniformly gets
    100, every other 0.  GPUs (``generate_run_scripts.py``: ``-gpusel random``):
    ``open_gpu_share.go``, ``allocateGpuIdBasedOnRandomFit`` -- a sharing pod takes a uniformly
    drawn GPU with its share free; whole-GPU pods take the lowest-index idle GPUs.
R5  DotProd (``-dimext merge -norm max -gpusel best``) -- ``plugin/dot_product_score.go``,
    ``calculateDotProductScore`` with ``pkg/utils/utils.go``, ``GenerateSchedulingMatchGroups``
    and ``pkg/type/resource.go``, ``ToVirtualNodeResourceList`` (``MergeGpuDim``): free
    ``[CPU milli, total GPU milli]`` and request ``[CPU milli, GPUs x milli]``, each divided by
    ``[128000, 8000]`` (``MaxSpecCpu``, ``MaxSpecGpu``); score ``int(100 * (1 - dot / 2))``.
R6  BestFit -- ``plugin/best_fit_score.go``, ``getBestFitScore``:
    ``int(100 * (1 - 0.5 (cpu_free - cpu) / 128000 - 0.5 (gpu_free - gpu) / 8000))`` over the
    node's total free GPU milli, then ``plugin/plugin_utils.go``, ``NormalizeScore``: integer
    min-max over the feasible nodes, ``(s - lo) * 100 / (hi - lo)`` (all 0 when hi = lo).
R7  GpuPacking -- ``plugin/gpu_packing_score.go``, ``getPackingScore``; CPU is ignored:
    a CPU-only pod scores 0 everywhere (``GetGpuMilliFromPodAnnotation <= 0``); a node whose GPUs
    are all fully free scores ``max(33 - n_gpu, n_gpu)``; otherwise the pod's GPUs are the
    fitting ones in increasing free milli: if any of them is fully free,
    ``max(50 - that count, 33)``; else ``max(100 - sum(free * 100 / 1000) / 10, 50)`` (integer
    divisions: 10 % buckets of the used GPU's free share).
R8  GpuClustering -- ``plugin/gpu_clustering_score.go``, ``Score``, classes from
    ``pkg/type/open-gpu-share/utils/pod.go``, ``GetGpuAffinityFromPodAnnotation`` (share-gpu,
    ``k``-gpu; CPU-only pods have none and score 0) and the node's class counts from
    ``pkg/utils/utils.go``, ``GetNodeResourceViaNodeInfo``: with ``a = 25 * (8000 - free GPU
    milli) / 8000`` (integers), the node holds only the pod's class: ``a + 75``; the pod's class
    among others: ``a + 50``; no GPU pod (idle): ``a + 25``; only other classes: ``a``.
R9  FGD -- ``plugin/fgd_score.go``, ``calculateGpuShareFragExtendScore``: the score is
    ``int(100 * sigmoid((F_before - F_after) / 1000))`` with ``F`` the node's fragmentation (R10);
    a sharing pod tries every GPU with its share free (fully free ones too) and the node's score
    is the best of them, the first such GPU in index order taking the pod
    (``allocateGpuIdBasedOnFGDScore``); other pods: ``NodeResource.Sub`` (lowest-index idle GPUs).
R10 Fragmentation of a node -- ``pkg/utils/frag.go``, ``NodeGpuShareFragAmountScore``,
    ``GetNodePodFrag``: sum over typical pods of weight x (the GPU milli it cannot use): a
    CPU-only typical pod counts all idle GPU milli of the node whether it fits or not (its
    classes ``xl_satisfied`` / ``xr_lack_cpu`` are both fragment); a GPU typical pod that the
    node can hold (model, CPU, enough GPUs with its share) counts the free milli of the GPUs
    with less than its share; one it cannot hold counts all free milli.
R11 Typical pods -- ``frag.go``, ``GetTypicalPods`` (``isInvolvedCpuPods: true``,
    ``podPopularityThreshold: 95``, ``podIncreaseStep: 1``, ``gpuResWeight: 0`` from
    ``scripts/generate_config_and_run.py``): shapes (CPU, GPU milli, GPU count, model) of the
    original pod list by decreasing count, equal counts larger shape first
    (``SortTargetPodInDecreasingCount``, ``PodResource.Less`` reversed), added one at a time
    while the covered count is below 95 %; weights renormalised to sum 1 over the kept shapes.
R12 Inflation -- ``pkg/simulator/utils.go``, ``SortClusterPods`` (shuffle) then
    ``tuneUpPods``: copies drawn uniformly from the original list are appended; the loop stops
    before the first draw with ``total + its per-GPU milli > 1.3 x capacity`` (the Go code
    compares the per-GPU milli, and adds the pod's total).
R13 Reporting -- ``experiments/analysis/merge_alloc_discrete.py``: after every pod, x = arrived
    GPU milli / capacity rounded to the nearest integer (Python ``round``: half to even), the
    allocation share rounded to 0.01 %, averaged per x; an empty x takes the mean over x +- 1.
    (See ``report.bucket_means_rounded``.)

GPU choice (``open_gpu_share.go``, ``allocateGpuIdBasedOnBestFit``; GpuPacking, GpuClustering,
BestFit, DotProd): a sharing pod takes the fitting GPU with the least free milli (the first on
ties), whole-GPU pods the lowest-index idle GPUs.

``ours`` (the sensitivity study, docs/fgd-atc23.md) switches single rules back to our exact
protocol (``protocol.py`` and the classes of ``policies.py``) while the rest stay as above:

* ``tie_order``: ties drawn uniformly per pod instead of R1's fixed order;
* ``integer_scores``: every score kept as a float (no truncation, no integer division, no
  integer min-max) instead of R3, R5-R9;
* ``cpu_pods``: CPU-only pods in GpuPacking / GpuClustering ranked as our classes do (packing:
  partly used GPU nodes first, the least free GPU milli first, idle nodes last; clustering:
  CPU-only is a class of its own) instead of scoring 0 everywhere;
* ``idle_node``: GpuClustering's idle nodes share the lowest band with the other-class nodes
  (ours: same class first, then everything else by allocated share) instead of R8's own band;
* ``typical_weights``: typical-pod weights count / all pods (not renormalised; equal counts
  smaller shape first) instead of R11's;
* ``cpu_typical``: a CPU-only typical pod that fits strands nothing (our measure) instead of R10.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np
from numba import njit

from hybridsched.errors import HybridschedError
from hybridsched.kinds.cluster.fgd_protocol.protocol import Curve
from hybridsched.kinds.cluster.trace import MILLI, NodeTable, PodTable

# the Go simulator's plugin names (scripts/generate_config_and_run.py) -> our kernel's policy ids
PLUGINS = {"RandomScore": 0, "DotProductScore": 1, "GpuClusteringScore": 2, "GpuPackingScore": 3,
           "BestFitScore": 4, "FGDScore": 5}
RANDOM, DOTPROD, CLUSTERING, PACKING, BESTFIT, FGD = range(6)
OURS = ("tie_order", "integer_scores", "cpu_pods", "idle_node", "typical_weights", "cpu_typical")
MAX_SPEC_CPU = 128_000  # pkg/type/open-gpu-share/utils/const.go
MAX_SPEC_GPU = 8_000
MAX_PODS_PER_NODE = 110  # Kubernetes' default node allocatable pods
N_CLASSES = 66  # 0: CPU-only, 1: share-gpu, 1 + k: k-gpu (k <= 64)


@dataclass
class Typical:
    """Typical pods (R11): per shape its CPU, per-GPU milli, GPU count, allowed-model bit mask and
    weight."""

    cpu: np.ndarray  # int64
    milli: np.ndarray  # int64
    k: np.ndarray  # int64
    mask: np.ndarray  # int64, bit m = model m allowed
    weight: np.ndarray  # float64
    covered: float  # share of the pods the kept shapes cover


def _model_masks(spec: np.ndarray, models: tuple[str, ...]) -> np.ndarray:
    """Bit mask of the node models a ``gpu_spec`` allows ("" or an unknown-only list: any model;
    ``utils.go``, ``IsNodeAccessibleToPodByType``)."""
    every = (1 << len(models)) - 1
    out = np.empty(len(spec), dtype=np.int64)
    cache: dict[str, int] = {}
    for i, s in enumerate(spec):
        s = str(s)
        if s not in cache:
            names = [t for t in s.split("|") if t]
            cache[s] = every if not names else sum(1 << j for j, m in enumerate(models) if m in names)
        out[i] = cache[s]
    return out


def typical_pods(pods: PodTable, models: tuple[str, ...], coverage: float = 0.95,
                 ours_weights: bool = False) -> Typical:
    """R11 (or with ``ours_weights`` our weighting: count / all pods, equal counts smaller shape
    first)."""
    keys: dict[tuple, int] = {}
    for c, m, k, s in zip(pods.cpu_milli.astype(np.int64), pods.gpu_milli.astype(np.int64),
                          pods.num_gpu.astype(np.int64), pods.gpu_spec, strict=True):
        key = (int(c), int(m), int(k), str(s))
        keys[key] = keys.get(key, 0) + 1
    total = float(len(pods))
    # decreasing count; equal counts: PodResource.Less reversed (larger cpu, milli, count, type first)
    order = sorted(keys.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    if ours_weights:
        order = sorted(keys.items(), key=lambda kv: (-kv[1], kv[0]))
    expected = float(round(coverage * 100)) * total / 100.0  # an integer percent in Go
    kept, cum = [], 0.0
    for key, cnt in order:
        if cum >= expected:
            break
        kept.append((key, cnt))
        cum += cnt
    cnt = np.array([c for _, c in kept], dtype=float)
    # Go: count / total, then divided by cum / total after the cut (kept in that order: same bits)
    weight = cnt / total if ours_weights else (cnt / total) / (cum / total)
    shapes = [k for k, _ in kept]
    return Typical(cpu=np.array([s[0] for s in shapes], np.int64), milli=np.array([s[1] for s in shapes], np.int64),
                   k=np.array([s[2] for s in shapes], np.int64),
                   mask=_model_masks(np.array([s[3] for s in shapes], dtype=object), models),
                   weight=weight, covered=cum / total)


def arrival_order(pods: PodTable, capacity_milli: float, inflation: float, rng: np.random.Generator) -> np.ndarray:
    """R12: a shuffle of every pod, then uniformly drawn copies while ``total + per-GPU milli`` of
    the draw stays within ``inflation * capacity_milli`` (the first draw past it stops the loop
    and is not added)."""
    milli = pods.gpu_milli.astype(np.int64)
    demand = pods.num_gpu.astype(np.int64) * milli
    order = rng.permutation(len(pods))
    target = inflation * capacity_milli
    total = int(demand.sum())
    copies: list[np.ndarray] = []
    while True:
        draw = rng.integers(len(pods), size=256)
        before = total + np.concatenate([[0], np.cumsum(demand[draw])[:-1]])  # total before each draw
        over = np.flatnonzero(before + milli[draw] > target)
        if len(over):
            copies.append(draw[: over[0]])
            break
        copies.append(draw)
        total = int(before[-1] + demand[draw[-1]])
    return np.concatenate([order, *copies])


def tie_order(names: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """R1: the rank of each node among ties (lower wins): node names sorted, the i-th sorted node
    prefixed with ``perm[i]``, the smallest prefix first."""
    by_name = np.argsort(names.astype(str), kind="stable")
    rank = np.empty(len(names), dtype=np.int64)
    rank[by_name] = rng.permutation(len(names))
    return rank


def _sigmoid100(x: float) -> float:
    """``sigmoid(x) * 100`` in the Go code's order of operations (``plugin_utils.go`` ``sigmoid``)."""
    return (1.0 / (1.0 + math.exp(-x))) * 100.0


_sigmoid100_nb = njit(cache=True)(_sigmoid100)


@njit(cache=True)
def _frag_t(t, cpu_left, total, ge, lt, node_bit, t_cpu, t_milli, t_k, t_mask, cpu_typ_ours):
    """R10 for typical pod ``t`` on a node in the given state."""
    if t_milli[t] == 0:
        if cpu_typ_ours and cpu_left >= t_cpu[t]:
            return 0.0
        return float(total)
    if (t_mask[t] & node_bit) == 0:
        return float(total)
    if ge >= t_k[t] and cpu_left >= t_cpu[t]:
        return float(lt)
    return float(total)


@njit(cache=True)
def _refresh(n, cpu_left, gpu_left, n_gpu, node_bit, GE, LT, frag, t_cpu, t_milli, t_k, t_mask, t_w, cpu_typ_ours):
    """Per typical pod the count of GPUs with its share free and the free milli of the others,
    and the node's fragmentation (R10)."""
    total = 0
    for g in range(n_gpu[n]):
        total += gpu_left[n, g]
    f = 0.0
    for t in range(len(t_w)):
        ge = 0
        lt = 0
        for g in range(n_gpu[n]):
            if gpu_left[n, g] >= t_milli[t]:
                ge += 1
            else:
                lt += gpu_left[n, g]
        GE[n, t] = ge
        LT[n, t] = lt
        f += t_w[t] * _frag_t(t, cpu_left[n], total, ge, lt, node_bit[n], t_cpu, t_milli, t_k, t_mask, cpu_typ_ours)
    frag[n] = f


@njit(cache=True)
def _frag_after(n, k, left, m, c, cpu_left, total, node_bit, GE, LT, t_cpu, t_milli, t_k, t_mask, t_w, cpu_typ_ours):
    """Fragmentation of node ``n`` after ``k`` of its GPUs with ``left`` free milli each give
    ``m`` milli and its CPU gives ``c`` (incremental on the cached counts)."""
    cpu2 = cpu_left[n] - c
    total2 = total - k * m
    f = 0.0
    for t in range(len(t_w)):
        mt = t_milli[t]
        ge = GE[n, t]
        lt = LT[n, t]
        if k > 0:
            if left >= mt:
                ge -= k
            else:
                lt -= k * left
            if left - m >= mt:
                ge += k
            else:
                lt += k * (left - m)
        f += t_w[t] * _frag_t(t, cpu2, total2, ge, lt, node_bit[n], t_cpu, t_milli, t_k, t_mask, cpu_typ_ours)
    return f


@njit(cache=True)
def _fgd_node(n, c, k, m, cpu_left, gpu_left, n_gpu, node_bit, GE, LT, frag, t_cpu, t_milli, t_k, t_mask, t_w,
              cpu_typ_ours, float_scores):
    """R9: the node's score and, for a sharing pod, the GPU that takes it."""
    total = 0
    for g in range(n_gpu[n]):
        total += gpu_left[n, g]
    before = frag[n]
    if k == 1 and m < MILLI:
        best = -1.0e300
        best_g = -1
        for g in range(n_gpu[n]):
            L = gpu_left[n, g]
            if L < m:
                continue
            seen = False  # GPUs with the same free milli score alike: keep the first
            for h in range(g):
                if gpu_left[n, h] == L:
                    seen = True
                    break
            if seen:
                continue
            after = _frag_after(n, 1, L, m, c, cpu_left, total, node_bit, GE, LT, t_cpu, t_milli, t_k, t_mask,
                                t_w, cpu_typ_ours)
            if float_scores:
                s = before - after
            else:
                s = float(int(_sigmoid100_nb((before - after) / 1000.0)))
            if best_g < 0 or s > best:
                best = s
                best_g = g
        return best, best_g
    after = _frag_after(n, k, MILLI, m, c, cpu_left, total, node_bit, GE, LT, t_cpu, t_milli, t_k, t_mask, t_w,
                        cpu_typ_ours) if k > 0 else _frag_after(n, 0, 0, 0, c, cpu_left, total, node_bit, GE, LT,
                                                                  t_cpu, t_milli, t_k, t_mask, t_w, cpu_typ_ours)
    if float_scores:
        return before - after, -1
    return float(int(_sigmoid100_nb((before - after) / 1000.0))), -1


@njit(cache=True)
def _packing(n, k, m, gpu_left, n_gpu, cpu_pods_ours, float_scores):
    """R7 (GpuPacking)."""
    ng = n_gpu[n]
    total = 0
    ff = 0
    for g in range(ng):
        total += gpu_left[n, g]
        if gpu_left[n, g] == MILLI:
            ff += 1
    if m <= 0:
        if not cpu_pods_ours:
            return 0.0
        if ng > 0 and ff < ng:  # ours: partly used GPU nodes first, the least free GPU milli first
            return 50.0 + (MAX_SPEC_GPU - total) * 50.0 / MAX_SPEC_GPU if float_scores else \
                float(50 + (MAX_SPEC_GPU - total) * 50 // MAX_SPEC_GPU)
        return float(max(33 - ng, ng))
    if ff == ng:
        return float(max(33 - ff, ff))
    used = np.zeros(ng, dtype=np.bool_)
    need = k
    ff_use = 0
    ratio = 0
    fratio = 0.0
    while need > 0:  # the fitting GPUs by increasing free milli (index order on ties)
        best = -1
        for g in range(ng):
            if not used[g] and gpu_left[n, g] >= m and (best < 0 or gpu_left[n, g] < gpu_left[n, best]):
                best = g
        if best < 0:
            return 0.0
        used[best] = True
        need -= 1
        if gpu_left[n, best] == MILLI:
            ff_use += 1
        ratio += gpu_left[n, best] * 100 // MILLI
        fratio += gpu_left[n, best] * 100.0 / MILLI
    if ff_use > 0:
        return float(max(50 - ff_use, 33))
    if float_scores:
        return max(100.0 - fratio / 10.0, 50.0)
    return float(max(100 - ratio // 10, 50))


@njit(cache=True)
def _clustering(n, cls, aff, total, cpu_pods_ours, idle_ours, float_scores):
    """R8 (GpuClustering); ``cls`` the pod's class (0: CPU-only)."""
    if cls == 0 and not cpu_pods_ours:
        return 0.0
    lo = 0 if cpu_pods_ours else 1
    n_aff = 0
    for j in range(lo, aff.shape[1]):
        if aff[n, j] > 0:
            n_aff += 1
    if float_scores:
        a = 25.0 * (MAX_SPEC_GPU - total) / MAX_SPEC_GPU
    else:
        a = float(25 * (MAX_SPEC_GPU - total) // MAX_SPEC_GPU)
    if aff[n, cls] > 0:
        return a + (75.0 if n_aff == 1 else 50.0)
    if n_aff == 0 and not idle_ours:
        return a + 25.0
    return a


@njit(cache=True)
def _simulate(policy, tie_random, float_scores, cpu_pods_ours, idle_ours, cpu_typ_ours, seed,
              p_cpu, p_mem, p_k, p_m, p_mask, p_shape, n_cpu, n_mem, n_gpu, node_bit, rank,
              t_cpu, t_milli, t_k, t_mask, t_w):
    """Place every pod in order (R1-R10); per pod its node (-1: failed), GPU bit mask, the
    cluster's allocated GPU milli and fragmentation (milli) after it."""
    np.random.seed(seed)
    N = len(n_cpu)
    G = 1
    for i in range(N):
        G = max(G, n_gpu[i])
    T = len(t_w)
    cpu_left = n_cpu.copy()
    mem_left = n_mem.copy()
    gpu_left = np.zeros((N, G), dtype=np.int64)
    for i in range(N):
        for g in range(n_gpu[i]):
            gpu_left[i, g] = MILLI
    n_pods = np.zeros(N, dtype=np.int64)
    aff = np.zeros((N, N_CLASSES), dtype=np.int64)
    GE = np.zeros((N, T), dtype=np.int64)
    LT = np.zeros((N, T), dtype=np.int64)
    frag = np.zeros(N)
    for i in range(N):
        _refresh(i, cpu_left, gpu_left, n_gpu, node_bit, GE, LT, frag, t_cpu, t_milli, t_k, t_mask, t_w, cpu_typ_ours)
    frag_sum = frag.sum()
    P = len(p_cpu)
    node_of = np.full(P, -1, dtype=np.int64)
    mask_of = np.zeros(P, dtype=np.int64)
    used_after = np.zeros(P)
    frag_after = np.zeros(P)
    cand = np.empty(N, dtype=np.int64)
    score = np.empty(N)
    chosen_gpu = np.empty(N, dtype=np.int64)
    # FGD's score of a node for a pod shape only changes when the node does: memoised per
    # (shape, node) with the node's version (shape-major: a pod reads its shape's row over the
    # candidate nodes in order, one cache line per 8 nodes instead of one per node)
    S = 1
    for i in range(P):
        S = max(S, p_shape[i] + 1)
    memo_ver = np.full((S, N) if policy == FGD else (1, 1), -1, dtype=np.int64)
    memo_score = np.zeros(memo_ver.shape)
    memo_gpu = np.zeros(memo_ver.shape, dtype=np.int64)
    version = np.zeros(N, dtype=np.int64)
    used = 0.0
    for i in range(P):
        c = p_cpu[i]
        k = p_k[i]
        m = p_m[i]
        cls = 0 if k == 0 else (1 if (k == 1 and m < MILLI) else 1 + k)
        nc = 0
        for n in range(N):  # R2
            if cpu_left[n] < c or mem_left[n] < p_mem[i] or n_pods[n] >= MAX_PODS_PER_NODE:
                continue
            if m > 0:
                if n_gpu[n] == 0 or (p_mask[i] & node_bit[n]) == 0:
                    continue
                fit = 0
                for g in range(n_gpu[n]):
                    if gpu_left[n, g] >= m:
                        fit += 1
                if fit < k:
                    continue
            cand[nc] = n
            nc += 1
        if nc == 0:
            used_after[i] = used
            frag_after[i] = frag_sum
            continue
        for j in range(nc):
            n = cand[j]
            chosen_gpu[j] = -1
            if policy == RANDOM:
                score[j] = 0.0
            elif policy == DOTPROD:  # R5
                total = 0
                for g in range(n_gpu[n]):
                    total += gpu_left[n, g]
                dot = ((cpu_left[n] / MAX_SPEC_CPU) * (c / MAX_SPEC_CPU)
                       + (total / MAX_SPEC_GPU) * (k * m / MAX_SPEC_GPU))
                s = 100.0 * (1.0 - dot / 2.0)
                score[j] = s if float_scores else float(int(s))
            elif policy == BESTFIT:  # R6 (raw; normalised below)
                total = 0
                for g in range(n_gpu[n]):
                    total += gpu_left[n, g]
                s = (1.0 - ((cpu_left[n] - c) / MAX_SPEC_CPU * 0.5 + (total - k * m) / MAX_SPEC_GPU * 0.5)) * 100.0
                score[j] = s if float_scores else float(int(s))
            elif policy == PACKING:
                score[j] = _packing(n, k, m, gpu_left, n_gpu, cpu_pods_ours, float_scores)
            elif policy == CLUSTERING:
                total = 0
                for g in range(n_gpu[n]):
                    total += gpu_left[n, g]
                score[j] = _clustering(n, cls, aff, total, cpu_pods_ours, idle_ours, float_scores)
            else:  # FGD
                sh = p_shape[i]
                if memo_ver[sh, n] != version[n]:
                    s, gsel = _fgd_node(n, c, k, m, cpu_left, gpu_left, n_gpu, node_bit, GE, LT, frag, t_cpu, t_milli,
                                        t_k, t_mask, t_w, cpu_typ_ours, float_scores)
                    memo_score[sh, n] = s
                    memo_gpu[sh, n] = gsel
                    memo_ver[sh, n] = version[n]
                score[j] = memo_score[sh, n]
                chosen_gpu[j] = memo_gpu[sh, n]
        if policy == BESTFIT and not float_scores:  # R6: NormalizeScore
            hi = -1.0e300
            lo = 1.0e300
            for j in range(nc):
                hi = max(hi, score[j])
                lo = min(lo, score[j])
            for j in range(nc):
                score[j] = 0.0 if hi == lo else float((int(score[j]) - int(lo)) * 100 // (int(hi) - int(lo)))
        if policy == RANDOM:  # R4
            pick = np.random.randint(0, nc)
        else:  # R1
            best = -1.0e300
            for j in range(nc):
                best = max(best, score[j])
            pick = -1
            n_ties = 0
            for j in range(nc):
                if score[j] != best:
                    continue
                if tie_random:  # ours: uniform over the ties (reservoir)
                    n_ties += 1
                    if np.random.randint(0, n_ties) == 0:
                        pick = j
                elif pick < 0 or rank[cand[j]] < rank[cand[pick]]:
                    pick = j
        nd = cand[pick]
        # GPUs in the node
        gmask = 0
        if k == 1 and m < MILLI:
            g_take = -1
            if policy == FGD:
                g_take = chosen_gpu[pick]
            elif policy == RANDOM:
                cnt = 0
                for g in range(n_gpu[nd]):
                    if gpu_left[nd, g] >= m:
                        cnt += 1
                        if np.random.randint(0, cnt) == 0:
                            g_take = g
            else:
                for g in range(n_gpu[nd]):
                    if gpu_left[nd, g] >= m and (g_take < 0 or gpu_left[nd, g] < gpu_left[nd, g_take]):
                        g_take = g
            gpu_left[nd, g_take] -= m
            gmask = 1 << g_take
        elif k > 0:
            need = k
            for g in range(n_gpu[nd]):
                if need == 0:
                    break
                if gpu_left[nd, g] == MILLI:
                    gpu_left[nd, g] = 0
                    gmask |= 1 << g
                    need -= 1
        cpu_left[nd] -= c
        mem_left[nd] -= p_mem[i]
        n_pods[nd] += 1
        version[nd] += 1
        aff[nd, cls] += 1
        used += k * m
        before = frag[nd]
        _refresh(nd, cpu_left, gpu_left, n_gpu, node_bit, GE, LT, frag, t_cpu, t_milli, t_k, t_mask, t_w, cpu_typ_ours)
        frag_sum += frag[nd] - before
        node_of[i] = nd
        mask_of[i] = gmask
        used_after[i] = used
        frag_after[i] = frag_sum
    return node_of, mask_of, used_after, frag_after


def gpu_nodes(nodes: NodeTable) -> NodeTable:
    """The cluster of the paper's runs: the node list's GPU nodes (its own run logs report the CPU
    of these 1,213 nodes only, 107,018 cores)."""
    keep = np.flatnonzero(nodes.n_gpu > 0)
    if not len(keep):
        raise HybridschedError("fgd: the node list has no GPU nodes")
    return nodes.subset(keep)


def models_of(nodes: NodeTable) -> tuple[str, ...]:
    """The GPU models of the nodes, sorted (bit ``j`` of a model mask is model ``j``)."""
    return tuple(sorted({str(m) for m in nodes.model if str(m)}))


def check_pods(pods: PodTable) -> None:
    """The simulator's pod classes (``GetGpuAffinityFromPodAnnotation`` panics on others): a GPU pod
    asks one GPU share (< 1000 milli) or whole GPUs."""
    bad = np.flatnonzero((pods.num_gpu > 1) & (pods.gpu_milli < MILLI) | (pods.num_gpu > 64))
    if len(bad):
        i = int(bad[0])
        raise HybridschedError(f"fgd.rules=k8s_simulator: pod {pods.name[i]!r} asks {int(pods.num_gpu[i])} GPUs of "
                               f"{pods.gpu_milli[i]:g} milli; the simulator knows only one shared GPU or whole GPUs")


def run_seed(plugin: str, pods: PodTable, nodes: NodeTable, order: np.ndarray, typical: Typical, rank: np.ndarray,
             seed: int, ours: tuple[str, ...] = ()) -> Curve:
    """One run of ``plugin`` (a key of :data:`PLUGINS`) on ``nodes`` (the cluster) with the pods
    in ``order``; ``rank`` from :func:`tie_order`; ``seed`` drives Random's draws (and ties under
    ``tie_order`` of ``ours``)."""
    if plugin not in PLUGINS:
        raise HybridschedError(f"fgd.k8s.policies: unknown plugin {plugin!r}; known: {sorted(PLUGINS)}")
    unknown = sorted(set(ours) - set(OURS))
    if unknown:
        raise HybridschedError(f"fgd.k8s.ours: unknown rule(s) {unknown}; known: {list(OURS)}")
    models = models_of(nodes)
    model_index = {m: j for j, m in enumerate(models)}
    node_bit = np.array([(1 << model_index[str(m)]) if str(m) else 0 for m in nodes.model], dtype=np.int64)
    seq = pods.subset(order)
    out = _simulate(PLUGINS[plugin], "tie_order" in ours, "integer_scores" in ours, "cpu_pods" in ours,
                    "idle_node" in ours, "cpu_typical" in ours, int(seed),
                    np.round(seq.cpu_milli).astype(np.int64), seq.memory_mib.astype(np.float64),
                    seq.num_gpu.astype(np.int64), np.round(seq.gpu_milli).astype(np.int64),
                    _model_masks(seq.gpu_spec, models), _shapes(seq), np.round(nodes.cpu_milli).astype(np.int64),
                    nodes.memory_mib.astype(np.float64), nodes.n_gpu.astype(np.int64), node_bit,
                    rank.astype(np.int64), typical.cpu, typical.milli, typical.k, typical.mask, typical.weight)
    node_of, mask, used, frag = out
    cap = float(nodes.n_gpu.sum() * MILLI)
    requested = np.cumsum(seq.num_gpu * seq.gpu_milli)
    idle = cap - used
    return Curve(x=requested / cap * 100.0, unallocated_gpu_pct=idle / cap * 100.0, frag_pct=frag / cap * 100.0,
                 frag_ratio_pct=np.divide(frag, idle, out=np.zeros_like(frag), where=idle > 0) * 100.0,
                 failed=node_of < 0, node=node_of, gpu_mask=mask)


def _shapes(pods: PodTable) -> np.ndarray:
    """An id per distinct (CPU, GPU count, per-GPU milli) request: FGD's memo key."""
    key = np.stack([np.round(pods.cpu_milli), pods.num_gpu, np.round(pods.gpu_milli)], axis=1)
    return np.unique(key, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


def draw_seed(seed: int, policy_name: str) -> int:
    """Random's (and ``tie_order``'s) generator seed for (seed, policy), independent of the others."""
    return int(np.random.default_rng([int(seed), zlib.crc32(policy_name.encode())]).integers(2**31 - 1))


def order_rng(seed: int) -> np.random.Generator:
    """The seed's generator of the node order (R1), shared by every policy (paired runs)."""
    return np.random.default_rng([int(seed), 0x7A1E])
