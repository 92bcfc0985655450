"""The evaluate stage's headline (src/hybridsched/headline.py): ranked table, best of each
dispatch mode, the few figures of metrics/headline.json, and the MLflow parent run it goes on."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from hybridsched import headline as H
from hybridsched.kinds.cluster.stages import HEADLINE as CLUSTER_METRIC
from hybridsched.kinds.machine.stages import HEADLINE as MACHINE_METRIC
from hybridsched.kinds.serving.stages import HEADLINE as SERVING_METRIC

MACHINE, CLUSTER, SERVING = (H.MainMetric(**m) for m in (MACHINE_METRIC, CLUSTER_METRIC, SERVING_METRIC))


def _table(rows: dict[str, tuple[str, float]], column: str) -> pd.DataFrame:
    df = pd.DataFrame({"dispatch": [d for d, _ in rows.values()], column: [v for _, v in rows.values()],
                       "energy_j": 1.0}, index=pd.Index(list(rows), name="policy"))
    return df


def test_machine_headline_ranks_lowest_latency_first_and_marks_the_best_of_each_mode() -> None:
    table = _table({"round_robin": ("arrival", 58.8), "eft": ("arrival", 1.0), "eft_rank": ("arrival", 0.76),
                    "eft_rank_spt": ("ordered", 0.72), "dmda_wspt": ("ordered", 0.81),
                    "rollout_late": ("late", 0.66), "pg_late": ("late", 0.66)}, "mean_latency")
    head = H.headline_table(table, MACHINE, bound=0.4)
    assert list(head.index[:3]) == ["rollout_late", "pg_late", "eft_rank_spt"]  # a tie keeps table order
    assert list(head["rank"]) == [1, 1, 3, 4, 5, 6, 7]
    assert head[head["best"] == "*"].index.tolist() == ["rollout_late", "eft_rank_spt", "eft_rank"]
    assert head.loc["eft", "vs_bound"] == pytest.approx(2.5)
    doc = H.headline_json(head, MACHINE, bound=0.4)["headline"]
    assert doc["best"] == {"policy": "rollout_late", "mean_latency": 0.66, "vs_bound": 1.65}
    assert doc["arrival"]["policy"] == "eft_rank" and doc["ordered"]["policy"] == "eft_rank_spt"
    assert doc["late"]["policy"] == "rollout_late" and doc["bound"] == 0.4
    numbers = [v for v in pd.json_normalize(doc).iloc[0] if isinstance(v, float)]
    assert len(numbers) == 9  # a short `dvc metrics diff`
    text = H.format_headline(head, MACHINE, 0.4)
    assert text.splitlines()[0] == "headline: mean latency (s), lower is better; bound 0.4"
    assert "rollout_late" in text.splitlines()[2] and "*" in text.splitlines()[2]


def test_cluster_headline_has_one_entry_per_dispatch_mode_and_ranks_a_missing_value_last() -> None:
    table = _table({"fgd": ("arrival", 120.0), "bestfit": ("arrival", float("nan")), "learned_queue": ("queue", 90.0)},
                   "mean_latency")
    head = H.headline_table(table, CLUSTER, bound=None)
    assert list(head.index) == ["learned_queue", "fgd", "bestfit"] and "vs_bound" not in head
    doc = H.headline_json(head, CLUSTER)["headline"]
    assert doc == {"metric": "mean_latency", "higher_is_better": False,
                   "best": {"policy": "learned_queue", "mean_latency": 90.0},
                   "queue": {"policy": "learned_queue", "mean_latency": 90.0},
                   "arrival": {"policy": "fgd", "mean_latency": 120.0}}


def test_serving_headline_ranks_highest_attainment_first_without_a_dispatch_column() -> None:
    table = pd.DataFrame({"slo_attainment": [0.80, 0.95, 0.90]}, index=pd.Index(["fifo", "edf", "cem"], name="policy"))
    head = H.headline_table(table, SERVING, bound=0.97)
    assert list(head.index) == ["edf", "cem", "fifo"] and list(head["best"]) == ["*", "", ""]
    doc = H.headline_json(head, SERVING, bound=0.97)["headline"]
    assert set(doc) == {"metric", "higher_is_better", "bound", "best"}  # one mode: no per-mode entries
    assert doc["best"]["policy"] == "edf" and doc["best"]["vs_bound"] == pytest.approx(0.95 / 0.97, abs=1e-6)


def test_write_headline_writes_the_json_the_markdown_table_and_the_chart(tmp_path: Path) -> None:
    table = _table({"eft": ("arrival", 1.0), "greedy": ("arrival", 762.0), "spt_late": ("late", 0.69)}, "mean_latency")
    head = H.headline_table(table, MACHINE, 0.4)
    files = H.write_headline(tmp_path, head, MACHINE, 0.4, title="t")
    assert files == [tmp_path / "headline.json", tmp_path / "headline.md", tmp_path / "plots" / "headline.png"]
    assert json.loads(files[0].read_text())["headline"]["best"]["policy"] == "spt_late"
    md = files[1].read_text()
    assert "| rank | policy | dispatch | mean_latency | x bound | best of mode |" in md and "| 3 | greedy |" in md
    assert files[2].stat().st_size > 5000 and not list(tmp_path.glob(".staging*"))


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True)


def test_stages_nest_under_one_parent_named_after_the_experiment_with_changed_params_and_headline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow

    from hybridsched.tracking import log_run

    _git(tmp_path, "init", "-q")
    (tmp_path / "params.yaml").write_text("workload:\n  rate: 6\n  name: default\n")
    _git(tmp_path, "add", "params.yaml")
    _git(tmp_path, "commit", "-qm", "base")
    (tmp_path / "params.yaml").write_text("workload:\n  rate: 8\n  name: default\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())  # a file store: no database to migrate
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("DVC_EXP_NAME", "rate8")
    cfg = {"workload": {"rate": 8}}
    sim = log_run("simulate", cfg, {"eft": {"mean_latency": 1.0}}, experiment="t")
    ev = log_run("evaluate", cfg, {}, experiment="t", headline={"headline": {"best": {"policy": "eft", "mean_latency": 1.0}, "bound": 0.4}})
    client = mlflow.MlflowClient()
    parents = {client.get_run(r).data.tags["mlflow.parentRunId"] for r in (sim, ev)}
    assert len(parents) == 1
    parent = client.get_run(parents.pop())
    assert parent.info.run_name == "rate8" and parent.data.tags["dvc_experiment"] == "rate8"
    assert parent.data.tags["changed_params"] == "workload.rate" and parent.data.tags["param.workload.rate"] == "8"
    assert parent.data.metrics == {"headline.best.mean_latency": 1.0, "headline.bound": 0.4}
    assert parent.data.tags["headline.best.policy"] == "eft"
    assert client.get_run(ev).info.run_name == "evaluate"
    # the same stage again is the next pipeline run: a new parent of the same name
    again = log_run("simulate", cfg, {}, experiment="t")
    assert client.get_run(again).data.tags["mlflow.parentRunId"] != parent.info.run_id


def test_a_tracking_failure_is_a_warning_not_a_failed_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from hybridsched.tracking import log_run

    monkeypatch.chdir(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (blocker / "mlruns").as_uri())  # under a file: cannot be made
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert log_run("evaluate", {}, {"x": 1.0}, experiment="t") is None
    err = capsys.readouterr().err
    assert err.startswith("warning: MLflow tracking of stage 'evaluate' failed (") and len(err.splitlines()) == 1
