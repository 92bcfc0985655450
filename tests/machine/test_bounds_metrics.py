"""Lower bounds, trace metrics, and the trace checker (which must catch broken traces)."""

import numpy as np
import pandas as pd
import pytest

from hybridsched.kinds.machine.bounds import best_alone_seconds, lower_bound
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.metrics import check_trace, summarize
from hybridsched.kinds.machine.policies.eft import Oracle
from hybridsched.kinds.machine.workload import from_frame
from tests.conftest import small_workload
from tests.machine.sim_helpers import run


def test_best_alone_balances_the_two_parts():
    # C = 4, G = 1, L = 0: both parts end together at f = 0.8, after 0.8 s
    assert best_alone_seconds(np.array([4.0]), np.array([1.0]), np.array([0.0]), np.array([1.0]))[0] == pytest.approx(0.8)
    # the GPU cannot hold more than 20%: (1 - 0.2) * 4 = 3.2
    assert best_alone_seconds(np.array([4.0]), np.array([1.0]), np.array([0.0]), np.array([0.2]))[0] == pytest.approx(3.2)
    # launch overhead larger than the CPU time: CPU only
    assert best_alone_seconds(np.array([0.1]), np.array([1.0]), np.array([0.5]), np.array([1.0]))[0] == pytest.approx(0.1)


def test_single_task_bound_is_tight_for_a_continuous_oracle():
    c = Cluster(n_gpus=1, noise_sigma=0.0, launch_s=0.0)
    t = from_frame(pd.DataFrame({"task_id": [0], "arrival": [0.0], "size": [200.0], "intensity": [1.0], "memory_mb": [100.0]}))
    lb = lower_bound(t, c, c.sample_noise(1, np.random.default_rng(0)))
    tr = run(t, c, Oracle(fraction_step=0.001))
    assert lb.makespan == pytest.approx(tr["end"].max(), rel=2e-3)
    assert lb.mean_latency == pytest.approx(lb.makespan)


def test_bound_counts_the_critical_path_of_dependencies():
    c = Cluster(n_gpus=4, noise_sigma=0.0, gpu_mem_mb=1e-6)  # GPUs hold nothing: CPU only
    base = pd.DataFrame({"task_id": [0, 1, 2], "arrival": [0.0, 0.0, 0.0], "size": [100.0] * 3,
                         "intensity": [0.0] * 3, "memory_mb": [1e3] * 3})
    chain = from_frame(base.assign(deps=["", "0", "1"]))
    free = from_frame(base)
    real = c.sample_noise(3, np.random.default_rng(0))
    assert lower_bound(chain, c, real).mean_latency_solo == pytest.approx(4.0)  # (2 + 4 + 6) / 3
    assert lower_bound(free, c, real).mean_latency_solo == pytest.approx(2.0)
    # the three free tasks still queue on the one usable device: the LP sees most of (2 + 4 + 6) / 3
    assert 0.85 * 4.0 <= lower_bound(free, c, real).mean_latency <= 4.0


def test_summary_metrics_on_a_hand_made_trace():
    c = Cluster(n_gpus=2, cpu_busy_w=30, cpu_idle_w=10, gpu_busy_w=50, gpu_idle_w=10)
    tr = pd.DataFrame({"task_id": [0, 1], "policy": "x", "arrival": [0.0, 0.0], "ready": [0.0, 0.0],
                       "gpu": [-1, 0], "fraction": [0.0, 1.0], "cpu_start": [0.0, np.nan], "cpu_end": [2.0, np.nan],
                       "gpu_start": [np.nan, 0.0], "gpu_end": [np.nan, 4.0], "gpu_mem_mb": [0.0, 10.0],
                       "end": [2.0, 4.0], "wait": [0.0, 0.0], "energy_j": [60.0, 200.0]})
    s = summarize(tr, c)
    assert s["makespan"] == 4.0 and s["mean_latency"] == 3.0
    assert s["cpu_utilisation"] == 0.5 and s["gpu0_utilisation"] == 1.0 and s["gpu1_utilisation"] == 0.0
    assert s["gpu_load_balance"] == 0.5
    # busy 60 + 200 J, idle: CPU 2 s * 10 W + GPU1 4 s * 10 W
    assert s["energy_j"] == pytest.approx(320.0)
    assert check_trace(tr, c) == []


def test_checker_catches_overlap_memory_lost_tasks_and_broken_dependencies(cluster):
    w = small_workload(60, dag_job_size=6)
    tr = run(w, cluster, Oracle())
    parents = {int(w.task_id[i]): w.task_id[w.parents(i)].tolist() for i in range(len(w)) if len(w.parents(i))}
    assert check_trace(tr, cluster, parents) == []
    on_cpu = tr.index[tr["cpu_start"].notna()][:2]
    bad = tr.copy()
    bad.loc[on_cpu[1], "cpu_start"] = bad.loc[on_cpu[0], "cpu_start"]
    assert "cpu runs two parts at once" in check_trace(bad, cluster)
    assert "GPU memory over capacity" in check_trace(tr.assign(gpu_mem_mb=cluster.gpu_mem_mb + 1), cluster)
    assert "a task appears more than once" in check_trace(pd.concat([tr, tr.iloc[:1]]), cluster)
    assert check_trace(tr.drop(columns="gpu_end"), cluster) == ["not a trace: missing column(s) gpu_end"]
    child = next(iter(parents))
    early = tr.copy()
    early.loc[early["task_id"] == child, "ready"] = 0.0
    assert any("before a parent ended" in p for p in check_trace(early, cluster, parents))
