"""Earliest finish time (HEFT's rule for independent tasks) and its clairvoyant twin, the oracle."""

from __future__ import annotations

import numpy as np
from numba import njit

from hybridsched.devices import Realization
from hybridsched.kinds.machine.policies.base import Policy, fraction_grid
from hybridsched.kinds.machine.policies.classic import least_loaded_gpu
from hybridsched.kinds.machine.engine import CPU_S, GPU_S, MAX_F


@njit(cache=True)
def best_split(cpu_s, gpu_s, launch_s, cpu_free, gpu_free, grid, max_f):
    """The grid fraction with the earliest finish of both parts, and that finish time."""
    best_f = 0.0
    best = cpu_free + cpu_s
    for k in range(1, grid.shape[0]):
        f = grid[k]
        if f > max_f:
            break
        fin = gpu_free + launch_s + f * gpu_s
        if f < 1.0:
            fin = max(fin, cpu_free + (1.0 - f) * cpu_s)
        if fin < best:
            best = fin
            best_f = f
    return best_f, best


@njit  # not disk-cached: numba would not see edits to callees in other files
def _eft(i, t, est, true_free, X, pdata, params):
    g = least_loaded_gpu(est, t)
    f, _ = best_split(X[i, CPU_S], X[i, GPU_S], params[0], est[0], est[g + 1], params[1:], X[i, MAX_F])
    return g, f


@njit  # not disk-cached: numba would not see edits to callees in other files
def _oracle(i, t, est, true_free, X, pdata, params):
    g = least_loaded_gpu(true_free, t)
    cpu_free = max(t, true_free[0])
    gpu_free = max(t, true_free[g + 1])
    f, _ = best_split(pdata[i, 0], pdata[i, 1], params[0] * pdata[i, 2], cpu_free, gpu_free, params[1:], X[i, MAX_F])
    return g, f


class EarliestFinishTime(Policy):
    """Earliest predicted finish over GPUs and a fraction grid, from the nominal cost model."""

    name = "eft"
    kernel = _eft
    streamable = True

    def __init__(self, fraction_step: float = 0.05) -> None:
        self.grid = fraction_grid(fraction_step)

    def prepare(self, tasks, cluster, X) -> None:
        self._params = np.concatenate([[cluster.launch_s], self.grid])

    def kernel_data(self):
        return np.zeros((0, 0)), self._params


def true_times(X: np.ndarray, realization: Realization) -> np.ndarray:
    """Per task: actual CPU time, actual GPU compute+transfer, factor on the launch overhead."""
    r = realization
    return np.column_stack([X[:, CPU_S] * r.cpu_factor, X[:, GPU_S] * r.gpu_factor, r.gpu_factor])


class Oracle(EarliestFinishTime):
    """EFT with perfect knowledge: true run times and true device free times."""

    name = "oracle"
    kernel = _oracle
    clairvoyant = True
    role = "clairvoyant"

    def prepare(self, tasks, cluster, X) -> None:
        super().prepare(tasks, cluster, X)
        self._X = X

    def reveal(self, realization: Realization) -> None:
        self._truth = true_times(self._X, realization)

    def kernel_data(self):
        return self._truth, self._params
