"""The arrival engine's fast paths keep every number: the compiled task matrix equals
the cost model's numpy columns to the bit (the schedules themselves: test_golden_schedules.py)."""

from __future__ import annotations

import numpy as np
import pytest

from hybridsched.devices import Cluster
from hybridsched.kinds.machine.engine import ARRIVAL, CPU_S, GPU_S, INTENSITY, MAX_F, MEMORY, SIZE, task_matrix
from hybridsched.kinds.machine.workload import WorkloadSpec, generate


@pytest.mark.parametrize("cluster", [Cluster(), Cluster(gpu_speedup_exponent=1.5, gpu_max_speedup=7, cpu_gflops=33.3),
                                     Cluster(gpu_speedup_exponent=3, transfer_mb_per_s=999.0, gpu_mem_mb=1e-13)])
def test_task_matrix_equals_the_cost_models_numpy_columns_to_the_bit(cluster):
    tasks = generate(WorkloadSpec(rate=5.0, memory_range=(1e-15, 30000.0)), 5000, np.random.default_rng(4))
    X = task_matrix(tasks, cluster)
    want = {SIZE: tasks.size, INTENSITY: tasks.intensity, MEMORY: tasks.memory_mb, ARRIVAL: tasks.arrival,
            CPU_S: cluster.cpu_seconds(tasks.size), GPU_S: cluster.gpu_seconds(tasks.size, tasks.intensity, tasks.memory_mb),
            MAX_F: cluster.max_fraction(tasks.memory_mb)}
    for col, v in want.items():
        assert X[:, col].tobytes() == np.asarray(v, dtype=np.float64).tobytes(), col


# --- hybrid_ml's incremental ridge (ridge_update: incremental) ------------------------------------
# Documented tolerance (docs/benchmarks.md#hybrid_ml): the incremental corrections agree with the
# full refit's to 1e-9 relative; a schedule keeps >= 99.9 % of its decisions and its mean latency
# within 0.1 % (on every fixed workload so far the schedules are byte-identical, which
# test_golden_schedules.py checks for the default policies).
from hybridsched.kinds.machine.online import (ridge_refit, ridge_refit_stats, ridge_state_size,  # noqa: E402
                                              ridge_stats_size, window_add_tracked)
from hybridsched.kinds.machine.online import SlidingWindow  # noqa: E402


@pytest.mark.parametrize("seed", range(6))
def test_incremental_ridge_equals_the_full_refit_within_the_tolerance(seed):
    rng = np.random.default_rng(seed)
    p, size = int(rng.integers(1, 11)), int(rng.integers(5, 300))
    # features on the scales hybrid_ml sees (sizes ~1e2, memory ~1e4, with offsets), one constant
    scales, offsets = 10.0 ** rng.uniform(-2, 4, p), 10.0 ** rng.uniform(-1, 4, p)
    w = SlidingWindow(size, p)
    stats = np.zeros(ridge_stats_size(p))
    inc, full = np.zeros(ridge_state_size(p)), np.zeros(ridge_state_size(p))
    for step in range(60):
        k = int(rng.integers(0, size + 20))  # some batches overrun the whole window
        F = rng.normal(size=(k, p)) * scales + offsets
        F[:, 0] = 3.0
        r = rng.normal(size=k)
        window_add_tracked(w.F, w.y, w.meta, F, r, stats)
        alpha, min_obs = float(rng.choice([0.1, 10.0])), 3
        ridge_refit_stats(inc, stats, w.F, w.y, w.n, alpha, min_obs)
        ridge_refit(full, *w.data(), alpha, min_obs)
        assert inc[0] == full[0]
        if full[0]:
            np.testing.assert_allclose(inc[1:2 + p], full[1:2 + p], rtol=1e-9, atol=1e-12)  # intercept, mean
            np.testing.assert_allclose(inc[2 + p:], full[2 + p:], rtol=1e-9, atol=1e-9 * np.abs(full[2 + p:]).max())


def test_incremental_ridge_schedule_stays_within_the_tolerance_of_the_full_refit():
    from hybridsched.kinds.machine.policies.hybrid_ml import HybridML
    from hybridsched.kinds.machine.sim import simulate
    from tests.machine import golden_schedules as G

    cluster = Cluster()
    model = G._model(cluster)
    rng = np.random.default_rng(11)
    tasks = generate(WorkloadSpec(rate=6.5), 20_000, rng)
    real = cluster.sample_noise(len(tasks), rng)
    a = simulate(tasks, cluster, HybridML(model=model, ridge_update="refit"), real)
    b = simulate(tasks, cluster, HybridML(model=model, ridge_update="incremental"), real)
    same = (a.gpu == b.gpu) & (a.fraction == b.fraction)
    assert same.mean() >= 0.999
    la, lb = (a.end - a.arrival).mean(), (b.end - b.arrival).mean()
    assert abs(lb - la) <= 1e-3 * la


def test_a_kernel_that_allocates_runs_in_the_reference_counting_loop():
    """The engine's fast loop has no reference counting; a policy kernel that allocates runs in
    the counting compilation of the same loop instead, with the Python reference's schedule."""
    from numba import njit

    from hybridsched.kinds.machine.policies.base import Policy
    from hybridsched.kinds.machine.sim import simulate

    @njit
    def _allocating(i, t, est, true_free, X, pdata, params):
        w = np.zeros(est.shape[0])  # an array per decision
        w[:] = est
        return int(np.argmin(w[1:])), 0.5

    class Allocating(Policy):
        name = "allocating"
        kernel = _allocating

    cluster = Cluster()
    rng = np.random.default_rng(2)
    tasks = generate(WorkloadSpec(rate=6.0, dag_job_size=8), 500, rng)
    real = cluster.sample_noise(len(tasks), rng)
    a = simulate(tasks, cluster, Allocating(), real)
    b = simulate(tasks, cluster, Allocating(), real, compiled=False)
    assert a.to_frame().equals(b.to_frame())
    assert simulate(tasks, cluster, Allocating(), real).to_frame().equals(a.to_frame())  # the remembered way
