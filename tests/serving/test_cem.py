"""The learned per-candidate dispatcher ``cem`` (kinds/serving/cem.py)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from hybridsched.errors import HybridschedError, ModelFileError
from hybridsched.kinds.serving import cem as C
from hybridsched.kinds.serving.engine import simulate
from hybridsched.kinds.serving.policies import Predictive
from hybridsched.kinds.serving.settings import ServingSettings
from hybridsched.rl.cem import CEMSettings
from tests.serving.conftest import dense

MIX = {"models": {"resnet18": 0.4, "resnet50": 0.4, "vit_b16": 0.2}, "classes": {"interactive": 0.7, "batch": 0.3}}
BASE = {"rate": None, "load": 1.1, "mix": MIX, "slo": {"rule": "factor", "interactive": 5, "batch": 50}}


def test_theta_zero_is_the_predictive_heuristic():
    s = ServingSettings()
    lat = dense(s)
    for w in (BASE, {**BASE, "arrival": "gamma", "cv": 3.0, "load": 1.5}):
        reqs = C._reqs(w, s, lat, 1200, 4)
        a = simulate(reqs, s, lat, C.CandidateScorer(theta=np.zeros(C.N_THETA)), noise_seed=1)
        b = simulate(reqs, s, lat, Predictive(), noise_seed=1)
        pd.testing.assert_frame_equal(a.batches, b.batches)
        assert (a.requests["met_slo"] == b.requests["met_slo"]).all()


def test_training_is_seeded_and_never_uses_heldout_seeds():
    s = ServingSettings()
    lat = dense(s)
    cs = C.ServingCEMSettings(scenarios=1, requests=150, select_from=2, selection_scenarios=1)
    search = CEMSettings(generations=2, population=4, seed=3)
    (r1, sel1), (r2, _) = (C.train_scorer(BASE, s, lat, lat, search, cs) for _ in range(2))
    assert r1.theta.shape == (C.N_THETA,) and np.array_equal(r1.theta, r2.theta)
    assert sel1["selected_generation"] in (1, 2)
    with pytest.raises(HybridschedError, match="held-out"):
        C.train_scorer(BASE, s, lat, lat, CEMSettings(generations=1, population=2, seed=C.HELDOUT_SEED), cs)
    streams = C.heldout_streams(BASE, "trace.csv", cs)
    assert len(streams) == 5 and all(w["seed"] >= C.HELDOUT_SEED for w in streams.values())
    assert sum(w["arrival"] == "replay" for w in streams.values()) == 2


def test_model_file_errors(tmp_path):
    with pytest.raises(ModelFileError, match="not found"):
        C.load(tmp_path)
    (tmp_path / "theta.json").write_text(json.dumps({"format": C.FORMAT, "theta": [0.0, 1.0]}))
    with pytest.raises(ModelFileError, match="needs"):
        C.load(tmp_path)
    (tmp_path / "theta.json").write_text(json.dumps({"format": C.FORMAT, "theta": [0.5] * C.N_THETA}))
    assert C.load(tmp_path).tolist() == [0.5] * C.N_THETA
    with pytest.raises(HybridschedError, match="cem.serving"):
        C.ServingCEMSettings.from_dict({"load": [2.0, 1.0]})
