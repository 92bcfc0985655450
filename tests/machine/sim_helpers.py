"""Helpers shared by the simulator tests."""

from __future__ import annotations

import numpy as np

from hybridsched.devices import Cluster
from hybridsched.kinds.machine.policies.classic import Greedy, Random, RoundRobin
from hybridsched.kinds.machine.policies.eft import EarliestFinishTime, Oracle
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.workload import TaskTable


def classic_policies():
    return [RoundRobin(), Random(seed=3, gpu_fractions=(0.5, 1.0)), Greedy(), EarliestFinishTime(), Oracle()]


def run(tasks: TaskTable, cluster: Cluster, policy, seed: int = 0, compiled: bool = True):
    """Simulate with a noise realisation drawn from ``seed``; returns the trace frame."""
    real = cluster.sample_noise(len(tasks), np.random.default_rng(seed))
    return simulate(tasks, cluster, policy, real, compiled=compiled).to_frame()


def parents_of(tasks: TaskTable) -> dict[int, list[int]]:
    return {int(tasks.task_id[i]): tasks.task_id[tasks.parents(i)].tolist()
            for i in range(len(tasks)) if len(tasks.parents(i))}
