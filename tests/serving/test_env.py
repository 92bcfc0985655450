"""The serving kind's dispatch decision as a Gymnasium env (``kinds/serving/env.py``).

The env steps the engine one decision at a time (``engine.DispatchRun``: ``next_decision`` and
``start_chosen``, the two halves of the compiled run's loop, which keeps its own copy): driven
by a policy's picks it must give ``simulate``'s schedule for that policy, batch for batch, and its return must be the served
requests that met their SLO minus those that missed it."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

import hybridsched.envs  # noqa: F401  (registers the id)
from hybridsched.errors import HybridschedError
from hybridsched.kinds.serving.engine import ELIGIBLE, N_OBS_PER_GROUP, simulate
from hybridsched.kinds.serving.env import DEFAULT_WORKLOAD, ENV_ID, ServingDispatchEnv, env_kwargs_from_config
from hybridsched.kinds.serving.policies import FIFO, BatchAware, Predictive, PriorityEDF
from hybridsched.kinds.serving.settings import ServingSettings
from hybridsched.kinds.serving.workload import generate_stream, to_requests
from tests.serving.conftest import dense, linear_table, serving_cfg
from tests.env_checks import check_env_warnings, drive

# two lanes, short windows and a load above capacity in bursts: the dispatch order matters
SETTINGS = ServingSettings(lanes=2, max_batch=8, window_ms=5.0, service_sigma=0.1, token_capacity=700.0)
WORKLOAD = {"arrival": "gamma", "cv": 3.0, "load": 1.3}


def _fixture(settings: ServingSettings = SETTINGS, n: int = 240, seed: int = 3) -> dict:
    """Env kwargs of one fixed stream on the synthetic table, its noise fixed."""
    lat = dense(settings)
    df = generate_stream({**DEFAULT_WORKLOAD, **WORKLOAD}, settings, n, seed, 0, lat)
    return {"settings": settings, "latency": lat, "requests": to_requests(df, settings), "noise_seed": 7}


def test_env_passes_gymnasium_check_env_without_warnings():
    for kw in (_fixture(n=60), {"settings": SETTINGS, "latency": dense(SETTINGS), "n_requests": 40}):
        env = gym.make(ENV_ID, **kw)
        assert not check_env_warnings(env.unwrapped)
        G = SETTINGS.n_groups
        assert env.observation_space.shape == (N_OBS_PER_GROUP * G + 2,) and env.action_space.n == G


@pytest.mark.parametrize("contention", ["served", "overlap"])
def test_env_driven_by_a_policy_gives_simulates_schedule(contention):
    s = SETTINGS if contention == "served" else dataclasses.replace(
        SETTINGS, contention="overlap", alone_lat=dense(SETTINGS) * 0.6, served_lanes=2)
    kw = _fixture(s)
    schedules = {}
    for policy in (FIFO(), PriorityEDF()):
        env = ServingDispatchEnv(**kw)
        _, rewards, info = drive(env, lambda e, o, i: e.policy_action(policy))
        tr = simulate(kw["requests"], s, kw["latency"], policy, noise_seed=7)
        got = env.trace(policy.name)
        cols = ["batch_id", "lane", "start", "end", "met_slo"]
        assert got.requests[cols].equals(tr.requests[cols]), policy.name
        assert got.batches.equals(tr.batches), policy.name
        served = tr.requests[tr.requests["batch_id"] >= 0]
        met = int(served["met_slo"].sum())
        assert sum(rewards) == pytest.approx(2 * met - len(served))
        assert info["slo_attainment"] == pytest.approx(tr.requests["met_slo"].mean())
        schedules[policy.name] = tr.requests["batch_id"].to_numpy()
    # the fixture is one where the two heuristics differ, so the comparison above can fail
    assert not np.array_equal(schedules["fifo"], schedules["edf"])


def test_masks_are_the_eligible_groups_and_a_masked_action_is_flagged():
    env = ServingDispatchEnv(**_fixture(n=120))
    obs, info = env.reset(seed=0)
    G = SETTINGS.n_groups
    flagged = False
    for _ in range(200):
        mask = env.action_masks()
        run = env._run
        assert np.array_equal(mask, run.gs[:G, ELIGIBLE] > 0) and np.array_equal(mask, info["action_mask"])
        assert np.array_equal(mask, obs[0:N_OBS_PER_GROUP * G:N_OBS_PER_GROUP] > 0) and mask.sum() == info["eligible"]
        bad = np.flatnonzero(~mask)
        first = int(run.elig[0])
        if len(bad) and not flagged:
            obs, _, done, _, info = env.step(int(bad[0]))
            assert info["action_valid"] is False and env._run.b["group"][env._run.nb - 1] == first
            flagged = True
        else:
            obs, _, done, _, info = env.step(int(np.flatnonzero(mask)[-1]))
            assert info["action_valid"] is True
        if done:
            assert not env.action_masks().any()
            break
    assert flagged


def test_same_seed_same_episode_and_a_policy_with_other_engine_parameters_is_refused():
    kw = {"settings": SETTINGS, "latency": dense(SETTINGS), "n_requests": 80}
    runs = []
    for seed in (5, 5, 6):
        env = ServingDispatchEnv(**kw)
        runs.append(drive(env, lambda e, o, i: e.policy_action(BatchAware()), seed=seed))
    assert runs[0][:2] == runs[1][:2]
    assert runs[0][0] != runs[2][0]  # another seed, another stream
    env = ServingDispatchEnv(**kw)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="predictive"):
        env.policy_action(Predictive())


def test_vector_envs_step():
    kw = {"settings": SETTINGS, "latency": dense(SETTINGS), "n_requests": 30}
    fns = [lambda: gym.make(ENV_ID, **kw) for _ in range(2)]
    for vec in (gym.vector.SyncVectorEnv(fns), gym.vector.AsyncVectorEnv(fns)):
        try:
            obs, info = vec.reset(seed=1)
            assert obs.shape == (2, N_OBS_PER_GROUP * SETTINGS.n_groups + 2)
            for _ in range(40):  # past the first episode's end: the vector env resets it
                first = np.argmax(info["action_mask"], axis=1)
                obs, r, term, trunc, info = vec.step(first)
                assert obs.shape[0] == 2 and r.shape == (2,)
        finally:
            vec.close()


def test_env_kwargs_from_config_and_bad_settings(tmp_path):
    table = tmp_path / "latency.csv"  # a latency table CSV as the settings name one
    linear_table(ServingSettings()).to_csv(table, index=False)
    cfg = serving_cfg(tmp_path, latency_table=str(table))
    cfg["serving"].setdefault("predictor", {})["use"] = "table"
    kw = env_kwargs_from_config(cfg, generated=True, n_requests=50)
    env = ServingDispatchEnv(**kw)
    env.reset(seed=0)
    assert env.action_space.n == kw["settings"].n_groups and "pred_latency" not in kw
    assert env_kwargs_from_config(cfg)["requests"].endswith("test.parquet")
    with pytest.raises(HybridschedError, match="workload.kind"):
        env_kwargs_from_config({**cfg, "workload": {"kind": "machine"}})
    with pytest.raises(HybridschedError, match="shape"):
        ServingDispatchEnv(settings=SETTINGS, latency=np.ones((2, 3)))


def test_the_documented_snippet_makes_the_env_and_an_episode_runs(monkeypatch):
    """docs/train-your-own-agent.md's serving snippet, run as written after the page's imports."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "train-your-own-agent.md").read_text()
    section = text.split("## The serving kind's dispatch", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(root)
    scope: dict = {"gym": gym}  # the page's first snippet imports it
    exec(compile(code, "train-your-own-agent.md", "exec"), scope)
    env = scope["env"]
    _, rewards, info = drive(env, lambda e, obs, info: e.unwrapped.policy_action(FIFO()))
    assert info["batches"] > 0 and 0 < info["slo_attainment"] <= 1
    assert sum(rewards) == pytest.approx(2 * info["slo_attainment"] * 200 - 200)  # nothing dropped
