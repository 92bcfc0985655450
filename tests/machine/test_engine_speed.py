"""The issue-23 speed work on the arrival engine keeps every number: the compiled task matrix equals
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
