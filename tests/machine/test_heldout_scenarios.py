"""Held-out draws, the offered-load calibration and the load sweep (files under tmp_path)."""

import pandas as pd
import pytest

from hybridsched.errors import HybridschedError
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.policies.eft import EarliestFinishTime
from hybridsched.kinds.machine.policies.weighted import LoadAwareEFT
from hybridsched.kinds.machine.scenarios import (HELDOUT_RANGES, SweepSettings, heldout_workloads, load_sweep,
                                                 mean_work, rate_for_load, write_sweep)
from hybridsched.kinds.machine.workload import WorkloadSpec


def test_rate_is_proportional_to_load_and_matches_the_work():
    c = Cluster(n_gpus=2)
    spec = WorkloadSpec()
    r = rate_for_load(spec, c, 0.5)
    assert rate_for_load(spec, c, 1.0) == pytest.approx(2 * r)
    assert r * mean_work(spec, c) / c.n_devices == pytest.approx(0.5)
    with pytest.raises(HybridschedError, match="load"):
        rate_for_load(spec, c, 0.0)


def test_heldout_draws_are_seeded_and_inside_the_documented_range():
    c = Cluster()
    a = heldout_workloads(5, c)
    assert a == heldout_workloads(5, c)
    assert a != heldout_workloads(5, c, seed=1)
    lo_load, hi_load = HELDOUT_RANGES["load"]
    for w in a:
        assert lo_load <= w["offered_load"] <= hi_load
        spec = WorkloadSpec(**{k: v for k, v in w.items() if k not in ("name", "offered_load")})
        assert 0 <= spec.intensity_range[0] <= spec.intensity_range[1] <= 1
        assert spec.memory_range[1] <= c.max_task_memory_mb


def test_load_sweep_latency_grows_with_load_and_files_are_written(tmp_path):
    c = Cluster(n_gpus=2)
    pols = {"eft": EarliestFinishTime, "eft_load": LoadAwareEFT}
    table = load_sweep({"rate": 1.0}, c, pols, SweepSettings(loads=(0.3, 1.1), n_tasks=150, lp=True))
    assert set(table["policy"]) == set(pols) and len(table) == 4
    eft = table[table.policy == "eft"].set_index("offered_load")["mean_latency"]
    assert eft[1.1] > eft[0.3]
    assert (table["mean_latency"] >= table["bound"] * (1 - 1e-9)).all()
    files = write_sweep(table, tmp_path / "sweep", "test")
    assert [f.name for f in files] == ["load_sweep.csv", "load_sweep.md", "load_sweep.png"]
    assert all(f.stat().st_size > 0 for f in files)
    assert pd.read_csv(files[0]).shape == table.shape


def test_bad_sweep_settings_name_the_setting():
    with pytest.raises(HybridschedError, match="load_sweep.loads"):
        SweepSettings(loads=())
