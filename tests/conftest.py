"""Shared fixtures: a small cluster and small seeded workloads."""

from __future__ import annotations

import os

import numpy as np
import pytest

from hybridsched.kinds.machine.devices import Cluster
from hybridsched.kinds.machine.workload import TaskTable, WorkloadSpec, generate

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture
def cluster() -> Cluster:
    return Cluster(n_gpus=2)


def small_workload(n: int = 300, seed: int = 0, **spec) -> TaskTable:
    """A seeded synthetic workload of ``n`` tasks (spec keys as in WorkloadSpec)."""
    return generate(WorkloadSpec(**{"rate": 4.0, **spec}), n, np.random.default_rng(seed))


@pytest.fixture
def tasks() -> TaskTable:
    return small_workload()
