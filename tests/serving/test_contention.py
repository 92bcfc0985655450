"""The contention model (``serving.contention``, engine.share_lanes): processor sharing between
the profile's single-lane and served rows, exact on hand-computed cases; every model keeps a
batch at or above the fastest rows the bounds charge (hypothesis); the profile's single-lane
rows reach the settings (latency.with_contention), a csv table leaves every model the table."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from hybridsched.errors import HybridschedError
from hybridsched.kinds.serving.engine import CONTENTION, noise_table, simulate
from hybridsched.kinds.serving.latency import with_contention, with_served_model
from hybridsched.kinds.serving.metrics import check_trace
from hybridsched.kinds.serving.policies import FIFO, Dynamic, Predictive, PriorityEDF
from hybridsched.kinds.serving.settings import ServingSettings
from hybridsched.kinds.serving.workload import to_requests
from tests.serving.conftest import dense, linear_table
from tests.serving.test_engine import scenarios

ONE = ServingSettings(models={"resnet18": 80.0}, backends=("torch", "onnx"), max_batch=4, window_ms=0.0,
                      service_sigma=0.0, lanes=2)


def _two(arrivals, backends, slo=10.0):
    """One request per arrival (size 1, interactive), each of its own backend."""
    n = len(arrivals)
    return pd.DataFrame({"request_id": range(n), "arrival": arrivals, "model": "resnet18", "cls": "interactive",
                         "backend": backends, "precision": "fp32", "size": 1, "slo_s": slo})


def _ends(df, s, lat):
    b = simulate(to_requests(df, s), s, lat, FIFO()).batches.sort_values("start")
    return b["start"].to_numpy(), b["end"].to_numpy()


def test_overlap_is_processor_sharing_by_hand():
    lat = dense(ONE)  # served table
    alone = lat / 2  # served = 2 x single-lane: f = 2 for every batch
    s = replace(ONE, contention="overlap", alone_lat=alone, served_lanes=2)
    a, b = alone[0, 1], alone[1, 1]  # torch, onnx work alone (a > b: onnx is 20 % faster)
    # both start at 0: each runs at half speed while the other runs; onnx ends at 2b, then torch
    # has a - b left at full speed
    start, end = _ends(_two([0.0, 0.0], ["torch", "onnx"]), s, lat)
    assert np.allclose(start, 0.0)
    assert np.allclose(sorted(end), [2 * b, 2 * b + (a - b)])
    # the second starts when the first has done t0 of its work: the first had a - t0 left,
    # both at half speed until the onnx one ends (its work b at half speed: 2b), then full speed
    t0 = 0.1 * a  # a - t0 = 0.9 a > b = 0.8 a
    start, end = _ends(_two([0.0, t0], ["torch", "onnx"]), s, lat)
    assert np.allclose(start, [0.0, t0])
    assert np.isclose(end[1], t0 + 2 * b)  # a - t0 > b: the torch batch outlasts it
    assert np.isclose(end[0], t0 + 2 * b + (a - t0 - b))  # the later start moved the first batch's end
    # no overlap: the single-lane time
    start, end = _ends(_two([0.0, 2 * a], ["torch", "onnx"]), s, lat)
    assert np.allclose(end - start, [a, b])


def test_the_other_models_by_hand():
    lat = dense(ONE)
    alone = lat / 2
    df = _two([0.0, 1e-6, 5.0], ["torch", "onnx", "torch"])
    kw = {"alone_lat": alone, "served_lanes": 2}
    for mode, first_two, last in (("served", lat, lat), ("alone", alone, alone), ("start", None, alone)):
        start, end = _ends(df, replace(ONE, contention=mode, **kw), lat)
        dur = end - start
        if first_two is not None:
            assert np.allclose(dur[:2], [first_two[0, 1], first_two[1, 1]]), mode
        else:  # start: the first alone (nothing busy), the second beside it: served
            assert np.allclose(dur[:2], [alone[0, 1], lat[1, 1]])
        assert np.isclose(dur[2], last[0, 1]), mode  # alone at t = 5 (served under `served`)


def test_overlap_with_f_one_is_the_table_and_no_single_lane_rows_change_nothing():
    s = ServingSettings(max_batch=8, lanes=3)
    lat = dense(s)
    from hybridsched.kinds.serving.workload import generate_stream

    reqs = to_requests(generate_stream({"rate": 40.0}, s, 400, 2, 0, lat[:, 1]), s)
    plain = simulate(reqs, replace(s, contention="served"), lat, Dynamic()).requests
    same = simulate(reqs, replace(s, contention="overlap", alone_lat=lat.copy(), served_lanes=3), lat, Dynamic())
    pd.testing.assert_series_equal(same.requests["met_slo"], plain["met_slo"])
    assert np.allclose(same.requests["end"].fillna(-1), plain["end"].fillna(-1), rtol=1e-9)
    for mode in CONTENTION:  # without single-lane rows every model is the table, bit for bit
        pd.testing.assert_frame_equal(simulate(reqs, replace(s, contention=mode), lat, Dynamic()).requests, plain)


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(CONTENTION), st.floats(0.3, 1.5), st.integers(1, 3), st.integers(0, 3))
def test_every_batch_takes_at_least_the_fastest_rows(sc, mode, factor, served_lanes, k):
    """What the bounds rely on: a batch of b samples of v takes at least
    ``settings.fastest(lat)[v, b] x its draw`` under every model, and at most the slower of the
    two rows when the served rows were timed with at least as many lanes (no extrapolation)."""
    s, df = sc
    reqs = to_requests(df, s)
    if (s.token_table()[reqs.variant, reqs.size] > s.token_capacity).any():
        return
    lat = dense(s)
    rng = np.random.default_rng(k)
    alone = np.maximum.accumulate(lat * factor * rng.uniform(0.7, 1.3, (lat.shape[0], 1)), axis=1)
    s = replace(s, contention=mode, alone_lat=alone, served_lanes=served_lanes)
    policy = [FIFO(), PriorityEDF(), Predictive(), Dynamic()][k]
    tr = simulate(reqs, s, lat, policy, noise_seed=k)
    assert check_trace(tr.requests, tr.batches, s) == []
    noise, col = noise_table(s, len(reqs), k)
    b = tr.batches
    v = (b["group"] // len(s.classes)).to_numpy()
    sz, nz = b["samples"].to_numpy(), noise[b["batch_id"].to_numpy(), col[v]]
    dur = (b["end"] - b["start"]).to_numpy()
    assert (dur >= s.fastest(lat)[v, sz] * nz * (1 - 1e-9)).all()
    if served_lanes >= s.lanes:
        assert (dur <= np.fmax(lat, alone)[v, sz] * nz * (1 + 1e-9)).all()


def test_with_contention_reads_the_single_lane_rows(tmp_path):
    s = ServingSettings(max_batch=8)
    one = linear_table(s).assign(lanes=1)
    two = linear_table(s).assign(lanes=2, latency_ms=lambda d: d["latency_ms"] * 1.5)
    p = tmp_path / "profile.json"
    p.write_text(json.dumps({"table": [*one.to_dict("records"), *two.to_dict("records")], "lanes": 2,
                             "sigma": {"resnet18/torch": 0.2}}))
    got = with_served_model(replace(s, profile_path=str(p)))
    assert got.served_lanes == 2 and got.variant_sigma[0] == pytest.approx(0.2)
    assert np.allclose(got.alone_lat, dense(s), equal_nan=True)
    assert np.allclose(got.fastest(dense(s) * 1.5), dense(s), equal_nan=True)
    assert np.allclose(replace(got, contention="served").fastest(dense(s) * 1.5), dense(s) * 1.5, equal_nan=True)
    csv = tmp_path / "table.csv"
    linear_table(s).to_csv(csv, index=False)
    plain = with_contention(replace(s, latency_table=str(csv)))
    assert plain.alone_lat is None and plain.served_lanes == 1


def test_bad_contention_is_one_line():
    with pytest.raises(HybridschedError, match=r"serving.contention: 'both' is not one of"):
        ServingSettings(contention="both")


def test_cost_table_under_processor_sharing():
    """Two lanes, served rows timed with two: a batch costs the lane budget min(2 alone, served);
    three lanes (served rows timed with two, extrapolated): min(alone, served / 2 ... ) as
    g(f) = min_m slow(f, m - 1) / m; every other rule: the fastest rows."""
    from hybridsched.kinds.serving.bounds import cost_table

    lat = dense(ONE)
    alone = lat / np.array([[1.5], [2.5]])  # f = 1.5 (torch), 2.5 (onnx)
    s = replace(ONE, contention="overlap", alone_lat=alone, served_lanes=2)
    c = cost_table(s, lat)
    assert np.allclose(c[:, 1:], np.minimum(2 * alone, lat)[:, 1:])
    s3 = replace(s, lanes=3)
    f = np.array([[1.5], [2.5]])
    g = np.minimum.reduce([np.ones_like(f), f / 2, (1 + 2 * (f - 1)) / 3])
    assert np.allclose(cost_table(s3, lat)[:, 1:], (3 * alone * g)[:, 1:])
    for mode in ("start", "alone", "served"):
        assert np.allclose(cost_table(replace(s, contention=mode), lat)[:, 1:], s.fastest(lat)[:, 1:]
                           if mode != "served" else lat[:, 1:])


def test_overlap_bound_still_sees_contention():
    """With single-lane rows 1.8x faster than the served ones, the fastest rows alone would make
    the lanes look 1.8x faster; the processor-sharing cost keeps the contention bound where the
    served table puts it (< 0.95 at load 1.6) and above every policy."""
    from hybridsched.kinds.serving.bounds import slo_bound
    from hybridsched.kinds.serving.engine import service_noise
    from hybridsched.kinds.serving.metrics import summarize
    from tests.serving.test_bound import heavy_stream

    s = ServingSettings()
    lat = dense(s)
    reqs = heavy_stream(s, lat)
    ov = replace(s, contention="overlap", alone_lat=lat / 1.8, served_lanes=2)
    noise = service_noise(ov, len(reqs), 0)
    b = slo_bound(reqs, ov, lat, noise=noise)
    assert b["contention.slo_attainment"] < 0.95
    assert b["contention.slo_attainment"] == slo_bound(reqs, replace(ov, contention="served"), lat,
                                                       noise=noise)["contention.slo_attainment"]
    for p in (FIFO(), PriorityEDF(), Predictive(), Dynamic()):
        tr = simulate(reqs, ov, lat, p, noise_seed=0)
        assert summarize(tr.requests, tr.batches, ov)["slo_attainment"] <= b["slo_attainment"] + 1e-12
