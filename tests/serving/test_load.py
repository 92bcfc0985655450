"""Offered load counts the work: request sizes and the batching curve at the window."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hybridsched.kinds.serving.engine import simulate
from hybridsched.kinds.serving.metrics import summarize
from hybridsched.kinds.serving.policies import Predictive
from hybridsched.kinds.serving.settings import ServingSettings
from hybridsched.kinds.serving.workload import generate_stream, load_report, offered_rate, stream_load, to_requests
from tests.serving.conftest import dense

MIX = {"models": {"resnet18": 0.4, "resnet50": 0.4, "vit_b16": 0.2}, "classes": {"interactive": 0.7, "batch": 0.3}}


def _proportional(s: ServingSettings) -> np.ndarray:
    """A table without batching gain: b samples take b x the batch-1 latency."""
    lat = dense(s)
    return lat[:, [1]] * np.arange(lat.shape[1])[None, :]


def test_load_counts_request_sizes():
    s = ServingSettings(window_ms=10.0)
    lat = _proportional(s)  # per-sample cost is flat, so only the sizes matter
    w = {"rate": None, "load": 1.0, "mix": MIX}
    r1 = offered_rate(w, s, lat)
    r3 = offered_rate({**w, "request_size": 3}, s, lat)
    assert r3 == pytest.approx(r1 / 3, rel=1e-6)  # three samples per request: a third of the requests


def test_load_one_is_capacity_in_samples():
    s = ServingSettings(models={"resnet18": 80.0, "resnet50": 160.0}, backends=("torch",), lanes=2, window_ms=0.0)
    lat = np.zeros((2, s.max_batch + 1))
    lat[0, 1:] = 0.1 * np.arange(1, s.max_batch + 1)  # no batching gain
    lat[1, 1:] = 0.3 * np.arange(1, s.max_batch + 1)
    w = {"rate": None, "load": 1.0, "mix": {"models": {"resnet18": 0.5, "resnet50": 0.5}}, "request_size": 2}
    # 2 lanes / (2 samples x 0.2 s mean) = 5 req/s; window 0: no batching
    assert offered_rate(w, s, lat) == pytest.approx(5.0)
    assert offered_rate(w, s, lat[:, 1]) == pytest.approx(5.0)  # the batch-1 column alone: the same here


def test_batching_curve_at_the_window_raises_the_rate():
    lat = dense(ServingSettings())  # a + 0.4 a b: batching pays
    w = {"rate": None, "load": 1.0, "mix": MIX, "request_size": 4}
    no_window = offered_rate(w, ServingSettings(window_ms=0.0), lat)
    wide = offered_rate(w, ServingSettings(window_ms=500.0), lat)
    assert wide > 1.05 * no_window  # per-sample cost a (0.6 / b + 0.4): 0.55 a at b = 4, less in bigger batches
    # requests of 4 samples on this table cost lat[v, 4] / 4 = 0.55 x batch 1 per sample without a window
    b1_rate = offered_rate({**w, "request_size": 1}, ServingSettings(window_ms=0.0), lat)
    assert no_window == pytest.approx(b1_rate / (4 * 0.55), rel=1e-6)


@pytest.mark.parametrize("size", [1, 4])
def test_generated_stream_offers_the_requested_load(size):
    s = ServingSettings()
    lat = dense(s)
    w = {"rate": None, "load": 0.9, "mix": MIX, "request_size": size}
    df = generate_stream(w, s, 4000, 0, 0, lat)
    rate = offered_rate(w, s, lat)
    assert stream_load(df, rate, s, lat) == pytest.approx(0.9, rel=0.05)
    rep = load_report(w, s, lat, {"test": df})
    assert rep["load_warnings"] == [] and rep["rate"] == rate


def test_same_load_same_pressure_whatever_the_request_size():
    # the point of counting samples: load 0.8 with 4-sample requests is not 4x overload
    s = ServingSettings()
    lat = dense(s)
    att = {}
    for size in (1, 4):
        w = {"rate": None, "load": 0.8, "mix": MIX, "request_size": size,
             "slo": {"rule": "factor", "interactive": 10, "batch": 50}}
        reqs = to_requests(generate_stream(w, s, 1500, 2, 0, lat), s)
        tr = simulate(reqs, s, lat, Predictive())
        att[size] = summarize(tr.requests, tr.batches, s)["slo_attainment"]
    assert att[4] > 0.8 and att[1] > 0.8, att


def test_replay_whose_part_has_larger_prompts_warns(tmp_path):
    # first half of the trace: 1-sample prompts; second half: 8-sample prompts
    n = 400
    trace = pd.DataFrame({"TIMESTAMP": np.arange(n) * 0.1,
                          "ContextTokens": np.r_[np.full(n // 2, 500), np.full(n // 2, 8000)]})
    path = tmp_path / "trace.csv"
    trace.to_csv(path, index=False)
    s = ServingSettings()
    lat = dense(s)
    w = {"rate": None, "load": 1.0, "mix": MIX, "arrival": "replay", "trace_path": str(path),
         "size_column": "ContextTokens", "n_train": n // 2}
    train = generate_stream(w, s, n // 2 - 1, 0, 0, lat)
    test = generate_stream(w, s, n // 2 - 1, 1, 1, lat)
    assert train["size"].max() == 1 and test["size"].min() == 8
    rep = load_report(w, s, lat, {"train": train, "test": test})
    assert rep["offered_load"]["train"] < 0.9 < 1.1 < rep["offered_load"]["test"]
    assert len(rep["load_warnings"]) == 2
    assert "the test stream offers load" in rep["load_warnings"][1] and "requested 1" in rep["load_warnings"][1]
    # a set rate has no requested load to compare with: the offered loads are still reported
    rep = load_report({**w, "rate": 5.0}, s, lat, {"test": test})
    assert rep["load"] is None and rep["load_warnings"] == [] and rep["offered_load"]["test"] > 0
