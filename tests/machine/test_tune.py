"""The Optuna tune stage: parallel workers on one storage, resume, default as trial 0,
multi-objective front, and use_tuned overlaying the result on the config."""

from __future__ import annotations

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from hybridsched.devices import Cluster
from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.tuning import TuneSettings, run_study
from stages.common import apply_tuned
from tests.conftest import small_workload
from tests.test_config_and_stages import ROOT


def _cfg(**over):
    with initialize_config_dir(str(ROOT / "conf"), version_base=None):
        cfg = compose("config", overrides=["rf.random_forest.n_estimators=10"])
    return OmegaConf.to_container(cfg, resolve=True)


@pytest.fixture(scope="module")
def train():
    return small_workload(300, seed=5, rate=6.0)


def test_parallel_workers_share_one_study_and_lose_no_trial(tmp_path, train):
    import optuna

    s = TuneSettings(n_trials=6, n_jobs=2, storage=str(tmp_path / "s.journal"), seed=1)
    summary = run_study(s, _cfg(), train, Cluster())
    trials = optuna.load_study(study_name=summary["study"], storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "s.journal")))).trials
    assert len(trials) == 6 and sorted(t.number for t in trials) == list(range(6))
    assert all(t.state.is_finished() for t in trials)
    assert trials[0].user_attrs.get("default") is True
    assert summary["best"]["mean_latency"] <= summary["default"]["mean_latency"]


def test_rerun_resumes_the_study_instead_of_starting_over(tmp_path, train):
    s = TuneSettings(n_trials=3, storage=str(tmp_path / "s.journal"))
    first = run_study(s, _cfg(), train, Cluster())
    again = run_study(s, _cfg(), train, Cluster())
    assert again["n_trials"] == first["n_trials"] == 3 and again["best"] == first["best"]
    more = run_study(TuneSettings(n_trials=5, storage=str(tmp_path / "s.journal")), _cfg(), train, Cluster())
    assert more["n_trials"] == 5 and more["study"] == first["study"]


def test_other_training_data_is_another_study(tmp_path, train):
    s = TuneSettings(n_trials=2, storage=str(tmp_path / "s.journal"))
    a = run_study(s, _cfg(), train, Cluster())
    b = run_study(s, _cfg(), small_workload(300, seed=6, rate=6.0), Cluster())
    assert a["study"] != b["study"] and b["n_trials"] == 2


def test_two_objectives_give_a_non_dominated_front(tmp_path, train):
    s = TuneSettings(n_trials=5, objectives=["mean_latency", "energy_j"], storage=str(tmp_path / "s.journal"))
    front = run_study(s, _cfg(), train, Cluster())["pareto_front"]
    assert front
    for a in front:
        assert not any(b["mean_latency"] < a["mean_latency"] and b["energy_j"] < a["energy_j"] for b in front)


def test_bad_objective_and_target_are_rejected(tmp_path, train):
    with pytest.raises(HybridschedError, match="tune.target"):
        TuneSettings(target="svm")
    with pytest.raises(Exception, match="unknown metric"):
        run_study(TuneSettings(n_trials=1, objectives=["speed"], storage=str(tmp_path / "s.journal")), _cfg(), train, Cluster())


def test_use_tuned_overlays_best_params(tmp_path):
    best = tmp_path / "best.yaml"
    best.write_text(yaml.safe_dump({"rf": {"random_forest": {"n_estimators": 7}}, "policies": {"hybrid_ml": {"window": 99}}}))
    cfg = OmegaConf.create(_cfg())
    cfg.paths.best_params = str(best)
    apply_tuned(cfg)
    assert cfg.rf.random_forest.n_estimators == 10  # use_tuned is false by default
    cfg.use_tuned = True
    apply_tuned(cfg)
    assert cfg.rf.random_forest.n_estimators == 7 and cfg.policies.hybrid_ml.window == 99
    cfg.paths.best_params = str(tmp_path / "missing.yaml")
    with pytest.raises(HybridschedError, match="missing.yaml: not found"):
        apply_tuned(cfg)


def test_a_dqn_trial_removes_its_model_dir(tmp_path, monkeypatch, train):
    """The dqn target saves each trial's network to a temp dir for the policy to load; the
    dir is gone once the trial is scored (none piles up in /tmp)."""
    import tempfile

    from hybridsched.kinds.machine.tuning import evaluate_config, split_validation

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    fit, val = split_validation(train, 0.3)
    m = evaluate_config("dqn", _cfg(), fit, val, Cluster(), seed=0, dqn_episodes=1)
    assert m["mean_latency"] > 0
    assert not list(tmp_path.glob("tune-dqn-*"))
