"""Tuning on a shared PostgreSQL database: 4 worker processes x 10 trials on one study."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from hybridsched.devices import Cluster
from hybridsched.kinds.machine.tuning import TuneSettings, run_study
from tests.conftest import small_workload
from tests.pg_fixture import ROOT_CONF, postgres_server, postgres_url  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow


def test_four_workers_share_one_postgres_study_without_losing_or_duplicating_trials(postgres_url):  # noqa: F811
    import optuna

    with initialize_config_dir(str(ROOT_CONF), version_base=None):
        cfg = OmegaConf.to_container(compose("config", overrides=["rf.random_forest.n_estimators=5"]), resolve=True)
    train = small_workload(150, seed=5, rate=6.0)
    s = TuneSettings(n_trials=40, n_jobs=4, storage=postgres_url, seed=2, pruning=False)
    summary = run_study(s, cfg, train, Cluster())

    storage = optuna.storages.RDBStorage(postgres_url)
    assert [st.study_name for st in optuna.get_all_study_summaries(storage)] == [summary["study"]]
    trials = optuna.load_study(study_name=summary["study"], storage=storage).trials
    assert sorted(t.number for t in trials) == list(range(40))  # none lost, none twice
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert sum(bool(t.user_attrs.get("default")) for t in trials) == 1
    assert summary["n_complete"] == 40
    assert summary["best"]["mean_latency"] == min(t.value for t in trials)

    # a second run on the same database resumes: nothing left to do, same best
    again = run_study(s, cfg, train, Cluster())
    assert again["n_trials"] == 40 and again["best"] == summary["best"]
