"""Hydra multirun: a 2x2 sweep of the simulate stage lands in one comparison table."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.test_config_and_stages import run_stage

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_two_by_two_multirun_gives_four_rows(tmp_path, launcher):
    r = run_stage("simulate", "-m", "policy=round_robin,eft", "workload=default,shifted",
                  "workload.n_test=150", "workload.n_train=10", f"hydra/launcher={launcher}",
                  f"hydra.sweep.dir={tmp_path}")
    assert r.returncode == 0, r.stderr[-2000:]
    table = pd.read_csv(tmp_path / "comparison.csv")
    assert len(table) == 4
    assert set(zip(table["policy"], table["workload"])) == {
        (p, w) for p in ("round_robin", "eft") for w in ("default", "shifted")}
    assert (table["makespan"] > 0).all() and table["makespan"].nunique() == 4
    assert "| policy" in (tmp_path / "comparison.md").read_text()
    # each job wrote its own traces, never the DVC outputs
    assert len(list(tmp_path.glob("*/traces/*.parquet"))) == 4


def test_hydra_optuna_sweeper_is_another_way_into_tuning(tmp_path):
    """`hparams_search=hybrid_ml_optuna`: each job trains and scores one configuration."""
    from tests.conftest import small_workload

    wd = tmp_path / "workload"
    wd.mkdir()
    small_workload(300, seed=2, rate=6.0).to_frame().to_parquet(wd / "train.parquet")
    r = run_stage("tune", "hparams_search=hybrid_ml_optuna", "hydra.sweeper.n_trials=3",
                  f"paths.workload_dir={wd}", f"hydra.sweep.dir={tmp_path / 'sweep'}", "tracking.enabled=false")
    assert r.returncode == 0, r.stderr[-2000:]
    import yaml

    best = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    assert best["best_value"] > 0 and "policies.machine.hybrid_ml.window" in best["best_params"]
    table = pd.read_csv(tmp_path / "sweep" / "comparison.csv")
    assert len(table) == 3 and (table["mean_latency"] > 0).all()
    assert table["rf.random_forest.n_estimators"].between(10, 120).all()
    assert best["best_value"] == pytest.approx(table["mean_latency"].min())
