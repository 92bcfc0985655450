"""Every stage of the cluster kind, learned parts included, on the small fixture in data/
(no shared traces needed): the same calls the stage scripts make."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from hybridsched.errors import HybridschedError
from hybridsched.kinds import get_kind
from hybridsched.kinds.base import STAGES
from tests.runs import compose_run, outputs_in

DATA = Path(__file__).parent / "data"
# the train_late stage's two searches, a few steps each on 20-40-pod windows of the fixture
LATE_TINY = tuple(f"train_late.cluster.{p}.{k}={v}" for p in ("eft_queue", "learned_queue")
                  for k, v in (("generations", 2), ("population", 4), ("windows", 2), ("eval_windows", 1),
                               ("min_pods", 20), ("max_pods", 40)))


def fixture_run(tmp_path: Path, *overrides: str):
    return compose_run(
        "workload=alibaba_gpu_2023", f"workload.path={DATA / 'pods.csv'}", f"workload.nodes.path={DATA / 'nodes.csv'}",
        "workload.nodes.sample=null", "workload.time_compression=1.0", f"nodes.gavel_path={DATA / 'gavel.json'}",
        "nodes.dqn.episodes=2", "nodes.dqn.learning_starts=20", "nodes.dqn.batch_size=16",
        "rf.random_forest.n_estimators=10", "rf.importance_repeats=1",
        *outputs_in(tmp_path), "cem.generations=2", "cem.population=4",
        "cem.cluster.windows=2", "cem.cluster.eval_windows=1", *LATE_TINY, *overrides)


def test_every_stage_runs_on_the_fixture(tmp_path: Path) -> None:
    run = fixture_run(tmp_path)
    kind = get_kind(run.kind)
    results = {}
    for stage in STAGES:
        if stage == "simulate":  # eft_queue's model: the train_late stage (before simulate in dvc.yaml)
            results["train_late"] = kind.train_late(run)
        results[stage] = getattr(kind, stage)(run)
    m = tmp_path / "metrics"
    report = json.loads((m / "import_report.json").read_text())
    assert report["rows_kept"] == results["generate"]["train"] + results["generate"]["test"] > 100
    assert json.loads((m / "validation.json").read_text())["success"]
    assert "skipped" in json.loads((m / "profile.json").read_text())
    assert (tmp_path / "models" / "rf" / "meta.json").exists() and (tmp_path / "models" / "dqn" / "model.pt").exists()
    table = results["evaluate"]
    # every cluster policy, each in its own dispatch mode (learned_queue in its queue engine)
    assert run.cfg["sim"]["policies"]["cluster"] is None and list(table.index) == list(run.cfg["policies"]["cluster"])
    assert table.loc["learned_queue", "dispatch"] == "queue" and set(table["dispatch"]) == {"arrival", "queue"}
    # the same derived columns as every kind; nothing beats the clairvoyant bound
    for col in ("mean_latency_vs_bound", "makespan_vs_bound", "latency_speedup_vs_round_robin", "mean_latency_vs_oracle"):
        assert col in table
    assert (table["mean_latency_vs_bound"] >= 1 - 1e-9).all()
    csv = pd.read_csv(m / "policies.csv")
    assert list(csv["policy"]) == list(table.index) and list(csv["dispatch"]) == list(table["dispatch"])
    q = pd.read_csv(m / "plots" / "latency_quantiles.csv")
    assert set(q["policy"]) == set(table.index) and list(q.columns) == ["policy", "quantile", "latency"]
    # the headline: lowest mean JCT first, against the bound, the best of each dispatch mode
    head = json.loads((m / "headline.json").read_text())["headline"]
    best = table["mean_latency"].idxmin()
    assert head["best"] == {"policy": best, "mean_latency": round(table.loc[best, "mean_latency"], 6),
                            "vs_bound": round(table.loc[best, "mean_latency_vs_bound"], 6)}
    assert head["queue"]["policy"] == "learned_queue" and head["bound"] > 0
    assert f"| 1 | {best} |" in (m / "headline.md").read_text() and (m / "plots" / "headline.png").stat().st_size > 5000


def test_one_policy_by_name_and_unknown_names(tmp_path: Path) -> None:
    run = fixture_run(tmp_path)
    kind = get_kind(run.kind)
    kind.generate(run)
    one = compose_run(*[f"{k}" for k in []], policy="fgd")  # policy names are per kind
    with pytest.raises(HybridschedError, match=r"policy: unknown machine policy name\(s\) \['fgd'\]"):
        one.policy_names()
    run.policy = "fgd"
    table = kind.simulate(run)
    assert list(table.index) == ["fgd"]
    run.policy = "nope"
    with pytest.raises(HybridschedError, match=r"unknown cluster policy name\(s\) \['nope'\]; known: \["):
        kind.simulate(run)
