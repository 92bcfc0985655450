"""An interval-indexed LP lower bound on total completion time that sees contention.

It relaxes the engine's rules (docs/machine.md, "Lower bound", has the proof), in the style of Hall,
Schulz, Shmoys and Wein's time-indexed relaxation for unrelated machines with release
dates:

* two machine classes, the CPU (capacity 1) and the GPU pool (capacity ``n_gpus``; a
  task's GPU part runs on one GPU, so it uses at most one unit of the pool at a time);
* a task's share ``f`` on device class ``d`` costs at least ``f * p_d`` device-seconds,
  ``p_CPU = C`` and ``p_GPU = G + L`` (``L + f G >= f (G + L)`` for ``f <= 1``), and the GPU
  share is at most the memory-feasible ``m``; the work is divisible and preemptible;
* time is cut into *dyadic* intervals of a base width ``delta``; each task sees the time
  after its release through a geometric cover of dyadic intervals (width at most
  ``max(delta, distance / rho)``), so far-away work is counted coarsely with few variables,
  and a dyadic interval's capacity bounds the work of every piece inside it;
* a task's completion is at least the share-weighted mean busy time plus half of its
  processing (``sum_d f_d (M_d + dur_d / 2)``, with ``f_d dur_d >= f_d^2 p_d`` linearised
  by tangents), at least its ready time plus its best time alone, and at least each
  parent's completion plus its best time alone;
* inside one piece a share ``x`` runs at rate at most one, so its busy time there is at least
  ``x p_d`` long and starts no earlier than the piece's ``lo``: its mean busy time is at least
  ``lo + x p_d / 2``, not only ``lo`` (``piece_cuts`` tangents of ``x^2`` per piece; without
  them a finely gridded task loses about half a piece's width).

``C, G, L`` are the realised times (nominal times the noise), as in ``bounds.py``. Solved
by HiGHS through ``scipy.optimize.linprog`` on sparse matrices.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np

from hybridsched.errors import HybridschedError
from hybridsched.devices import Cluster, Realization
from hybridsched.kinds.machine.workload import TaskTable

TANGENTS = (0.25, 0.5, 0.75, 1.0)  # points where f^2 is linearised from below
SAFETY = 1e-6  # relative margin below HiGHS's optimum: its tolerances are ~1e-7


@dataclass(frozen=True)
class LPSettings:
    """Resolution of the relaxation: a finer grid is tighter and slower, never invalid."""

    delta: float | None = None  # base interval width (s); None = a quarter of the median best-alone time
    rho: float = 2.0  # a piece at distance D after release is at most max(delta, D / rho) wide
    max_levels: int = 24  # cap on the dyadic depth (the horizon is delta * 2**levels)
    piece_cuts: int = 2  # tangents of x^2 per piece for the in-piece busy time (0 = only lo counts)
    # past this estimated size the LP is skipped with one line (the solo bound stands): a
    # 2-million-task file ran it for minutes while memory grew ~12 MB/s (docs/bad-input.md)
    max_variables: int | None = 2_000_000

    def __post_init__(self) -> None:
        if self.delta is not None and not self.delta > 0:
            raise HybridschedError(f"bound.lp.delta must be > 0, got {self.delta}")
        if not self.rho >= 1:
            raise HybridschedError(f"bound.lp.rho must be >= 1, got {self.rho}")
        if not (isinstance(self.piece_cuts, int) and 0 <= self.piece_cuts <= 8):
            raise HybridschedError(f"bound.lp.piece_cuts must be an integer in 0..8, got {self.piece_cuts}")


# pieces per task and dyadic level, measured on the 3,000 default test tasks at 17 levels: 1.59,
# 2.47, 4.18 and 7.42 at rho 1, 2, 4 and 8, about 0.8 + 0.85 rho; each piece has 1 + piece_cuts
# columns per device class, plus about 0.5 load columns per task and level and 7 per task
def estimate_variables(n_tasks: int, horizon_s: float, median_best_alone_s: float, settings: LPSettings) -> int:
    """The LP's size (columns) before building it, from the task count and the dyadic depth."""
    delta = settings.delta or max(median_best_alone_s / 4.0, 1e-6)
    levels = min(settings.max_levels, max(1, int(np.ceil(np.log2(max(horizon_s / delta, 2.0))))))
    per_level = 2 * (1 + settings.piece_cuts) * (0.8 + 0.85 * settings.rho) + 0.5
    return int(n_tasks * (per_level * levels + 7))


@dataclass(frozen=True)
class LPBound:
    """Optimum of the relaxation: a lower bound on the mean latency, and how it was solved."""

    mean_latency: float
    n_variables: int
    n_constraints: int
    solve_s: float


def lp_lower_bound(tasks: TaskTable, cluster: Cluster, realization: Realization, ready: np.ndarray,
                   best_alone: np.ndarray, settings: LPSettings = LPSettings()) -> LPBound:
    """Lower bound on mean latency from the interval-indexed LP.

    ``ready`` is a lower bound on each task's ready time (arrival, or its parents' earliest
    finish), ``best_alone`` each task's shortest time alone (``bounds.best_alone_seconds``).
    """
    from scipy.optimize import OptimizeWarning, linprog
    from scipy.sparse import coo_matrix

    t_start = time.perf_counter()
    n = len(tasks)
    cpu = cluster.cpu_seconds(tasks.size) * realization.cpu_factor
    gpu = (cluster.gpu_seconds(tasks.size, tasks.intensity, tasks.memory_mb) + cluster.launch_s) * realization.gpu_factor
    p = np.column_stack([cpu, gpu])  # device-seconds of the whole task, per device class
    cap = np.array([1.0, float(cluster.n_gpus)])
    m = cluster.max_fraction(tasks.memory_mb)

    delta = settings.delta or max(float(np.median(best_alone)) / 4.0, 1e-6)
    t0 = float(ready.min())
    work = np.minimum(cpu, (1.0 - m) * cpu + m * gpu)
    # long enough for every task to finish even on one device, so overflow is never cheap
    horizon = (float(ready.max()) - t0) + float(work.sum()) + float(best_alone.max())
    levels = min(settings.max_levels, max(1, int(np.ceil(np.log2(max(horizon / delta, 2.0))))))
    end = t0 + delta * 2.0**levels

    # --- the pieces of each task: dyadic intervals covering [ready, end) -------------------
    p_task, p_level, p_index, p_lo, p_len = _cover(ready, t0, delta, levels, settings.rho)
    n_pieces = len(p_task)

    # --- dyadic intervals that hold a piece, and their ancestors (one load variable each) --
    keys = {}
    for lv, ix in zip(p_level.tolist(), p_index.tolist()):
        while (lv, ix) not in keys and lv <= levels:
            keys[(lv, ix)] = len(keys)
            lv, ix = lv + 1, ix >> 1
    n_int = len(keys)
    piece_int = np.array([keys[(lv, ix)] for lv, ix in zip(p_level.tolist(), p_index.tolist())], dtype=np.int64)
    int_level = np.array([k[0] for k in keys], dtype=np.int64)
    parent_of = np.array([keys.get((lv + 1, ix >> 1), -1) for lv, ix in keys], dtype=np.int64)

    # --- columns ---------------------------------------------------------------------------
    # x[d, seg, piece] | y[d, interval] | F[d, task] | o[task] | q[d, task] | c[task]
    # A piece's share is the sum of its segments (one without piece cuts). With k cuts the
    # segments cut [0, u] (u = min(1, len / p)) at u (2j - 1) / (2k), j = 1..k, and segment j
    # adds j u p / k per unit to the completion row: that is max(0, tangents of p x^2 / 2 at
    # x = u j / k), exact because the LP fills a piece's cheaper segments first.
    n_seg = settings.piece_cuts + 1
    nx = n_seg * n_pieces  # columns per device class
    ox = 0
    oy = ox + 2 * nx
    oF = oy + 2 * n_int
    oo = oF + 2 * n
    oq = oo + n
    oc = oq + 2 * n
    n_col = oc + n
    lo_b = np.zeros(n_col)
    hi_b = np.full(n_col, np.inf)
    pieces = np.arange(n_pieces)
    seg_slope = np.zeros((2, n_seg, n_pieces))  # extra completion-row coefficient per segment
    for d in range(2):
        u = p_len / p[p_task, d]
        if n_seg == 1:
            hi_b[ox + d * nx: ox + (d + 1) * nx] = u
        else:
            u = np.minimum(1.0, u)
            k = settings.piece_cuts
            for j in range(n_seg):
                width = u / (2 * k) if j in (0, k) else u / k
                hi_b[ox + d * nx + j * n_pieces + pieces] = width
                seg_slope[d, j] = p[p_task, d] * u * j / k
        hi_b[oy + d * n_int: oy + (d + 1) * n_int] = cap[d] * delta * 2.0**int_level
    hi_b[oF: oF + n] = 1.0
    hi_b[oF + n: oF + 2 * n] = m
    hi_b[oo: oo + n] = 1.0
    lo_b[oc:] = ready + best_alone
    cost = np.zeros(n_col)
    cost[oc:] = 1.0

    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []

    def add(r, c, v):
        rows.append(np.asarray(r, dtype=np.int64))
        cols.append(np.asarray(c, dtype=np.int64))
        vals.append(np.broadcast_to(np.asarray(v, dtype=np.float64), np.shape(c)).copy())

    def x_cols(d: int, j: int) -> np.ndarray:
        return ox + d * nx + j * n_pieces + pieces

    tid = np.arange(n)
    # equality rows
    r = 0
    add(r + tid, oF + tid, 1.0)  # F_cpu + F_gpu + o = 1
    add(r + tid, oF + n + tid, 1.0)
    add(r + tid, oo + tid, 1.0)
    r += n
    for d in range(2):  # F_d - sum_pieces x_d = 0
        add(r + tid, oF + d * n + tid, 1.0)
        for j in range(n_seg):
            add(r + p_task, x_cols(d, j), -1.0)
        r += n
    for d in range(2):  # y_J - sum_{pieces = J} p x - sum_{children} y = 0
        ids = np.arange(n_int)
        add(r + ids, oy + d * n_int + ids, 1.0)
        for j in range(n_seg):
            add(r + piece_int, x_cols(d, j), -p[p_task, d])
        has_parent = parent_of >= 0
        add(r + parent_of[has_parent], oy + d * n_int + ids[has_parent], -1.0)
        r += n_int
    n_eq = r
    b_eq = np.zeros(n_eq)
    b_eq[:n] = 1.0

    # inequality rows (<=)
    r = 0
    # sum (lo + segment slope) x + end o + q_cpu + q_gpu - c <= 0  (the completion-time row)
    for d in range(2):
        for j in range(n_seg):
            add(n_eq + r + p_task, x_cols(d, j), p_lo + seg_slope[d, j])
        add(n_eq + r + tid, oq + d * n + tid, 1.0)
    add(n_eq + r + tid, oo + tid, end)
    add(n_eq + r + tid, oc + tid, -1.0)
    r += n
    b_ub = [np.zeros(n)]
    for d in range(2):  # tangent cuts: p f0 F - q <= p f0^2 / 2
        for f0 in TANGENTS:
            add(n_eq + r + tid, oF + d * n + tid, p[:, d] * f0)
            add(n_eq + r + tid, oq + d * n + tid, -1.0)
            b_ub.append(p[:, d] * f0 * f0 / 2.0)
            r += n
    if tasks.has_deps:  # c_parent - c_child <= -best_alone_child
        child = np.repeat(tid, np.diff(tasks.parent_ptr))
        k = np.arange(len(child))
        add(n_eq + r + k, oc + tasks.parent_idx, 1.0)
        add(n_eq + r + k, oc + child, -1.0)
        b_ub.append(-best_alone[child])
        r += len(child)
    n_ub = r

    A = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                   shape=(n_eq + n_ub, n_col)).tocsr()
    def solve(crossover: str):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)  # run_crossover goes to HiGHS verbatim
            return linprog(cost, A_ub=A[n_eq:], b_ub=np.concatenate(b_ub), A_eq=A[:n_eq], b_eq=b_eq,
                           bounds=np.column_stack([lo_b, hi_b]), method="highs-ipm",
                           options={"run_crossover": crossover})

    # interior point, 2x faster than the default simplex here; without crossover (15 % less): the
    # bound needs the optimum's value, not a vertex, and IPM stops within its 1e-8 gap (< SAFETY).
    # IPM alone can stop short of its optimality test (status "Unknown"); a crossover settles it.
    res = solve("off")
    if res.status != 0:
        res = solve("on")
    if res.status != 0:
        raise HybridschedError(f"lower bound LP: HiGHS did not solve it ({res.message})")
    total = float(res.fun) * (1.0 - SAFETY)
    mean = max(0.0, (total - float(tasks.arrival.sum())) / n)
    return LPBound(mean_latency=mean, n_variables=n_col, n_constraints=n_eq + n_ub,
                   solve_s=time.perf_counter() - t_start)


def _cover(ready: np.ndarray, t0: float, delta: float, levels: int, rho: float):
    """Per task, the dyadic intervals that cover [ready, end): (task, level, index, lo, length)
    of each piece; ``lo`` is where work in the piece can start, ``length`` how long it lasts."""
    task, level, index, lo, length = [], [], [], [], []
    n_top = 1 << levels
    for i, r in enumerate(ready.tolist()):
        j = min(int((r - t0) // delta), n_top - 1)  # level-0 index of the interval holding r
        pos = j  # in units of delta
        lv = 0
        while pos < n_top:
            start = t0 + pos * delta
            # largest aligned level whose width is at most max(delta, distance / rho)
            lv = 0
            dist = start - r
            while (lv < levels and pos % (2 << lv) == 0 and (2 << lv) * delta <= max(delta, dist / rho)
                   and pos + (2 << lv) <= n_top):
                lv += 1
            width = 1 << lv
            a = max(start, r)
            task.append(i)
            level.append(lv)
            index.append(pos >> lv)
            lo.append(a)
            length.append(max(start + width * delta - a, 0.0))
            pos += width
    return (np.asarray(task, dtype=np.int64), np.asarray(level, dtype=np.int64), np.asarray(index, dtype=np.int64),
            np.asarray(lo), np.asarray(length))
