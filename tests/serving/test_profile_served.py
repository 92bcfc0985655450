"""The profile as served: each batch also timed with ``lanes`` concurrent workers, sigma per
variant, single-lane rows kept; the simulator reads the served rows (issue #24). Timings from
this shared machine are not asserted, only the table's shape and the selection."""

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
