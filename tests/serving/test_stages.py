"""Every stage function of the serving kind, in order, on a tiny config in tmp_path."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from hybridsched.kinds import get_kind
from hybridsched.kinds.base import STAGES, Run
from tests.serving.conftest import serving_cfg, traces_dir


@pytest.fixture
def tiny(tmp_path):
    cfg = serving_cfg(tmp_path, models={"resnet18": 80.0}, backends=["torch"], max_batch=8, load_sweep=[0.5, 1.0])
    cfg["serving"]["profile"].update(models=["resnet18"], backends=["torch"], measure_batches=[1, 2],
                                     fit_batches=[4, 8], warmup=0, repeats=1, budget_s=0.0)
    cfg["serving"]["predictor"].update(n_estimators=10, test_batches=[2])
    cfg["serving"]["dqn"].update(episodes=2, learning_starts=20, batch_size=16, hidden=8)
    cfg["serving"]["tune"].update(n_trials=3)
    cfg["cem"].update(generations=2, population=4)
    cfg["cem"]["serving"].update(scenarios=1, requests=100, select_from=2, selection_scenarios=1, heldout_requests=100,
                                 heldout_trace=str(traces_dir() / "azure-llm-2023" / "AzureLLMInferenceTrace_code.csv"))
    cfg["workload"].update(n_train=150, n_test=150, rate=6.0, mix={"models": {"resnet18": 1.0},
                                                                     "classes": {"interactive": 0.7, "batch": 0.3}})
    return cfg


def test_every_stage_in_order(tiny, tmp_path, capsys):
    kind = get_kind("serving")
    run = Run(tiny, tracking=False)
    results = {name: getattr(kind, name)(run) for name in STAGES}
    printed = capsys.readouterr().out  # simulate and evaluate say what they found
    assert "simulate: upper bound on SLO attainment" in printed
    assert "headline: SLO attainment, higher is better; bound" in printed
    m = tmp_path / "metrics"
    for f in ("profile.json", "import_report.json", "validation.json", "train_rf.json", "train_dqn.json", "tune.json",
              "train_cem.json", "plots/train_cem.csv",
              "summary.json", "policies.csv", "plots/rf_importance.png", "plots/train_dqn.csv",
              "plots/tune/tune_history.png", "plots/latency_cdf.png", "plots/utilisation.png", "plots/energy_cost.png",
              "plots/latency_quantiles.csv", "plots/utilisation.csv", "plots/energy_cost.csv",
              "plots/kind/attainment_vs_load.png", "plots/kind/attainment_vs_load.csv", "plots/kind/slo_violations.png",
              "plots/kind/percentiles.png", "plots/kind/wait_hist.png", "plots/profile/profile.png",
              "headline.json", "headline.md", "plots/headline.png"):
        assert (m / f).exists(), f
    assert (tmp_path / "models" / "best_params.yaml").exists()
    table = results["evaluate"]
    assert set(table.index) == set(tiny["policies"]["serving"])  # sim.policies.serving: null, every policy
    assert (table["slo_attainment_vs_bound"] <= 1.0 + 1e-9).all()
    head = json.loads((m / "headline.json").read_text())["headline"]  # the highest attainment wins, below the bound
    assert head["best"]["policy"] == table["slo_attainment"].idxmax() and head["best"]["vs_bound"] <= 1.0 + 1e-9
    assert head["metric"] == "slo_attainment" and head["higher_is_better"] is True
    prof = json.loads((tmp_path / "data" / "cluster_profile.json").read_text())
    rows = pd.DataFrame(prof["table"])
    assert set(rows["lanes"]) == {1, 2}  # single-lane and served (serving.lanes workers) rows, one table
    fitted = rows[rows["lanes"] == 1].set_index("batch")["fitted"]
    assert not fitted[1] and fitted[8]  # measured vs fitted rows are marked
    cem = json.loads((m / "train_cem.json").read_text())
    assert len(cem["heldout"]) == 5 and cem["heldout_wins_or_ties"] == sum(r["cem_wins_or_ties"] for r in cem["heldout"])
    bound = json.loads((tmp_path / "data" / "traces" / "bound.json").read_text())
    assert bound["slo_attainment"] == min(bound["clairvoyant.slo_attainment"], bound["contention.slo_attainment"])
    # the simulator drew resnet18/torch with the sigma the profile as served measured
    assert bound["sigma_source"] == "profile"
    assert bound["service_sigma"]["resnet18/torch/fp32"] == pytest.approx(prof["sigma"]["resnet18/torch"], abs=1e-4)
    report = json.loads((m / "import_report.json").read_text())
    assert report["rate"] == 6.0 and report["load"] is None and set(report["offered_load"]) == {"train", "test"}
    summary = json.loads((m / "summary.json").read_text())
    assert summary["latency_table"] == "measured"
    # the simulate table and the evaluate table agree
    pd.testing.assert_series_equal(results["simulate"]["slo_attainment"].sort_index(),
                                   table["slo_attainment"].sort_index(), check_names=False)


def test_stages_before_train_rf_use_the_predictor_train_rf_saves(tiny, tmp_path):
    """tune and train_dqn run before train_rf in the DAG, so they fit the predictor in memory
    from the latency table: the same seeded fit, bit for bit, as train_rf's pred_latency.npy."""
    import numpy as np

    from hybridsched.kinds.serving import stages as st

    tiny["serving"]["latency_table"] = "clockwork_v100"  # a published table: no profiling here
    tiny["serving"].update(models={"resnet50": 160.0}, precisions=["fp32"], backends=["torch"])
    run = Run(tiny, tracking=False)
    s = st.settings_of(run)
    lat, table = st._tables(run, s)
    assert not (tmp_path / "models" / "rf").exists()
    in_memory, _ = st._pred_table(run, s, lat, table)  # as tune and train_dqn call it
    st.train_rf(run)
    saved, source = st._pred_table(run, s, lat)  # as simulate reads it
    assert source == "learned predictor"
    np.testing.assert_array_equal(in_memory, saved)
