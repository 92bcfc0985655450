"""Helpers shared by the simulator tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from hybridsched.devices import Cluster
from hybridsched.kinds.machine.policies.classic import Greedy, Random, RoundRobin
from hybridsched.kinds.machine.policies.eft import EarliestFinishTime, Oracle
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.workload import TaskTable
from tests.conftest import small_workload

# random small workloads for the engines' hypothesis tests: noise, DAGs, tasks too big for one
# GPU, priorities, 1-3 GPUs
CASES = st.fixed_dictionaries({
    "n": st.integers(1, 40),
    "n_gpus": st.integers(1, 3),
    "sigma": st.sampled_from([0.0, 0.3]),
    "dag": st.sampled_from([0, 4, 9]),
    "rate": st.floats(0.2, 30.0),
    "mem_hi": st.sampled_from([4000.0, 20000.0]),
    "priorities": st.sampled_from([1, 3]),
    "seed": st.integers(0, 10_000),
})


def setup_case(c):
    """The cluster, tasks and noise of one case of ``CASES``."""
    cluster = Cluster(n_gpus=c["n_gpus"], noise_sigma=c["sigma"], gpu_mem_mb=8000.0)
    tasks = small_workload(c["n"], c["seed"], rate=c["rate"], dag_job_size=c["dag"], dag_max_parents=3,
                           memory_range=(50.0, c["mem_hi"]), priority_levels=c["priorities"])
    return cluster, tasks, cluster.sample_noise(c["n"], np.random.default_rng(c["seed"]))


def classic_policies():
    return [RoundRobin(), Random(seed=3, gpu_fractions=(0.5, 1.0)), Greedy(), EarliestFinishTime(), Oracle()]


def run(tasks: TaskTable, cluster: Cluster, policy, seed: int = 0, compiled: bool = True):
    """Simulate with a noise realisation drawn from ``seed``; returns the trace frame."""
    real = cluster.sample_noise(len(tasks), np.random.default_rng(seed))
    return simulate(tasks, cluster, policy, real, compiled=compiled).to_frame()


def parents_of(tasks: TaskTable) -> dict[int, list[int]]:
    return {int(tasks.task_id[i]): tasks.task_id[tasks.parents(i)].tolist()
            for i in range(len(tasks)) if len(tasks.parents(i))}


def assert_schedule_valid(tr, tasks: TaskTable, cluster: Cluster, parents: dict[int, list[int]], lb, name: str = "") -> None:
    """The engines' invariants on a trace frame: each task once; devices, memory and dependencies
    (``check_trace``); GPU shares within memory; the lower bounds ``lb`` (makespan, LP and the
    larger of LP and solo mean latency) at or below it."""
    from hybridsched.kinds.machine.metrics import check_trace

    assert sorted(tr["task_id"]) == sorted(tasks.task_id), name
    assert check_trace(tr, cluster, parents) == [], name
    assert (tr["fraction"] <= cluster.max_fraction(tasks.memory_mb) + 1e-12).all(), name
    assert lb.makespan <= (tr["end"].max() - tasks.arrival.min()) * (1 + 1e-9), name
    mean = (tr["end"] - tr["arrival"]).mean()
    assert lb.mean_latency_lp <= mean * (1 + 1e-9), name
    assert lb.mean_latency <= mean * (1 + 1e-9), name
