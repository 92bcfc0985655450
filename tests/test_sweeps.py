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
