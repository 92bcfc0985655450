"""Late-dispatch heuristics (``sim.dispatch: late``, ``late_engine.py``): list scheduling
from the central pool whenever a device frees.

One compiled kernel, four parameterisations.  At each pick, for every waiting task ``i``:

1. its split ``f`` and believed finish: the cheapest ``f`` on the fraction grid of

       cost = (finish - t) + s * (beta_cpu * cpu_busy + beta_gpu * gpu_busy)

   on the believed free times of the CPU and of the GPU that frees first (eft_rank's work
   charge; ``s = B / (B + backlog_s)`` with ``B`` the believed work per device in the device
   queues *and the pool*, or 1 with ``backlog_s = 0``; ``beta = 0`` is plain EFT);
2. whether it can start now: a device its split uses is idle (the CPU if ``f < 1``, else
   that GPU); a task whose best split only uses busy devices waits for them.  With a finite
   ``queue_slack`` a split (``0 < f < 1``) does not start on a GPU while its CPU part would
   wait more than ``queue_slack`` x its GPU part's believed seconds in the CPU's reserved
   queue: that queue is FIFO, so committing CPU parts to it would make the CPU's order
   first-come first-served, which is what keeps a CPU-bound machine's latency high
   (docs/machine.md, "Holding splits back").  With ``reserved_order: spt`` the engine
   runs each device's reserved parts shortest first instead (``late_engine.py``);
3. its priority key, lowest first:

       key = w_fin * (finish - t) + w_alone * alone_i / weight_i - w_rank * rank_i - aging * (t - ready_i)

   ``alone_i`` the nominal best time alone, ``weight_i = (1 + priority_i) * (1 + kappa * rank_i / mean alone)``,
   ``rank_i`` the critical path of best-alone times below ``i`` (HEFT's upward rank without
   the task itself; 0 without dependencies).

The startable task of least key starts, on the idle device of its split (the CPU first when
both are idle; the GPU part of a CPU-started split goes to that GPU, with priority).

| policy | key |
|---|---|
| ``spt_late``  | shortest predicted processing time first (``w_alone = 1``) |
| ``wspt_late`` | the same divided by the weight (priority, and dependants through ``kappa``) |
| ``eft_late``  | earliest finish among waiting tasks x idle devices (``w_fin = 1``) |
| ``heft_late`` | HEFT's upward rank, largest first (``w_rank = 1``), minus ``w_fin`` x finish |
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numba import njit

from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.bounds import best_alone_seconds
from hybridsched.kinds.machine.engine import CPU_S, GPU_S, MAX_F
from hybridsched.kinds.machine.late_engine import RESERVED, rank_below
from hybridsched.kinds.machine.policies.base import Policy, fraction_grid

# params layout (then the fraction grid)
_LAUNCH, _W_FIN, _W_ALONE, _W_RANK, _AGING, _B_CPU, _B_GPU, _BACKLOG, _SLACK = range(9)
_N_PARAMS = 9
# pdata columns: nominal best time alone, least device-seconds, weight, upward rank below
_ALONE, _WORK, _WEIGHT, _RANK = range(4)
N_PDATA = 4


@njit
def least_free_gpu(est):
    """The GPU (0-based) believed to free first; ties: lowest index (an idle one if any)."""
    g = 0
    for d in range(2, est.shape[0]):
        if est[d] < est[g + 1]:
            g = d - 1
    return g


@njit
def load_scale(t, pool, n_pool, est, pdata, backlog_s):
    """``s = B / (B + backlog_s)``, B the believed work per device queued and pooled (1 if backlog_s = 0)."""
    if backlog_s <= 0:
        return 1.0
    b = 0.0
    for d in range(est.shape[0]):
        b += est[d] - t
    for k in range(n_pool):
        b += pdata[pool[k], _WORK]
    b /= est.shape[0]
    return b / (b + backlog_s)


@njit
def split_of(i, t, cpu_free, gpu_free, X, params, grid0, s):
    """(f, believed finish, cpu_busy, gpu_busy) of task ``i``'s cheapest split (module docstring)."""
    return split_charged(i, t, cpu_free, gpu_free, X, params, grid0, s, params[_B_CPU], params[_B_GPU])


@njit
def split_times(f, c_s, g_s, launch, cpu_free, gpu_free):
    """CPU seconds, GPU seconds and believed finish of GPU share ``f`` of a task of ``c_s`` CPU
    and ``g_s`` GPU seconds, on the believed free times of the CPU and the GPU."""
    cb = (1.0 - f) * c_s
    gb = launch + f * g_s
    fin = gpu_free + gb
    if f < 1.0:
        fin = max(fin, cpu_free + cb)
    return cb, gb, fin


@njit
def split_charged(i, t, cpu_free, gpu_free, X, params, grid0, s, b_cpu, b_gpu):
    """``split_of`` with the work charge's weights given: the cheapest ``(finish - t) + s *
    (b_cpu * cpu_busy + b_gpu * gpu_busy)`` on the fraction grid (``params[grid0 + 1:]``)."""
    c_s = X[i, CPU_S]
    g_s = X[i, GPU_S]
    launch = params[_LAUNCH]
    best_f = 0.0
    best_fin = cpu_free + c_s
    best_c = c_s
    best_g = 0.0
    best = best_fin - t + s * b_cpu * c_s
    for k in range(grid0 + 1, params.shape[0]):
        f = params[k]
        if f > X[i, MAX_F]:
            break
        cb, gb, fin = split_times(f, c_s, g_s, launch, cpu_free, gpu_free)
        cost = fin - t + s * (b_cpu * cb + b_gpu * gb)
        if cost < best:
            best = cost
            best_f = f
            best_fin = fin
            best_c = cb
            best_g = gb
    return best_f, best_fin, best_c, best_g


@njit
def start_device(f, g, idle, t, cpu_free, gpu_s, slack):
    """The idle device the split starts on (CPU first), or -1 when both of its devices are busy
    or when a split would start on the GPU while its CPU part waits (believed free time
    ``cpu_free``) more than ``slack`` x its GPU part's ``gpu_s`` seconds."""
    if f < 1.0 and idle[0] == 1:
        return 0
    if f > 0.0 and idle[g + 1] == 1:
        if f < 1.0 and cpu_free - t > slack * gpu_s:
            return -1
        return g + 1
    return -1


@njit  # not disk-cached: numba would not see edits to callees in other files
def _list_late(t, pool, n_pool, idle, est, qlen, X, ready, pdata, params):
    g = least_free_gpu(est)
    s = load_scale(t, pool, n_pool, est, pdata, params[_BACKLOG])
    best_k = -1
    best_d = -1
    best_f = 0.0
    best_key = np.inf
    for k in range(n_pool):
        i = pool[k]
        f, fin, _, gb = split_of(i, t, est[0], est[g + 1], X, params, _N_PARAMS, s)
        d = start_device(f, g, idle, t, est[0], gb, params[_SLACK])
        if d < 0:
            continue
        key = (params[_W_FIN] * (fin - t) + params[_W_ALONE] * pdata[i, _ALONE] / pdata[i, _WEIGHT]
               - params[_W_RANK] * pdata[i, _RANK] - params[_AGING] * (t - ready[i]))
        if key < best_key:
            best_key = key
            best_k = k
            best_d = d
            best_f = f
    return best_k, best_d, best_f, g


def task_data(tasks, cluster, X, kappa: float) -> np.ndarray:
    """pdata of the late kernels: best time alone, least device-seconds, weight, upward rank below."""
    n = len(tasks)
    launch = np.full(n, cluster.launch_s)
    alone = best_alone_seconds(X[:, CPU_S], X[:, GPU_S], launch, X[:, MAX_F])
    m = X[:, MAX_F]
    work = np.minimum(X[:, CPU_S], (1.0 - m) * X[:, CPU_S] + m * (X[:, GPU_S] + cluster.launch_s))
    below = rank_below(tasks, alone)
    weight = (1.0 + tasks.priority.astype(np.float64)) * (1.0 + kappa * below / max(float(alone.mean()), 1e-12))
    out = np.empty((n, N_PDATA))
    out[:, _ALONE], out[:, _WORK], out[:, _WEIGHT], out[:, _RANK] = alone, work, weight, below
    return out


class LateList(Policy):
    """The list-scheduling kernel with every weight exposed (module docstring)."""

    name = "late_list"
    dispatch: ClassVar[str] = "late"
    pick_kernel: ClassVar[object] = _list_late

    def __init__(self, w_fin: float = 0.0, w_alone: float = 0.0, w_rank: float = 0.0, aging: float = 0.0,
                 beta_cpu: float = 0.0, beta_gpu: float = 0.0, backlog_s: float = 0.0, kappa: float = 0.0,
                 queue_slack: float = np.inf, fraction_step: float = 0.05,
                 reserved_order: str = "fifo") -> None:
        vals = dict(w_fin=w_fin, w_alone=w_alone, w_rank=w_rank, aging=aging, beta_cpu=beta_cpu, beta_gpu=beta_gpu,
                    backlog_s=backlog_s, kappa=kappa, queue_slack=queue_slack)
        for k, v in vals.items():
            if not v >= 0:
                raise ValueError(f"{type(self).__name__}.{k} must be >= 0, got {float(v)}")
        if reserved_order not in RESERVED:
            raise HybridschedError(f"{type(self).__name__}.reserved_order: {reserved_order!r} is not one of {list(RESERVED)}")
        self.w = vals
        self.grid = fraction_grid(fraction_step)
        self.reserved_order = reserved_order  # the late engine's order of a device's reserved parts

    def head(self, cluster) -> list[float]:
        w = self.w
        return [cluster.launch_s, w["w_fin"], w["w_alone"], w["w_rank"], w["aging"], w["beta_cpu"], w["beta_gpu"],
                w["backlog_s"], w["queue_slack"]]

    def prepare(self, tasks, cluster, X) -> None:
        self.n_gpus = cluster.n_gpus
        self._params = np.concatenate([np.asarray(self.head(cluster), dtype=np.float64), self.grid])
        self._pdata = task_data(tasks, cluster, X, self.w["kappa"])

    def kernel_data(self):
        return self._pdata, self._params


class SPTLate(LateList):
    """Shortest predicted processing time (best time alone) first."""

    name = "spt_late"

    def __init__(self, aging: float = 0.0, beta_cpu: float = 0.0, beta_gpu: float = 0.0, backlog_s: float = 0.0,
                 queue_slack: float = np.inf, fraction_step: float = 0.05,
                 reserved_order: str = "fifo") -> None:
        super().__init__(w_alone=1.0, aging=aging, beta_cpu=beta_cpu, beta_gpu=beta_gpu, backlog_s=backlog_s,
                         queue_slack=queue_slack, fraction_step=fraction_step,
                         reserved_order=reserved_order)


class WSPTLate(LateList):
    """Weighted SPT: best time alone divided by (1 + priority) * (1 + kappa * rank / mean alone)."""

    name = "wspt_late"

    def __init__(self, kappa: float = 0.5, aging: float = 0.0, beta_cpu: float = 0.0, beta_gpu: float = 0.0,
                 backlog_s: float = 0.0, queue_slack: float = np.inf, fraction_step: float = 0.05,
                 reserved_order: str = "fifo") -> None:
        super().__init__(w_alone=1.0, kappa=kappa, aging=aging, beta_cpu=beta_cpu, beta_gpu=beta_gpu,
                         backlog_s=backlog_s, queue_slack=queue_slack, fraction_step=fraction_step,
                         reserved_order=reserved_order)


class EFTLate(LateList):
    """Earliest believed finish among the waiting tasks that can start on an idle device."""

    name = "eft_late"

    def __init__(self, aging: float = 0.0, beta_cpu: float = 0.0, beta_gpu: float = 0.0, backlog_s: float = 0.0,
                 queue_slack: float = np.inf, fraction_step: float = 0.05,
                 reserved_order: str = "fifo") -> None:
        super().__init__(w_fin=1.0, aging=aging, beta_cpu=beta_cpu, beta_gpu=beta_gpu, backlog_s=backlog_s,
                         queue_slack=queue_slack, fraction_step=fraction_step,
                         reserved_order=reserved_order)


class HEFTLate(LateList):
    """HEFT's order: largest upward rank first (``w_rank``), traded against the believed finish (``w_fin``)."""

    name = "heft_late"

    def __init__(self, w_rank: float = 1.0, w_fin: float = 1.0, aging: float = 0.0, beta_cpu: float = 0.0,
                 beta_gpu: float = 0.0, backlog_s: float = 0.0, queue_slack: float = np.inf,
                 fraction_step: float = 0.05, reserved_order: str = "fifo") -> None:
        super().__init__(w_fin=w_fin, w_rank=w_rank, aging=aging, beta_cpu=beta_cpu, beta_gpu=beta_gpu,
                         backlog_s=backlog_s, queue_slack=queue_slack, fraction_step=fraction_step,
                         reserved_order=reserved_order)
