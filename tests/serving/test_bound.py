"""The contention bound (bounds.contention_bound): never below any policy's SLO attainment
(hypothesis, every policy), below 1 where the clairvoyant bound says 1, and its
Moore-Hodgson step exact against brute force."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from hybridsched.kinds.serving.bounds import _moore_hodgson, contention_bound, slo_bound, window_batch_cap
from hybridsched.kinds.serving.engine import CONTENTION, service_noise, simulate
from hybridsched.kinds.serving.metrics import summarize
from hybridsched.kinds.serving.policies import FIFO, BatchAware, Dynamic, Predictive, PriorityEDF
from hybridsched.kinds.serving.settings import ServingSettings
from hybridsched.kinds.serving.workload import generate_stream, to_requests
from tests.serving.conftest import dense
from tests.serving.test_engine import scenarios


def _policies(settings: ServingSettings):
    """Every serving policy, the learned ones with random weights (exploring, for variety)."""
    import torch

    from hybridsched.kinds.serving.dqn import DQNDispatcher
    from hybridsched.rl.dqn import QNetwork

    torch.manual_seed(0)
    n_obs = 4 * settings.n_groups + 2
    out = [FIFO(), PriorityEDF(), BatchAware(), Dynamic(), Dynamic(online_alpha=0.0), Predictive(),
           DQNDispatcher(epsilon=0.3, q=QNetwork(n_obs, settings.n_groups, 8), hidden=8)]
    try:
        from hybridsched.kinds.serving.cem import CandidateScorer

        rng = np.random.default_rng(0)
        out.append(CandidateScorer(theta=rng.normal(size=CandidateScorer.n_params())))
        out.append(CandidateScorer(theta=rng.normal(size=CandidateScorer.n_params()), drop=True))
    except ImportError:  # the learned per-candidate dispatcher comes with its own commit
        pass
    return out


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(0, 3), st.sampled_from(CONTENTION), st.floats(0.3, 1.5), st.integers(1, 3))
def test_bound_is_at_least_every_policy(sc, noise_seed, contention, factor, served_lanes):
    """Under every contention model (serving.contention) with single-lane rows ``factor`` x the
    served ones (faster or slower, scaled per variant), timed with 1-3 lanes."""
    s, df = sc
    reqs = to_requests(df, s)
    if (s.token_table()[reqs.variant, reqs.size] > s.token_capacity).any():
        return  # rejected up front (test_engine)
    lat = dense(s)
    scale = np.random.default_rng(noise_seed).uniform(0.7, 1.3, (lat.shape[0], 1))
    s = replace(s, contention=contention, alone_lat=np.maximum.accumulate(lat * factor * scale, axis=1),
                served_lanes=served_lanes)
    noise = service_noise(s, len(reqs), noise_seed)
    b = slo_bound(reqs, s, lat, noise=noise)
    assert b["slo_attainment"] <= b["contention.slo_attainment"] + 1e-12
    for p in _policies(s):
        tr = simulate(reqs, s, lat, p, noise_seed=noise_seed)
        m = summarize(tr.requests, tr.batches, s)
        assert m["slo_attainment"] <= b["contention.slo_attainment"] + 1e-12, (p.name, m["slo_attainment"], b)
        for k, cls in enumerate(s.classes):
            if (reqs.cls == k).any() and f"contention.{cls}.slo_attainment" in b:
                met = tr.requests.loc[tr.requests["cls"] == cls, "met_slo"].mean()
                assert met <= b[f"contention.{cls}.slo_attainment"] + 1e-12, (p.name, cls)


def heavy_stream(s: ServingSettings, lat: np.ndarray, n: int = 1500):
    """A three-model stream at load 1.6, where the clairvoyant bound says nothing."""
    w = {"rate": None, "load": 1.6, "mix": {"models": {"resnet18": 0.4, "resnet50": 0.4, "vit_b16": 0.2},
                                              "classes": {"interactive": 0.7, "batch": 0.3}},
         "slo": {"rule": "factor", "interactive": 5, "batch": 50}}
    return to_requests(generate_stream(w, s, n, 1, 1, lat), s)


def test_contention_bound_says_something_where_the_clairvoyant_one_does_not():
    s = ServingSettings()
    lat = dense(s)
    reqs = heavy_stream(s, lat)
    noise = service_noise(s, len(reqs), 0)
    b = slo_bound(reqs, s, lat, noise=noise)
    assert b["clairvoyant.slo_attainment"] == 1.0  # every request feasible, lane budget not binding
    assert b["contention.slo_attainment"] < 0.95
    best = max(summarize(*(lambda t: (t.requests, t.batches))(simulate(reqs, s, lat, p, noise_seed=0)), s)["slo_attainment"]
               for p in _policies(s))
    assert best <= b["slo_attainment"]


def test_window_batch_cap_counts_the_group_within_the_window():
    s = ServingSettings(window_ms=100.0, max_batch=5)
    import pandas as pd

    df = pd.DataFrame({"request_id": range(5), "arrival": [0.0, 0.05, 0.12, 0.3, 0.31],
                       "model": ["resnet18"] * 4 + ["resnet50"], "cls": "interactive", "backend": "torch",
                       "precision": "fp32", "size": [1, 2, 1, 4, 1], "slo_s": 1.0})
    cap = window_batch_cap(to_requests(df, s), s)
    # r0: r0, r1 (r2 is 0.12 s away); r1: all three; r2: r1, r2; r3 alone in its group; r4 other model
    assert cap.tolist() == [3, 4, 3, 4, 1]


@pytest.mark.parametrize("seed", range(6))
def test_moore_hodgson_is_exact(seed):
    rng = np.random.default_rng(seed)
    n = 8
    d, w = rng.uniform(0.5, 4, n), rng.uniform(0.2, 1.5, n)
    noise = np.ones(64)
    cum_w = np.r_[0.0, np.cumsum(np.full(64, 1.0))] * 100  # capacity(y) = y: one unit-speed lane
    cum_t = cum_w.copy()
    got = _moore_hodgson(d, w, 0.0, 1.0, cum_t, cum_w, noise, True)
    best = 0
    for k in range(n + 1):
        for sub in itertools.combinations(range(n), k):
            idx = np.array(sub, dtype=int)
            o = idx[np.argsort(d[idx])]
            if (np.cumsum(w[o]) <= d[o] + 1e-12).all():
                best = max(best, k)
    assert got == best


def test_noise_is_charged_by_the_draws_not_their_minimum():
    s = ServingSettings(lanes=1, window_ms=0.0, max_batch=1)
    lat = dense(s)
    import pandas as pd

    # 40 requests due together: the bound with all draws = 1 is 20 (each takes 0.5 s of 10 s)
    n = 40
    per = lat[0, 1]
    df = pd.DataFrame({"request_id": range(n), "arrival": 0.0, "model": "resnet18", "cls": "interactive",
                       "backend": "torch", "precision": "fp32", "size": 1, "slo_s": 20 * per + 1e-9})
    reqs = to_requests(df, s)
    flat = contention_bound(reqs, s, lat, np.ones(n))
    assert flat["slo_attainment"] == pytest.approx(20 / n)
    two_fast = np.r_[0.5, 0.5, np.ones(n - 2)]  # two batches may run at half time: one more request fits
    b = slo_bound(reqs, s, lat, noise=two_fast)
    assert b["contention.slo_attainment"] == pytest.approx(21 / n)
    assert b["clairvoyant.slo_attainment"] == 1.0  # charges every batch the smallest draw: all 40 fit
