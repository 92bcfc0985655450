"""Cost-weighted earliest finish: load-aware EFT, rank-aware EFT (HEFT's upward rank) and
StarPU's dmda rule, three parameterisations of one compiled kernel.

For each split ``f`` on the fraction grid (on the GPU that frees up first) the kernel
scores

    cost = alpha * w_i * (finish - t)                      # how long this task takes
         + s * (beta_cpu * cpu_busy + beta_gpu * gpu_busy)  # the delay it imposes behind it
         + beta_transfer * transfer + gamma * energy         # dmda's transfer and energy terms

and takes the cheapest. ``finish`` is from the believed device free times, as in ``eft``.
The device-seconds a decision occupies push every later task back by as much, so
``beta_*`` charges a decision for the queue it builds; ``s = B / (B + backlog_s)`` scales
that charge with the believed mean backlog ``B`` (so an idle machine is scheduled by
finish time alone, a saturated one by work) or is 1 with ``backlog_s = 0``. ``w_i`` is 1,
or for DAG tasks ``1 + kappa * (upward rank after i) / mean best time`` so that a task
many others wait on is given its earliest finish.

HEFT proper (upward-rank *ordering* with *insertion* into idle gaps) does not fit the
engine: tasks are decided in ready order and each device runs a FIFO queue with no gaps
to insert into. What the rank can still do here is weight how much each task's own
finish matters against the work it costs, which is what ``RankEFT`` does.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hybridsched.kinds.machine.bounds import best_alone_seconds
from hybridsched.devices import Realization
from hybridsched.kinds.machine.engine import CPU_S, GPU_S, MAX_F, MEMORY
from hybridsched.kinds.machine.policies.base import Policy, fraction_grid
from hybridsched.kinds.machine.policies.classic import least_loaded_gpu
from hybridsched.kinds.machine.policies.eft import true_times

# params layout (then the fraction grid)
_LAUNCH, _ALPHA, _B_CPU, _B_GPU, _B_TR, _GAMMA, _W_CPU, _W_GPU, _RATE, _BACKLOG = range(10)
_N_PARAMS = 10


@njit
def candidate(f, t, c_s, g_s, cpu_free, gpu_free, launch):
    """(cpu_busy, gpu_busy, believed finish) of split ``f`` on the believed free times."""
    cpu_busy = (1.0 - f) * c_s
    gpu_busy = launch + f * g_s if f > 0.0 else 0.0
    fin = t
    if f < 1.0:
        fin = cpu_free + cpu_busy
    if f > 0.0:
        fin = max(fin, gpu_free + gpu_busy)
    return cpu_busy, gpu_busy, fin


@njit
def weighted_cost(params, w, s, t, f, tr, cpu_busy, gpu_busy, fin):
    """The weighted-EFT cost of one candidate (``params`` in this module's layout)."""
    return (w * (fin - t) + s * (params[_B_CPU] * cpu_busy + params[_B_GPU] * gpu_busy)
            + params[_B_TR] * f * tr + params[_GAMMA] * (params[_W_CPU] * cpu_busy + params[_W_GPU] * gpu_busy))


@njit
def _choose(i, t, free, c_s, g_s, launch, w, X, params):
    """(gpu, split) of least weighted cost for task ``i`` on device free times ``free``."""
    g = least_loaded_gpu(free, t)
    cpu_free = max(t, free[0])
    gpu_free = max(t, free[g + 1])
    s = 1.0
    if params[_BACKLOG] > 0:
        b = 0.0
        for d in range(free.shape[0]):
            b += max(free[d] - t, 0.0)
        b /= free.shape[0]
        s = b / (b + params[_BACKLOG])
    w = params[_ALPHA] * w
    tr = X[i, MEMORY] / params[_RATE]
    best_f = 0.0
    best = np.inf
    for k in range(_N_PARAMS, params.shape[0]):
        f = params[k]
        if f > X[i, MAX_F]:
            break
        cpu_busy, gpu_busy, fin = candidate(f, t, c_s, g_s, cpu_free, gpu_free, launch)
        cost = weighted_cost(params, w, s, t, f, tr, cpu_busy, gpu_busy, fin)
        if cost < best:
            best = cost
            best_f = f
    return g, best_f


@njit  # not disk-cached: numba would not see edits to callees in other files
def _weighted(i, t, est, true_free, X, pdata, params):
    return _choose(i, t, est, X[i, CPU_S], X[i, GPU_S], params[_LAUNCH], pdata[i, 0], X, params)


@njit  # not disk-cached: numba would not see edits to callees in other files
def _weighted_oracle(i, t, est, true_free, X, pdata, params):
    # pdata: w_i, true CPU seconds, true GPU seconds, factor on the launch overhead
    return _choose(i, t, true_free, pdata[i, 1], pdata[i, 2], params[_LAUNCH] * pdata[i, 3], pdata[i, 0], X, params)


class WeightedEFT(Policy):
    """The shared kernel with every weight exposed (see the module docstring)."""

    name = "weighted_eft"
    kernel = _weighted

    def __init__(self, alpha: float = 1.0, beta_cpu: float = 0.0, beta_gpu: float = 0.0,
                 beta_transfer: float = 0.0, gamma: float = 0.0, backlog_s: float = 0.0, kappa: float = 0.0,
                 fraction_step: float = 0.05) -> None:
        for k, v in dict(alpha=alpha, beta_cpu=beta_cpu, beta_gpu=beta_gpu, beta_transfer=beta_transfer,
                         gamma=gamma, backlog_s=backlog_s, kappa=kappa).items():
            if not v >= 0:
                raise ValueError(f"{type(self).__name__}.{k} must be >= 0, got {float(v)}")
        self.weights = (alpha, beta_cpu, beta_gpu, beta_transfer, gamma)
        self.backlog_s = backlog_s
        self.kappa = kappa
        self.grid = fraction_grid(fraction_step)

    def prepare(self, tasks, cluster, X) -> None:
        a, bc, bg, bt, ga = self.weights
        head = [cluster.launch_s, a, bc, bg, bt, ga, cluster.cpu_busy_w, cluster.gpu_busy_w,
                cluster.transfer_mb_per_s, self.backlog_s]
        self._params = np.concatenate([head, self.grid])
        self._pdata = self._finish_weights(tasks, cluster, X)[:, None]

    def _finish_weights(self, tasks, cluster, X) -> np.ndarray:
        """w_i: 1 + kappa * (the longest chain of best-alone times below i) / mean best time."""
        n = len(tasks)
        if self.kappa == 0 or not tasks.has_deps:
            return np.ones(n)
        d = best_alone_seconds(X[:, CPU_S], X[:, GPU_S], np.full(n, cluster.launch_s), X[:, MAX_F])
        below = np.zeros(n)
        child_ptr, child_idx = tasks.children_csr()
        for i in range(n - 1, -1, -1):  # children come after their parents in arrival order
            kids = child_idx[child_ptr[i]: child_ptr[i + 1]]
            if len(kids):
                below[i] = float(np.max(below[kids] + d[kids]))
        return 1.0 + self.kappa * below / max(float(d.mean()), 1e-12)

    def kernel_data(self):
        return self._pdata, self._params


class LoadAwareEFT(WeightedEFT):
    """EFT that charges each decision for the device-seconds it takes from the queue behind."""

    name = "eft_load"

    def __init__(self, beta_cpu: float = 1.0, beta_gpu: float = 0.5, backlog_s: float = 2.0,
                 fraction_step: float = 0.05) -> None:
        super().__init__(beta_cpu=beta_cpu, beta_gpu=beta_gpu, backlog_s=backlog_s, fraction_step=fraction_step)


class RankEFT(WeightedEFT):
    """Load-aware EFT whose finish-time weight grows with the task's upward rank (DAGs)."""

    name = "eft_rank"

    def __init__(self, beta_cpu: float = 1.0, beta_gpu: float = 0.5, backlog_s: float = 2.0, kappa: float = 0.5,
                 fraction_step: float = 0.05) -> None:
        super().__init__(beta_cpu=beta_cpu, beta_gpu=beta_gpu, backlog_s=backlog_s, kappa=kappa,
                         fraction_step=fraction_step)


class DMDA(WeightedEFT):
    """StarPU's dmda: alpha * expected end + beta * transfer time + gamma * energy (J)."""

    name = "dmda"

    def __init__(self, alpha: float = 1.0, beta: float = 1.0, gamma: float = 0.001, fraction_step: float = 0.05) -> None:
        super().__init__(alpha=alpha, beta_transfer=beta, gamma=gamma, fraction_step=fraction_step)


class OracleRankEFT(RankEFT):
    """eft_rank with perfect knowledge (true run times and device free times), as ``oracle``
    is to ``eft``: how much of eft_rank's gap is the noise it cannot see."""

    name = "oracle_rank"
    kernel = _weighted_oracle
    clairvoyant = True
    role = "clairvoyant"

    def prepare(self, tasks, cluster, X) -> None:
        super().prepare(tasks, cluster, X)
        self._X = X

    def reveal(self, realization: Realization) -> None:
        self._pdata = np.column_stack([self._pdata[:, 0], true_times(self._X, realization)])
