"""The LP lower bound: valid against every policy (hypothesis), tight where it can be, and
seeing contention where the solo bound cannot."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.bounds import lower_bound
from hybridsched.kinds.machine.bounds_lp import LPSettings
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.policies.weighted import DMDA, LoadAwareEFT, RankEFT
from hybridsched.kinds.machine.workload import from_frame
from tests.conftest import small_workload
from tests.machine.sim_helpers import classic_policies, run

cases = st.fixed_dictionaries({
    "n": st.integers(1, 25),
    "n_gpus": st.integers(1, 3),
    "sigma": st.sampled_from([0.0, 0.3]),
    "dag": st.sampled_from([0, 4, 9]),
    "rate": st.floats(0.5, 40.0),
    "mem_hi": st.sampled_from([4000.0, 30000.0]),  # 30 GB: most tasks capped well below f = 1
    "rho": st.sampled_from([1.0, 4.0]),
    "cuts": st.sampled_from([0, 1, 2, 4]),
    "seed": st.integers(0, 10_000),
})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases)
def test_lp_bound_is_below_every_policy_with_noise_memory_caps_and_dependencies(c):
    cluster = Cluster(n_gpus=c["n_gpus"], noise_sigma=c["sigma"], gpu_mem_mb=8000.0)
    tasks = small_workload(c["n"], c["seed"], rate=c["rate"], dag_job_size=c["dag"], dag_max_parents=3,
                           memory_range=(50.0, c["mem_hi"]))
    real = cluster.sample_noise(len(tasks), np.random.default_rng(c["seed"]))
    lb = lower_bound(tasks, cluster, real, LPSettings(rho=c["rho"], piece_cuts=c["cuts"]))
    # the LP includes the solo bound (less its safety margin, relative to the completion times)
    assert lb.mean_latency_lp >= lb.mean_latency_solo - 1e-5 * (1 + tasks.arrival.mean())
    assert lb.mean_latency == max(lb.mean_latency_lp, lb.mean_latency_solo)
    policies = classic_policies() + [LoadAwareEFT(), RankEFT(kappa=1.0), DMDA(gamma=0.01, fraction_step=0.25)]
    for policy in policies:  # the oracle (clairvoyant) is among the classic ones
        tr = run(tasks, cluster, policy, seed=c["seed"])
        assert lb.mean_latency_lp <= (tr["end"] - tr["arrival"]).mean() * (1 + 1e-9) + 1e-12, policy.name


def _queue_of_identical_cpu_tasks(n: int) -> tuple:
    c = Cluster(n_gpus=1, noise_sigma=0.0, gpu_mem_mb=1e-6)  # the GPU holds nothing: one machine
    t = from_frame(pd.DataFrame({"task_id": range(n), "arrival": [0.0] * n, "size": [50.0] * n,
                                 "intensity": [0.5] * n, "memory_mb": [100.0] * n}))
    return c, t, c.sample_noise(n, np.random.default_rng(0))


def test_lp_sees_the_queue_that_the_solo_bound_ignores():
    # 10 one-second tasks at once on one usable device: the best mean latency is (1 + ... + 10) / 10 = 5.5 s
    # (on the default grid, rho 2 with 2 piece cuts, 4.76 s: ten tasks released together are the
    # coarse grid's worst case, where rho 4 does better)
    c, t, real = _queue_of_identical_cpu_tasks(10)
    lb = lower_bound(t, c, real, LPSettings(rho=4.0))
    assert lb.mean_latency_solo == pytest.approx(1.0)
    assert 0.9 * 5.5 <= lb.mean_latency_lp <= 5.5
    assert lb.mean_latency == lb.mean_latency_lp
    assert 0.85 * 5.5 <= lower_bound(t, c, real).mean_latency_lp <= 5.5


def test_finer_grid_is_never_looser_by_much_and_is_still_valid():
    c, t, real = _queue_of_identical_cpu_tasks(10)
    coarse = lower_bound(t, c, real, LPSettings(delta=1.0, rho=1.0)).mean_latency_lp
    fine = lower_bound(t, c, real, LPSettings(delta=0.05, rho=8.0)).mean_latency_lp
    assert coarse <= 5.5 and fine <= 5.5
    assert fine >= coarse - 1e-6


def test_piece_cuts_only_tighten_and_stay_below_the_optimum():
    # each cut set holds the previous one's tangent points (u; u/2, u; u/4 .. u), and the cuts
    # only add non-negative terms, so the bound never falls; 5.5 s is the optimum here
    c, t, real = _queue_of_identical_cpu_tasks(10)
    for rho in (1.0, 4.0):
        got = [lower_bound(t, c, real, LPSettings(rho=rho, piece_cuts=k)).mean_latency_lp for k in (0, 1, 2, 4)]
        # equal optima may differ within the interior point's stopping gap (1e-8 relative)
        assert all(b >= a * (1 - 1e-7) for a, b in zip(got, got[1:])) and got[-1] <= 5.5
        if rho == 1.0:  # coarse pieces: the cuts give back part of what counting work at a piece's start lost
            assert got[2] > got[0] + 0.05


def test_bad_lp_settings_are_one_line_errors():
    with pytest.raises(HybridschedError, match="delta"):
        LPSettings(delta=0.0)
    with pytest.raises(HybridschedError, match="rho"):
        LPSettings(rho=0.5)
    for bad in (-1, 9, 1.5):
        with pytest.raises(HybridschedError, match="piece_cuts"):
            LPSettings(piece_cuts=bad)


def test_lp_can_be_skipped():
    c, t, real = _queue_of_identical_cpu_tasks(3)
    lb = lower_bound(t, c, real, lp=None)
    assert np.isnan(lb.mean_latency_lp) and lb.mean_latency == lb.mean_latency_solo
