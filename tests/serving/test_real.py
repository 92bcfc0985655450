"""Real mode at a tiny scale: ResNet-18 (torch) on 2 CPU lanes for 2 s of arrivals, against
the simulator on the same stream (real.py)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from hybridsched.errors import HybridschedError
from hybridsched.kinds import get_kind
from hybridsched.kinds.base import Run
from hybridsched.kinds.serving import real
from hybridsched.kinds.serving.metrics import check_trace
from hybridsched.kinds.serving.real import TARGET_GAP, calibrated_table, compare_traces
from hybridsched.kinds.serving.settings import ServingSettings
from tests.serving.conftest import dense, serving_cfg

pytest.importorskip("onnxruntime")


@pytest.fixture
def tiny(tmp_path):
    cfg = serving_cfg(tmp_path, models={"resnet18": 80.0}, backends=["torch"], max_batch=4)
    # a profile as served of the order ResNet-18 takes on one CPU thread (alone and with 2 lanes) and
    # its sigma: the profile stage's format (the test does not profile: time)
    rows = [{"model": "resnet18", "backend": "torch", "precision": "fp32", "batch": b, "latency_ms": ms * f,
             "lanes": lanes, "fitted": False} for lanes, f in ((1, 1.0), (2, 1.4)) for b, ms in ((1, 60.0), (2, 110.0), (4, 210.0))]
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"table": rows, "lanes": 2, "sigma": {"resnet18/torch": 0.12}}))
    cfg["serving"].update(latency_table="measured", profile_path=str(profile))
    cfg["serving"]["predictor"]["use"] = "table"
    cfg["serving"]["real"].update(duration_s=2.0, rate=2.0, lanes=2, policies=["fifo", "edf", "predictive"])
    cfg["workload"]["mix"] = {"models": {"resnet18": 1.0}, "classes": {"interactive": 0.5, "batch": 0.5}}
    return cfg


def test_real_stream_runs_the_models_and_compares(tiny, tmp_path):
    kind = get_kind("serving")
    run = Run(tiny, tracking=False)
    table = kind.sim_vs_real(run)
    out = tmp_path / "metrics" / "plots" / "kind"
    md = (out / "sim_vs_real.md").read_text()
    assert (out / "sim_vs_real.csv").exists() and "sim_p95_gap" in md and "alone_p95_gap" in md
    assert "overlap_p95_gap" in md and "dyn_p95_gap" in md
    ov = pd.read_csv(out / "service_vs_overlap.csv")
    assert set(ov["policy"]) == {"fifo", "edf", "predictive"} and (ov["service_over_alone"] > 0).all()
    assert "The pipeline's simulator (serving.contention 'overlap') is row `overlap`" in md
    assert "{'resnet18/torch': 0.12}" in md and "Load average" in md  # the sigma the simulator used, the load
    assert "P50/P95 figures within 15%" in md
    bk = pd.read_csv(out / "sim_vs_real_backends.csv")  # per class and backend against the pipeline's row
    assert set(bk["policy"]) == {"fifo", "edf", "predictive"} and set(bk["backend"]) == {"torch"}
    assert "Per class and backend, measured against `overlap`" in md
    assert set(table["policy"]) == {"fifo", "edf", "predictive"} and "all" in set(table["class"])
    for name in ("fifo", "edf", "predictive"):
        tr = pd.read_parquet(out / f"real_{name}.parquet")
        assert len(tr) == 4 and (tr["batch_id"] >= (-1 if name == "predictive" else 0)).all()  # fifo/edf drop none
        tr = tr[tr["batch_id"] >= 0]
        assert (tr["start"] >= tr["arrival"]).all() and (tr["end"] > tr["start"]).all()
        # the model really ran: ResNet-18 on one thread takes tens of ms, not microseconds
        assert tr["service"].min() > 0.005
        batches = tr.groupby("batch_id").agg(start=("start", "first"), end=("end", "first"), lane=("lane", "first"),
                                             group=("group", "first"), samples=("size", "sum")).reset_index()
        batches["tokens"] = 80.0 + 4.0 * batches["samples"]
        s = kind.settings_of(run)
        assert check_trace(tr, batches.assign(first=0, count=0), s) == []
    row = table[(table["policy"] == "fifo") & (table["class"] == "all")].iloc[0]
    assert row["real_p50_ms"] > 0 and row["sim_p50_ms"] > 0
    assert np.isclose(row["sim_p50_gap"], (row["sim_p50_ms"] - row["real_p50_ms"]) / row["real_p50_ms"])
    assert row["cal_p50_ms"] > 0 and "cal_p95_gap" in table
    # the same measurements compared again (replay): the real columns as measured, the simulations rerun
    from hybridsched.kinds.serving.real import sim_vs_real

    again = sim_vs_real(run, tmp_path / "again", replay=out)
    real_cols = [c for c in table if c.startswith("real_")]
    pd.testing.assert_frame_equal(again[real_cols], table[real_cols])
    pd.testing.assert_frame_equal(again, table)  # the simulations are seeded: the same figures
    with pytest.raises(HybridschedError, match="no real trace of policy"):
        sim_vs_real(run, tmp_path / "again", replay=tmp_path)


def test_compare_traces_gap_and_target():
    def trace(lat):
        return pd.DataFrame({"cls": ["interactive"] * len(lat), "dropped": False, "latency": lat,
                             "service": lat, "met_slo": True})

    t = compare_traces({"fifo": trace([0.1, 0.2, 0.3])}, {"sim": {"fifo": trace([0.11, 0.22, 0.33])}}, ("interactive",))
    assert np.allclose(t["sim_p50_gap"], 0.1) and t["sim_within"].all()
    t = compare_traces({"fifo": trace([0.1, 0.2, 0.3])}, {"sim": {"fifo": trace([0.2, 0.4, 0.6])}}, ("interactive",))
    assert np.allclose(t["sim_p95_gap"], 1.0) and not t["sim_within"].any() and TARGET_GAP == 0.15


def test_calibrated_table_scales_each_variant_by_its_measured_ratio():
    s = ServingSettings(models={"resnet18": 80.0}, backends=("torch", "onnx"), max_batch=4)
    lat = dense(s)
    # variant 0 (torch) ran twice as slow as the table, variant 1 (onnx) as the table says
    b = pd.DataFrame({"group": [0, 1, 2], "samples": [1, 2, 1], "start": 0.0,
                      "end": [2 * lat[0, 1], 2 * lat[0, 2], lat[1, 1]]})
    cal, sigma, factors = calibrated_table(lat, [b], s)
    assert sigma == 0.0  # each measured batch sits exactly on its variant's median ratio
    assert np.allclose(cal[0], 2 * lat[0], equal_nan=True) and np.allclose(cal[1], lat[1], equal_nan=True)
    assert factors == {"resnet18/torch": 2.0, "resnet18/onnx": 1.0}


def test_service_vs_overlap_bins_each_batch_by_its_overlap():
    from hybridsched.kinds.serving.real import service_vs_overlap

    s = ServingSettings(models={"resnet18": 80.0}, backends=("torch",), max_batch=4)
    alone = np.full((1, 5), 0.1)
    served = np.full((1, 5), 0.2)
    # lane 0: [0, 0.3] and [1, 1.1]; lane 1: [0.2, 0.5] -> overlaps 1/3, 1/3, none
    req = pd.DataFrame({"batch_id": [0, 1, 2], "group": 0, "size": 1, "lane": [0, 1, 0],
                        "start": [0.0, 0.2, 1.0], "end": [0.3, 0.5, 1.1]})
    t = service_vs_overlap({"fifo": req}, s, alone, served).set_index("overlap")
    assert t.loc["25-50 %", "batches"] == 2 and np.isclose(t.loc["25-50 %", "service_over_alone"], 3.0)
    assert t.loc["none (< 0.1 %)", "batches"] == 1 and np.isclose(t.loc["none (< 0.1 %)", "service_over_alone"], 1.0)
    assert np.isclose(t["served_over_alone"], 2.0).all()


class _InstantLanes(real.Lanes):
    """The real mode's lanes without models: each job reports at once; ``t0`` is None until serve
    starts the clock."""

    def __init__(self, n_lanes: int) -> None:
        self._start(n_lanes)
        self.t0 = None

    def _infer(self, lane: int, v: int, s: int) -> None:
        pass


@pytest.mark.parametrize("policy", ["fifo", "predictive"])
def test_serve_compiles_its_decision_step_before_the_clock_starts(tiny, monkeypatch, policy):
    """The first real run once waited ~1.6 s for numba to compile the decision step while its first
    requests had arrived: serve makes one untimed decision before time 0."""
    from hybridsched.kinds.serving import engine as E
    from hybridsched.kinds.serving.latency import load_latency, with_served_model

    run = Run(tiny, tracking=False)
    s = with_served_model(get_kind("serving").settings_of(run))
    lat, _ = load_latency(s)
    reqs = real.real_stream(tiny["workload"], s, tiny["serving"]["real"], lat[:, 1])
    lanes = _InstantLanes(2)
    clock_at_call = []
    decide = E.decide

    def spy(*args):
        clock_at_call.append(lanes.t0)
        return decide(*args)

    monkeypatch.setattr(E, "decide", spy)
    try:
        tr = real.serve(reqs, s, run.build_policies()[policy], lat, lanes)
    finally:
        lanes.close()
    assert clock_at_call[0] is None and all(t is not None for t in clock_at_call[1:])
    assert (tr.requests["batch_id"] >= -1).all() and len(tr.requests) == len(reqs)


def test_by_backend_splits_a_two_mode_class():
    """Half the requests at 40 ms, half at 60 ms: the class's P50 sits between the modes, while each
    backend's own P50 is exact; a sim 5 % slower on one backend shows as that backend's gap only."""
    from hybridsched.kinds.serving.real import by_backend

    def frame(fast, slow):
        lat = np.r_[np.full(50, fast), np.full(50, slow)]
        return pd.DataFrame({"cls": "interactive", "backend": ["onnx"] * 50 + ["torch"] * 50, "latency": lat,
                             "dropped": False, "service": lat, "met_slo": True})

    t = by_backend({"fifo": frame(0.040, 0.060)}, {"fifo": frame(0.040, 0.063)}).set_index("backend")
    assert np.isclose(t.loc["onnx", "real_p50_ms"], 40) and np.isclose(t.loc["torch", "real_p50_ms"], 60)
    assert np.isclose(t.loc["onnx", "p50_gap"], 0) and np.isclose(t.loc["torch", "p50_gap"], 0.05)
    assert (t["n"] == 50).all()
