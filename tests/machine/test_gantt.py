"""The Gantt plot of a trace window (the dashboard's view, as a file for evaluate)."""

from __future__ import annotations

import numpy as np

from hybridsched.kinds.machine.gantt import parts_in_window, plot_gantt
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.engine import simulate
from hybridsched.kinds.machine.policies.eft import EarliestFinishTime
from hybridsched.kinds.machine.workload import WorkloadSpec, generate


def test_parts_in_window_are_exactly_the_overlapping_parts_and_the_plot_is_written(tmp_path):
    cluster = Cluster(n_gpus=2)
    tasks = generate(WorkloadSpec(rate=4.0), 300, np.random.default_rng(0))
    tr = simulate(tasks, cluster, EarliestFinishTime(), cluster.sample_noise(300, np.random.default_rng(1))).to_frame()
    p = parts_in_window(tr, 20.0, 10.0)
    n_cpu = int(((tr.cpu_end >= 20) & (tr.cpu_start <= 30)).sum())
    n_gpu = int(((tr.gpu_end >= 20) & (tr.gpu_start <= 30)).sum())
    assert len(p) == n_cpu + n_gpu > 0
    assert set(p["device"]) <= {0, 1, 2}
    for d, g in p.groupby("device"):  # one device never runs two parts at once
        g = g.sort_values("start")
        assert (g["start"].to_numpy()[1:] >= g["end"].to_numpy()[:-1] - 1e-9).all()
    out = plot_gantt({"eft": tr, "eft2": tr.assign(policy="eft2")}, tmp_path / "g.png", window_s=10.0, start=20.0)
    assert out.stat().st_size > 5000 and not list(tmp_path.glob(".g.png*"))
