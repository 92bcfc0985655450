"""Simulator invariants on random small workloads (hypothesis): every policy, with noise,
with dependencies, with tasks too big for one GPU."""

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsched.kinds.machine.bounds import lower_bound
from hybridsched.kinds.machine.metrics import check_trace
from hybridsched.kinds.machine.policies.eft import EarliestFinishTime, Oracle
from tests.machine.sim_helpers import CASES as cases
from tests.machine.sim_helpers import classic_policies, parents_of, run, setup_case

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _setup(c):
    cluster, tasks, _ = setup_case(c)
    return cluster, tasks


@SETTINGS
@given(cases)
def test_every_policy_keeps_the_physical_invariants_and_the_bound_holds(c):
    cluster, tasks = _setup(c)
    real = cluster.sample_noise(len(tasks), np.random.default_rng(c["seed"]))
    lb = lower_bound(tasks, cluster, real)
    parents = parents_of(tasks)
    for policy in classic_policies():
        tr = run(tasks, cluster, policy, seed=c["seed"])
        assert sorted(tr["task_id"]) == sorted(tasks.task_id)  # no task lost or run twice
        assert check_trace(tr, cluster, parents) == [], policy.name
        makespan = tr["end"].max() - tasks.arrival.min()
        assert lb.makespan <= makespan * (1 + 1e-9), policy.name
        assert lb.mean_latency <= (tr["end"] - tr["arrival"]).mean() * (1 + 1e-9), policy.name


@SETTINGS
@given(cases)
def test_same_seed_gives_identical_results_and_compiled_matches_reference(c):
    cluster, tasks = _setup(c)
    for policy in classic_policies():
        a = run(tasks, cluster, policy, seed=c["seed"])
        pd.testing.assert_frame_equal(a, run(tasks, cluster, policy, seed=c["seed"]))
        pd.testing.assert_frame_equal(a, run(tasks, cluster, policy, seed=c["seed"], compiled=False))


@SETTINGS
@given(cases, st.sampled_from([0.05, 0.25, 0.5]))
def test_without_noise_oracle_and_eft_make_the_same_decisions(c, step):
    cluster, tasks = _setup({**c, "sigma": 0.0})
    a, b = run(tasks, cluster, EarliestFinishTime(step)), run(tasks, cluster, Oracle(step))
    np.testing.assert_array_equal(a["fraction"], b["fraction"])
    np.testing.assert_array_equal(a["gpu"], b["gpu"])
