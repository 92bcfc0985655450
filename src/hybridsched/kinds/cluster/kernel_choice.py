"""Which policies run in the compiled loop of ``kernels.py``, and with what data.

:func:`kernel_for` maps a prepared policy to its :class:`kernels.Kernel` (choice kernel, search
mode, data).  It sits above ``kernels``, ``class_index`` and ``policies`` so that none of them
imports another back: ``class_index`` builds on ``kernels``' choice kernels, and this module picks
between the two.
"""

from __future__ import annotations

import numpy as np

from hybridsched.kinds.cluster import class_index as CI
from hybridsched.kinds.cluster import policies as P
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
    """The compiled form of a policy whose exact class has one, else None.  Call after
    ``policy.prepare``: the data are read from the prepared policy.  A policy may supply its
    own: a ``kernel()`` method returning a :class:`Kernel` (or None)."""
    ints = np.zeros(1, dtype=np.int64)
    none = (np.zeros(0),)
    cls = type(policy)
    if cls is P.NodePolicy:
        return Kernel(_choose_first, FIRST, none, ints)
    if cls is P.RoundRobin:
        return Kernel(_choose_round_robin, NEXT_FROM, (ints,), ints)
    if cls is P.Greedy:
        return Kernel(_choose_greedy, LEAST_LOADED, none, ints)
    if CLASS_INDEX and cls in (P.BestFit, P.Random, P.EarliestFinishTime, P.Oracle, P.FragmentationGradientDescent):
        ix = _indexed(policy)
        if ix is not None:
            return ix
    if cls is P.BestFit:
        return Kernel(_choose_best_fit, ALL, none, ints)
    if cls is P.Random and not policy.random_gpus:
        return Kernel(_choose_random, ALL, (policy.rng,), ints)
    if cls in (P.EarliestFinishTime, P.Oracle):
        return Kernel(_choose_table, ALL, (_table(policy),), ints)
    if cls is P.FragmentationGradientDescent:
        return Kernel(_choose_fgd, ALL, _fgd_data(policy), ints)
    own = getattr(cls, "kernel", None)  # a policy's own compiled choice (e.g. cem.ScoredEFT)
    return own(policy) if own is not None else None


def _table(policy) -> np.ndarray:
    """EFT's and the oracle's per-(task, GPU model) first key: estimated or true run time."""
    if type(policy) is P.Oracle:
        table = policy.inp.run_time
    else:  # estimate[i] / speed[model]; CPU-only tasks: 0 everywhere (policies.EstimatePolicy.choose)
        speed = policy.cluster.model_speed()
        table = np.where(policy.inp.k[:, None] > 0, policy.estimate[:, None] / speed[None, :], 0.0)
    return np.ascontiguousarray(table, dtype=np.float64)


def _indexed(policy) -> Kernel | None:
    """The per-demand-class feasibility index form (``class_index.py``) of best_fit, random
    (without ``random_gpus``), eft, oracle and fgd."""
    ints = np.zeros(1, dtype=np.int64)
    cls = type(policy)
    if cls is P.Random and policy.random_gpus:
        return None
    inp, cluster = policy.inp, policy.cluster
    if cls is P.BestFit:
        return Kernel(CI.choose_best_fit, INDEXED, (np.zeros(0), CI.build(inp, cluster)), ints)
    if cls is P.Random:
        return Kernel(CI.choose_random, INDEXED, (policy.rng, CI.build(inp, cluster, counted=True)), ints)
    if cls in (P.EarliestFinishTime, P.Oracle):
        return Kernel(CI.choose_table, INDEXED, (_table(policy), CI.build(inp, cluster, "model")), ints)
    return Kernel(CI.choose_fgd, INDEXED, _fgd_data(policy) + (CI.build(inp, cluster, pinned_gpu=True),), ints)


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
