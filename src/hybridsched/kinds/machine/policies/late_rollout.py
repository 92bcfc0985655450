"""``rollout_late``: a late-dispatch heuristic that looks ahead over the pool it can see.

At each pick (``late_engine.py``) the ``candidates`` waiting tasks of least key under a base
late list heuristic (``policies/late.py``; ``heft_late`` in the YAML) that can start now are
candidates, each with the base's split and up to ``shares`` grid steps either side of it.
Every such first move is scored by *rolling out* the rest of the pool: the other waiting
tasks are list-scheduled in the base's key order, each with the base's charged split on the
believed free times (the CPU and the GPU that frees first) and nominal run times, and the
score is the base's own cost summed over the pool,

    sum over the pool of (finish - t) + s * (beta_cpu * cpu_seconds + beta_gpu * gpu_seconds)

(``s`` the base's load scale).  The move of least score starts (ties: the base's order of
tasks, then the share nearest the base's, the higher first).  It
sees what every late policy sees: the pool, the believed free times and nominal times; no
future arrival, no noise.  With ``candidates = 1`` and ``shares = 0`` it is the base, trace
for trace (``tests/machine/test_late_rollout.py``).  Why: the offline search of
``studies/late_offline.py`` found shares worth more than order, and the rollout chooses
the share with the other waiting tasks in view (docs/machine.md, "An online rollout").
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from numba import njit

from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.engine import CPU_S, GPU_S, MAX_F
from hybridsched.kinds.machine.policies.late import (
    _ALONE,
    _AGING,
    _B_CPU,
    _B_GPU,
    _BACKLOG,
    _LAUNCH,
    _N_PARAMS,
    _RANK,
    _SLACK,
    _W_ALONE,
    _W_FIN,
    _W_RANK,
    _WEIGHT,
    LateList,
    least_free_gpu,
    load_scale,
    split_charged,
    split_times,
    start_device,
)

# params: the base's head, then these two, then the fraction grid
_CANDIDATES, _SHARES = _N_PARAMS, _N_PARAMS + 1
_GRID0 = _N_PARAMS + 2


@njit
def base_key(i, t, fin, ready, pdata, params):
    """The base list heuristic's priority key of task ``i`` (``late._list_late``'s)."""
    return (params[_W_FIN] * (fin - t) + params[_W_ALONE] * pdata[i, _ALONE] / pdata[i, _WEIGHT]
            - params[_W_RANK] * pdata[i, _RANK] - params[_AGING] * (t - ready[i]))


@njit
def move_cost(t, k, f, g, cb, gb, fin, best, order, pool, n_pool, est, X, params, s, gfree):  # pragma: no cover - compiled
    """The rollout's score of starting pool task ``k`` at GPU share ``f`` (its CPU and GPU
    seconds ``cb``, ``gb`` and believed finish ``fin``, on GPU ``g``): its own ``finish - t`` and
    charge, then the rest of the pool list-scheduled in the base's key ``order``, each by its
    charged split on the believed free times.  Cut short once it reaches ``best`` (every term
    is >= 0: the move cannot win any more); ``gfree`` is scratch space."""
    b_cpu, b_gpu = params[_B_CPU], params[_B_GPU]
    n_gpu = est.shape[0] - 1
    score = fin - t + s * (b_cpu * (cb if f < 1.0 else 0.0) + b_gpu * (gb if f > 0.0 else 0.0))
    cfree = est[0] + cb if f < 1.0 else est[0]
    for q in range(n_gpu):
        gfree[q] = est[q + 1]
    if f > 0.0:
        gfree[g] = est[g + 1] + gb
    for o2 in range(n_pool):
        if score >= best:
            break
        k2 = order[o2]
        if k2 == k:
            continue
        i2 = pool[k2]
        g2 = 0
        for q in range(1, n_gpu):
            if gfree[q] < gfree[g2]:
                g2 = q
        f2, fin2, c2, gb2 = split_charged(i2, t, cfree, gfree[g2], X, params, _GRID0, s, b_cpu, b_gpu)
        score += fin2 - t + s * (b_cpu * c2 + b_gpu * (gb2 if f2 > 0.0 else 0.0))
        if f2 < 1.0:
            cfree += c2
        if f2 > 0.0:
            gfree[g2] += gb2
    return score


@njit
def base_order(t, pool, n_pool, idle, est, g, X, ready, pdata, params, s):  # pragma: no cover - compiled
    """The base's charged split of every waiting task, the device it would start on (-1: none
    idle) and the pool in the base's key order (stable: ties in pool order, as the base)."""
    keys = np.empty(n_pool)
    split = np.empty(n_pool)
    start = np.empty(n_pool, dtype=np.int64)
    for k in range(n_pool):
        i = pool[k]
        f, fin, _, gb = split_charged(i, t, est[0], est[g + 1], X, params, _GRID0, s, params[_B_CPU], params[_B_GPU])
        split[k] = f
        keys[k] = base_key(i, t, fin, ready, pdata, params)
        start[k] = start_device(f, g, idle, t, est[0], gb, params[_SLACK])
    return split, start, np.argsort(keys, kind="mergesort")


@njit
def _rollout_pick(t, pool, n_pool, idle, est, qlen, X, ready, pdata, params):  # pragma: no cover - compiled
    g = least_free_gpu(est)
    s = load_scale(t, pool, n_pool, est, pdata, params[_BACKLOG])
    b_cpu, b_gpu, launch = params[_B_CPU], params[_B_GPU], params[_LAUNCH]
    step = params[_GRID0 + 1]
    split, start, order = base_order(t, pool, n_pool, idle, est, g, X, ready, pdata, params, s)
    n_gpu = est.shape[0] - 1
    gfree = np.empty(n_gpu)
    best_k, best_d, best_f, best = -1, -1, 0.0, np.inf
    tried = 0
    for o in range(n_pool):
        k = order[o]
        if start[k] < 0:
            continue
        if tried == params[_CANDIDATES]:
            break
        tried += 1
        i = pool[k]
        for jj in range(2 * int(params[_SHARES]) + 1):  # the base's split first, then the nearest
            j = ((jj + 1) // 2) * (1 if jj % 2 == 1 else -1)  # (a low score early cuts rollouts short)
            f = split[k] + j * step
            if f < -1e-9 or f > X[i, MAX_F] + 1e-9:
                continue
            f = min(max(f, 0.0), X[i, MAX_F])
            cb, gb, fin = split_times(f, X[i, CPU_S], X[i, GPU_S], launch, est[0], est[g + 1])
            d = start_device(f, g, idle, t, est[0], gb, params[_SLACK])
            if d < 0:
                continue
            # move_cost's arithmetic written out: a call per move costs the rollout 30 % of its
            # speed (tests/machine/test_late_imitation.py holds the two to the same choice)
            score = fin - t + s * (b_cpu * (cb if f < 1.0 else 0.0) + b_gpu * (gb if f > 0.0 else 0.0))
            cfree = est[0] + cb if f < 1.0 else est[0]
            for q in range(n_gpu):
                gfree[q] = est[q + 1]
            if f > 0.0:
                gfree[g] = est[g + 1] + gb
            for o2 in range(n_pool):  # the rest of the pool in the base's order, each by its split rule
                if score >= best:  # every term is >= 0: this move cannot win any more
                    break
                k2 = order[o2]
                if k2 == k:
                    continue
                i2 = pool[k2]
                g2 = 0
                for q in range(1, n_gpu):
                    if gfree[q] < gfree[g2]:
                        g2 = q
                f2, fin2, c2, gb2 = split_charged(i2, t, cfree, gfree[g2], X, params, _GRID0, s, b_cpu, b_gpu)
                score += fin2 - t + s * (b_cpu * c2 + b_gpu * (gb2 if f2 > 0.0 else 0.0))
                if f2 < 1.0:
                    cfree += c2
                if f2 > 0.0:
                    gfree[g2] += gb2
            if score < best:
                best, best_k, best_d, best_f = score, k, d, f
    return best_k, best_d, best_f, g


class RolloutLate(LateList):
    """The rollout over a late list heuristic ``base`` (a policy config, module docstring)."""

    name = "rollout_late"
    pick_kernel: ClassVar[object] = _rollout_pick

    def __init__(self, base: dict[str, Any] | LateList, candidates: int = 8, shares: int = 20) -> None:
        from hybridsched.kinds.base import instantiate

        b = base if isinstance(base, LateList) else instantiate(base)
        if not isinstance(b, LateList):
            what = base.get("_target_") if isinstance(base, dict) else type(base).__name__
            raise HybridschedError(f"rollout_late.base: {what} is not a late list heuristic (policies/late.py)")
        if not (int(candidates) == candidates >= 1 and int(shares) == shares >= 0):
            raise HybridschedError(f"rollout_late: candidates must be an integer >= 1 and shares >= 0, "
                                   f"got {candidates} and {shares}")
        super().__init__(**b.w, fraction_step=float(b.grid[1]), reserved_order=b.reserved_order)
        self.candidates, self.shares = int(candidates), int(shares)

    def head(self, cluster) -> list[float]:
        return [*super().head(cluster), float(self.candidates), float(self.shares)]
