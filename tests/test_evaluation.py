"""The shared comparison and report writing used by every kind."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from hybridsched import evaluation
from hybridsched.evaluation import compare, write_report


def test_compare_derives_the_same_columns_for_any_kind() -> None:
    s = {"round_robin": {"makespan": 10.0, "mean_latency": 4.0}, "eft": {"makespan": 8.0, "mean_latency": 2.0},
         "oracle": {"makespan": 5.0, "mean_latency": 1.0}}
    t = compare(s, {"makespan": 5.0, "mean_latency": 0.5})
    assert t.loc["eft", "mean_latency_vs_bound"] == 4.0 and t.loc["eft", "makespan_vs_bound"] == 1.6
    assert t.loc["eft", "latency_speedup_vs_round_robin"] == 2.0 and t.loc["eft", "speedup_vs_round_robin"] == 1.25
    assert t.loc["eft", "mean_latency_vs_oracle"] == 2.0
    # a kind without makespan or without the baseline gets only the columns it can have
    t2 = compare({"fifo": {"mean_latency": 3.0}, "edf": {"mean_latency": 1.5}}, {"mean_latency": 1.0}, baseline="fifo")
    assert list(t2.columns) == ["mean_latency", "mean_latency_vs_bound", "latency_speedup_vs_fifo"]


def test_an_interrupted_report_leaves_the_old_one_whole(tmp_path, monkeypatch) -> None:
    out = tmp_path / "metrics"
    trace = pd.DataFrame({"arrival": [0.0, 1.0], "end": [1.0, 3.0]})
    table = pd.DataFrame({"energy_j": [1.0], "cost_usd": [0.1]}, index=pd.Index(["eft"], name="policy"))
    util = pd.DataFrame({"policy_device": ["eft/cpu"], "utilisation": [0.5]})
    (out / "plots").mkdir(parents=True)
    (out / "summary.json").write_text('{"old": true}')

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("hybridsched.plots.save_comparison_pngs", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_report(out, {"new": True}, table, {"eft": trace}, util)
    assert json.loads((out / "summary.json").read_text()) == {"old": True}
    assert not (out / "policies.csv").exists() and not list(out.glob(".staging*"))
    monkeypatch.setattr("hybridsched.plots.save_comparison_pngs", lambda *a, **k: [])
    write_report(out, {"new": True}, table, {"eft": trace}, util)
    assert json.loads((out / "summary.json").read_text()) == {"new": True} and (out / "policies.csv").exists()
    assert evaluation.latency_quantiles({"eft": trace}).shape == (101, 3)
