"""Per-variant service noise: the simulator draws each variant's batches with the
sigma the profile as served measured for it (``serving.sigma_source: profile``, the default),
or one ``serving.service_sigma`` for all (``fixed``, and for tables that measured none)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from hybridsched.errors import HybridschedError
from hybridsched.kinds.serving.bounds import slo_bound
from hybridsched.kinds.serving.engine import noise_table, service_noise, simulate
from hybridsched.kinds.serving.latency import with_variant_sigma
from hybridsched.kinds.serving.metrics import summarize
from hybridsched.kinds.serving.policies import FIFO, BatchAware, PriorityEDF, Predictive
from hybridsched.kinds.serving.settings import ServingSettings
from hybridsched.kinds.serving.workload import generate_stream, to_requests
from tests.serving.conftest import dense, linear_table

SIX = ServingSettings(max_batch=8)  # 3 models x 2 backends


def _profile(tmp_path, sigma: dict[str, float]) -> str:
    rows = linear_table(SIX).assign(lanes=2).to_dict(orient="records")
    p = tmp_path / "profile.json"
    p.write_text(json.dumps({"table": rows, "lanes": 2, "sigma": sigma}))
    return str(p)


def test_one_sigma_keeps_the_old_draws_exactly():
    s = ServingSettings(service_sigma=0.07)
    noise, col = noise_table(s, 500, 3)
    old = np.exp(np.random.default_rng(3).normal(-0.07**2 / 2, 0.07, 500))
    assert noise.shape == (500, 1) and (col == 0).all() and np.array_equal(noise[:, 0], old)
    assert np.array_equal(service_noise(s, 500, 3), old)


def test_per_variant_columns_share_one_draw_and_the_bound_gets_the_smallest():
    s = replace(SIX, variant_sigma=(0.0, 0.3, 0.3, 0.1, 0.05, 0.0))
    noise, col = noise_table(s, 20000, 1)
    assert noise.shape == (20000, 4) and list(col) == [0, 3, 3, 2, 1, 0]  # columns: sorted distinct sigmas
    assert (noise[:, 0] == 1.0).all()
    logs = np.log(noise[:, col[1]])
    assert abs(logs.std() - 0.3) < 0.01 and abs(noise[:, col[1]].mean() - 1.0) < 0.01  # mean 1
    assert np.corrcoef(np.log(noise[:, 2]), np.log(noise[:, 3]))[0, 1] > 0.999  # one z per batch
    assert np.array_equal(service_noise(s, 20000, 1), noise.min(axis=1))


def test_with_variant_sigma_reads_the_profile_and_falls_back(tmp_path):
    path = _profile(tmp_path, {"resnet18/torch": 0.2, "vit_b16/onnx": 0.4})
    s = replace(SIX, profile_path=path, service_sigma=0.05)
    got = with_variant_sigma(s)
    names = ["/".join(got.variant_names(v)[:2]) for v in range(got.n_variants)]
    assert dict(zip(names, got.sigmas(), strict=True)) == {"resnet18/torch": 0.2, "resnet18/onnx": 0.05,
                                                           "resnet50/torch": 0.05, "resnet50/onnx": 0.05,
                                                           "vit_b16/torch": 0.05, "vit_b16/onnx": 0.4}
    assert with_variant_sigma(replace(s, sigma_source="fixed")).variant_sigma == ()
    csv = tmp_path / "t.csv"
    linear_table(SIX).to_csv(csv, index=False)
    assert with_variant_sigma(replace(s, latency_table=str(csv))).variant_sigma == ()  # a csv measured none
    (tmp_path / "bad.json").write_text(json.dumps({"table": [], "sigma": {"resnet18/torch": -1}}))
    with pytest.raises(HybridschedError, match="sigma of 'resnet18/torch'"):
        with_variant_sigma(replace(s, profile_path=str(tmp_path / "bad.json")))


def test_settings_refuse_a_bad_source_and_variant_sigma_is_no_config_key():
    with pytest.raises(HybridschedError, match="serving.sigma_source"):
        ServingSettings(sigma_source="measured")
    with pytest.raises(HybridschedError, match="variant_sigma"):
        ServingSettings.from_dict({"variant_sigma": [0.1]})
    with pytest.raises(HybridschedError, match="variant_sigma"):
        replace(SIX, variant_sigma=(0.1, 0.2))  # not one per variant


def test_a_variant_without_spread_runs_exactly_its_table_time_and_the_bound_holds():
    s = replace(SIX, variant_sigma=(0.0, 0.0, 0.4, 0.4, 0.2, 0.2))
    lat = dense(s)
    w = {"rate": None, "load": 1.4, "slo": {"rule": "factor", "interactive": 4, "batch": 30},
         "mix": {"models": {"resnet18": 0.4, "resnet50": 0.4, "vit_b16": 0.2}, "classes": {"interactive": 0.7, "batch": 0.3},
                 "backends": {"torch": 0.5, "onnx": 0.5}}}
    reqs = to_requests(generate_stream(w, s, 1200, 2, 1, lat), s)
    bound = slo_bound(reqs, s, lat, noise=service_noise(s, len(reqs), 0))
    for p in (FIFO(), PriorityEDF(), BatchAware(), Predictive()):
        tr = simulate(reqs, s, lat, p, noise_seed=0)
        b = tr.batches
        v = (b["group"] // len(s.classes)).to_numpy()
        ratio = (b["end"] - b["start"]).to_numpy() / lat[v, b["samples"].to_numpy()]
        assert np.allclose(ratio[v < 2], 1.0)  # resnet18: sigma 0
        assert ratio[v >= 2].std() > 0.05
        assert summarize(tr.requests, tr.batches, s)["slo_attainment"] <= bound["slo_attainment"] + 1e-12


def test_contention_as_it_happens_takes_the_single_lane_time_only_when_the_other_lanes_are_idle():
    """``serving.contention: start`` (real.py's `dyn` comparison): a batch that starts with every
    other lane idle runs the single-lane table, one that starts beside a busy lane the served
    table; with single-lane rows equal to the table the trace is the plain one."""
    s = replace(SIX, service_sigma=0.0, lanes=2)
    lat = dense(s)
    w = {"rate": None, "load": 0.9, "slo": {"rule": "factor", "interactive": 5, "batch": 50},
         "mix": {"models": {"resnet18": 1.0}, "classes": {"interactive": 1.0}, "backends": {"torch": 1.0}}}
    reqs = to_requests(generate_stream(w, s, 400, 4, 1, lat), s)
    start = replace(s, contention="start", alone_lat=lat / 2, served_lanes=2)
    tr = simulate(reqs, start, lat, FIFO()).batches.sort_values("start")
    ratio = ((tr["end"] - tr["start"]) / lat[0, tr["samples"].to_numpy()]).to_numpy()
    starts, ends, lane = tr["start"].to_numpy(), tr["end"].to_numpy(), tr["lane"].to_numpy()
    other_busy = np.array([((lane != lane[i]) & (starts < starts[i]) & (ends > starts[i])).any() for i in range(len(tr))])
    assert other_busy.any() and (~other_busy).any()
    assert np.allclose(ratio[other_busy], 1.0) and np.allclose(ratio[~other_busy], 0.5)
    plain = simulate(reqs, s, lat, FIFO()).requests
    import pandas as pd

    pd.testing.assert_frame_equal(simulate(reqs, replace(start, alone_lat=lat), lat, FIFO()).requests, plain)
    pd.testing.assert_frame_equal(simulate(reqs, replace(start, contention="served"), lat, FIFO()).requests, plain)
