"""The profile as served: each batch also timed with ``lanes`` concurrent workers, sigma per
variant, single-lane rows kept; the simulator reads the served rows. Timings depend on the
machine and its load, so they are not asserted, only the table's shape and the selection."""

from __future__ import annotations

import json

import numpy as np

from hybridsched.kinds.serving.latency import read_table
from hybridsched.kinds.serving.profile import ProfileSettings, profile_models
from hybridsched.kinds.serving.settings import ServingSettings


def test_profile_with_two_lanes_keeps_both_and_the_simulator_reads_the_served_rows(tmp_path):
    res = profile_models(ProfileSettings(models=("resnet18",), backends=("torch",), measure_batches=(1, 2),
                                         fit_batches=(4,), warmup=0, repeats=2, lanes=2))
    rows = res["table"]
    by = {(r["lanes"], r["batch"]): r for r in rows}
    assert set(by) == {(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (2, 4)}
    assert by[(2, 1)]["source"] == "served" and by[(1, 1)]["source"] == "measured" and by[(2, 4)]["fitted"]
    assert res["lanes"] == 2 and set(res["sigma"]) == {"resnet18/torch"} and res["sigma"]["resnet18/torch"] >= 0
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(res))
    s = ServingSettings(models={"resnet18": 80.0}, backends=("torch",), max_batch=4, profile_path=str(path))
    t = read_table(s)
    assert (t["lanes"] == 2).all() and len(t) == 3
    assert np.allclose(t.sort_values("batch")["latency_ms"], [by[(2, b)]["latency_ms"] for b in (1, 2, 4)])


def test_fit_batches_are_measured_while_the_budget_lasts():
    """budget_s 0: only measure_batches are timed; a large budget times the fit batch as well
    (single-lane and served rows, ``fitted: false``); no timing asserted."""
    base = dict(models=("resnet18",), backends=("onnx",), measure_batches=(1, 2), fit_batches=(3,), warmup=0,
                repeats=1, lanes=2)
    none = {(r["lanes"], r["batch"]): r["fitted"] for r in profile_models(ProfileSettings(**base))["table"]}
    assert none == {(1, 1): False, (1, 2): False, (1, 3): True, (2, 1): False, (2, 2): False, (2, 3): True}
    rich = profile_models(ProfileSettings(**base, budget_s=1e6))["table"]
    assert {(r["lanes"], r["batch"]): r["fitted"] for r in rich} == {k: False for k in none}
    assert {r["source"] for r in rich if r["lanes"] == 2} == {"served"}


def test_idle_ms_idles_before_every_timed_call_and_outside_the_timing(monkeypatch):
    """``idle_ms``: one sleep of that length before each timed call (single-lane and served), none
    before a warm-up call, and the sleep is not part of the measured time."""
    import pytest

    from hybridsched.errors import HybridschedError
    from hybridsched.kinds.serving import profile

    slept: list[float] = []
    real_sleep = profile.time.sleep

    def sleep(s: float) -> None:
        if s >= 0.5:  # the profile's idles; _PeakRSS's 1 ms polls pass through
            slept.append(s)
        real_sleep(min(s, 1e-3))

    monkeypatch.setattr(profile.time, "sleep", sleep)
    res = profile_models(ProfileSettings(models=("resnet18",), backends=("onnx",), measure_batches=(1, 2),
                                         fit_batches=(), warmup=1, repeats=2, lanes=2, idle_ms=500.0))
    # 2 batches x (2 single-lane calls + 2 lanes x 2 served calls)
    assert slept == [0.5] * 12
    assert all(r["latency_ms"] < 500 for r in res["table"])  # the idle is not timed
    with pytest.raises(HybridschedError, match="serving.profile.idle_ms: must be >= 0, got -1"):
        ProfileSettings.from_dict({"idle_ms": -1})


def test_an_onnx_runner_without_a_workdir_leaves_no_file(tmp_path, monkeypatch):
    """Without a workdir the exported ONNX file lives in a temp dir only until the InferenceSession has
    read it; the runner still serves."""
    import tempfile

    from hybridsched.kinds.serving.profile import Runner

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    runner = Runner("resnet18", "onnx")
    assert runner(1) > 0
    assert not list(tmp_path.glob("serving_onnx_*"))
