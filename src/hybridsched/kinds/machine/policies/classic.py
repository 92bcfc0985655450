"""Baselines that ignore run-time estimates: round robin, random and greedy."""

from __future__ import annotations

import numpy as np
from numba import njit

from hybridsched.kinds.machine.policies.base import Policy
from hybridsched.kinds.machine.engine import INTENSITY


@njit(cache=True)
def least_loaded_gpu(free, t):
    """The GPU that frees up first (ties: lowest index); devices free before t count as free at t."""
    g = 0
    best = max(free[1], t)
    for d in range(2, free.shape[0]):
        f = max(free[d], t)
        if f < best:
            best = f
            g = d - 1
    return g


@njit(cache=True)
def _round_robin(i, t, est, true_free, X, pdata, params):
    d = i % est.shape[0]  # device 0 is the CPU
    if d == 0:
        return 0, 0.0
    return d - 1, 1.0


@njit(cache=True)
def _from_table(i, t, est, true_free, X, pdata, params):
    return int(pdata[i, 0]), pdata[i, 1]


@njit(cache=True)
def _greedy(i, t, est, true_free, X, pdata, params):
    return least_loaded_gpu(est, t), X[i, INTENSITY]


class RoundRobin(Policy):
    """Task k goes to device k mod (n_gpus + 1), whole (CPU, GPU 0, GPU 1, ...)."""

    name = "round_robin"
    role = "baseline"
    kernel = _round_robin


class Random(Policy):
    """A uniformly random device; on a GPU, a fraction drawn from ``gpu_fractions``."""

    name = "random"
    role = "baseline"
    kernel = _from_table

    def __init__(self, seed: int = 0, gpu_fractions: tuple[float, ...] = (1.0,)) -> None:
        self.seed = seed
        self.gpu_fractions = np.asarray(gpu_fractions, dtype=np.float64)

    def prepare(self, tasks, cluster, X) -> None:
        rng = np.random.default_rng(self.seed)
        n = len(tasks)
        device = rng.integers(0, cluster.n_devices, n)
        frac = rng.choice(self.gpu_fractions, n)
        self._table = np.column_stack([np.maximum(device - 1, 0), np.where(device == 0, 0.0, frac)]).astype(np.float64)

    def kernel_data(self):
        return self._table, np.zeros(0)


class Greedy(Policy):
    """The least-loaded GPU (by believed free time) with fraction = compute intensity."""

    name = "greedy"
    role = "baseline"
    kernel = _greedy
    streamable = True
