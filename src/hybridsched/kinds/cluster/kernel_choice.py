"""The compiled choices of the cluster policies (``kernels.py``, ``class_index.py``) and their data.

Each policy class names its compiled choice in its own ``kernel()`` method (``policies.py``),
which builds it with a function here; :func:`kernel_for` asks the policy.  This module sits
above ``kernels``, ``class_index`` and ``policies`` so that none of them imports another back
(the policies import it inside their ``kernel()`` methods).
"""

from __future__ import annotations

import numpy as np

from hybridsched.kinds.cluster import class_index as CI
from hybridsched.kinds.cluster.kernels import (
    ALL,
    FIRST,
    INDEXED,
    LEAST_LOADED,
    NEXT_FROM,
    Kernel,
    _choose_best_fit,
    _choose_fgd,
    _choose_first,
    _choose_greedy,
    _choose_random,
    _choose_round_robin,
    _choose_table,
)

CLASS_INDEX = True  # best_fit, random, eft, oracle and fgd use ``class_index`` (False: the scan)


def kernel_for(policy) -> Kernel | None:
    """The compiled form of a prepared policy (its ``kernel()``), or None: the Python loop runs
    it.  Call after ``policy.prepare``: the data are read from the prepared policy."""
    own = getattr(policy, "kernel", None)
    return own() if own is not None else None


def _ints() -> np.ndarray:
    """The loop's per-run integer state (written by the loop: a fresh array per run)."""
    return np.zeros(1, dtype=np.int64)


_NONE = (np.zeros(0),)


def first_kernel(policy) -> Kernel:
    """The first feasible node (``NodePolicy``)."""
    return Kernel(_choose_first, FIRST, _NONE, _ints())


def round_robin_kernel(policy) -> Kernel:
    """The next feasible node after the one used last (``RoundRobin``)."""
    ints = _ints()  # the next-node pointer: the choice's data and the loop's state are one array
    return Kernel(_choose_round_robin, NEXT_FROM, (ints,), ints)


def greedy_kernel(policy) -> Kernel:
    """The least-loaded feasible node (``Greedy``)."""
    return Kernel(_choose_greedy, LEAST_LOADED, _NONE, _ints())


def best_fit_kernel(policy) -> Kernel:
    """Best fit (``BestFit``): the class index's form, or the scan."""
    if CLASS_INDEX:
        return Kernel(CI.choose_best_fit, INDEXED, (np.zeros(0), CI.build(policy.inp, policy.cluster)), _ints())
    return Kernel(_choose_best_fit, ALL, _NONE, _ints())


def random_kernel(policy) -> Kernel:
    """A seeded uniform feasible node with best-fit GPUs (``Random`` without ``random_gpus``)."""
    if CLASS_INDEX:
        return Kernel(CI.choose_random, INDEXED, (policy.rng, CI.build(policy.inp, policy.cluster, counted=True)), _ints())
    return Kernel(_choose_random, ALL, (policy.rng,), _ints())


def table_kernel(policy, table: np.ndarray) -> Kernel:
    """The node of least first key ``table[task, GPU model]``, ties best fit
    (``EarliestFinishTime``: estimated run times; ``Oracle``: true ones)."""
    table = np.ascontiguousarray(table, dtype=np.float64)
    if CLASS_INDEX:
        return Kernel(CI.choose_table, INDEXED, (table, CI.build(policy.inp, policy.cluster, "model")), _ints())
    return Kernel(_choose_table, ALL, (table,), _ints())


def fgd_kernel(policy) -> Kernel:
    """FGD's least fragmentation increase (``FragmentationGradientDescent``)."""
    if CLASS_INDEX:
        return Kernel(CI.choose_fgd, INDEXED, _fgd_data(policy) + (CI.build(policy.inp, policy.cluster, pinned_gpu=True),),
                      _ints())
    return Kernel(_choose_fgd, ALL, _fgd_data(policy), _ints())


def estimate_table(policy) -> np.ndarray:
    """EFT's per-(task, GPU model) first key: ``estimate[i] / speed[model]``; CPU-only tasks 0
    everywhere (``policies.EstimatePolicy.choose``)."""
    speed = policy.cluster.model_speed()
    return np.where(policy.inp.k[:, None] > 0, policy.estimate[:, None] / speed[None, :], 0.0)


FGD_MEMO_ENTRIES = 20_000_000  # memoised (shape, node) scores at most (3 arrays of this many entries)


def _fgd_data(policy) -> tuple:
    """FGD's kernel data: the mix, per-node statistics (stale until computed), per task its pod
    shape (CPU, GPU count, milli; most frequent first) and the per-(shape, node) score memo."""
    from hybridsched.kinds.cluster.fragmentation import _mix_args

    inp, n_nodes, g_slots = policy.inp, policy.cluster.n_nodes, policy.cluster.gpu_cap.shape[1]
    tk, tp, tcpu, tallow, tw = _mix_args(policy.mix)
    rows = np.column_stack([inp.cpu, inp.k.astype(np.float64), inp.p]).reshape(-1, 3)
    uniq, inverse, counts = np.unique(rows, axis=0, return_inverse=True, return_counts=True)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.argsort(-counts, kind="stable")] = np.arange(len(uniq))
    order = np.argsort(rank)
    shape = rank[np.asarray(inverse).reshape(-1)].astype(np.int64)
    n_memo = min(len(uniq), FGD_MEMO_ENTRIES // max(n_nodes, 1))
    return (tk, tp, tcpu, tallow, tw, np.zeros((n_nodes, len(tk)), dtype=np.int64), np.zeros((n_nodes, len(tk))),
            np.zeros(n_nodes), np.full(n_nodes, -1, dtype=np.int64), shape,
            uniq[order, 1].astype(np.int64), uniq[order, 2].copy(),
            np.zeros((n_memo, n_nodes)), np.full((n_memo, n_nodes), -1, dtype=np.int64),
            np.full((n_memo, n_nodes), -1, dtype=np.int64),
            np.empty(len(tk), dtype=np.int64), np.empty(len(tk)), np.zeros(max(g_slots, 1), dtype=np.bool_))
