"""MLflow logging: params from the config, metrics, artifacts and the git commit tag."""

import pytest

from hybridsched.tracking import flatten, log_run


def test_flatten_nested_config():
    assert flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": "x"}) == {"a.b": 1, "a.c.d": [1, 2], "e": "x"}


@pytest.mark.slow
def test_log_run_records_params_metrics_artifacts_and_commit(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_ARTIFACTS_DESTINATION", str(tmp_path / "mlruns"))
    monkeypatch.chdir(tmp_path)
    art = tmp_path / "table.csv"
    art.write_text("a,b\n1,2\n")
    run_id = log_run("evaluate", {"workload": {"rate": 6.0}, "hydra": {"x": 1}},
                     {"eft": {"makespan": 10.0, "label": "x"}, "nan": float("nan")}, [art], experiment="t")
    run = mlflow.MlflowClient().get_run(run_id)
    assert run.data.params == {"workload.rate": "6.0"}
    assert run.data.metrics == {"eft.makespan": 10.0}
    assert run.data.tags["stage"] == "evaluate" and "git_commit" in run.data.tags
    assert [a.path for a in mlflow.MlflowClient().list_artifacts(run_id)] == ["table.csv"]
    assert log_run("evaluate", {}, {}, enabled=False) is None
