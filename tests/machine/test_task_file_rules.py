"""Machine kind: one rule set for the reader and validate, empty workloads, plain
numbers in messages, strict JSON, constant training targets, and a user's own task file."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybridsched.errors import HybridschedError, WorkloadError
from hybridsched.io import write_json
from hybridsched.kinds.machine import schema
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.runtime_model import load_model, save_model, train_runtime_model
from hybridsched.kinds.machine.sim import task_matrix
from hybridsched.kinds.machine.user_file import load_splits, load_with_report
from hybridsched.kinds.machine.validation import validate_files, validate_frame
from hybridsched.validation import failure_summary
from hybridsched.kinds.machine.workload import generate_splits, read_tasks
from tests.bad_input_catalogue import as_documented, assert_documented, assert_one_plain_line

MAX_MB = 64000.0
SMALL = {"seed": 1, "n_train": 40, "n_test": 30, "rate": 4.0, "dag_job_size": 5}


def frame(n: int = 5) -> pd.DataFrame:
    return pd.DataFrame({"task_id": np.arange(n), "arrival": np.arange(n, dtype=float), "size": np.full(n, 10.0),
                         "intensity": np.full(n, 0.5), "memory_mb": np.full(n, 100.0)})


def failed(entry: dict) -> set[str]:
    return {e["check"] for e in entry["expectations"] if not e["success"]}


# Each bad input: the reader's exact message (FILE = the path) and the suite's failing check.
# The same frame goes to both, so a rule the two disagree on fails here.
CASES = {
    "missing-column": (lambda d: d.drop(columns="size"),
                       "FILE: missing column(s) size", "column 'size' exists"),
    "empty": (lambda d: d.iloc[:0],
              "FILE: 0 tasks (an empty workload has nothing to schedule)", "at least 1 task"),
    "nan-intensity": (lambda d: d.assign(intensity=[0.5, np.nan, 0.5, 0.5, 0.5]),
                      "FILE: column 'intensity': 1 value(s) NaN (missing) (first at row 1: nan)",
                      "'intensity' has no missing (NaN) values"),
    "negative-arrival": (lambda d: d.assign(arrival=[-10.0, 1.0, 2.0, 3.0, 4.0]),
                         "FILE: column 'arrival': 1 value(s) not >= 0 (first at row 0: -10.0)", "'arrival' >= 0"),
    "size-not-positive": (lambda d: d.assign(size=[1.0, 2.0, -3.0, 4.0, 5.0]),
                          "FILE: column 'size': 1 value(s) not > 0 (first at row 2: -3.0)", "'size' > 0"),
    "infinite-size": (lambda d: d.assign(size=[1.0, np.inf, 1.0, 1.0, 1.0]),
                      "FILE: column 'size': 1 value(s) not > 0 (first at row 1: inf)", "'size' > 0"),
    "intensity-above-1": (lambda d: d.assign(intensity=[0.5, 1.5, 0.5, 0.5, 0.5]),
                          "FILE: column 'intensity': 1 value(s) not in [0, 1] (first at row 1: 1.5)",
                          "'intensity' in [0, 1]"),
    "memory-too-large": (lambda d: d.assign(memory_mb=[1e9, 1, 1, 1, 1]),
                         "FILE: column 'memory_mb': 1 value(s) not > 0 and <= 64000 (largest device memory) "
                         "(first at row 0: 1000000000.0)",
                         "'memory_mb' > 0 and <= 64000 (largest device memory)"),
    "duplicate-id": (lambda d: d.assign(task_id=[0, 1, 1, 3, 3010]),
                     "FILE: column 'task_id': 1 value(s) duplicated (first at row 2: 1)", "'task_id' is unique"),
    "float-ids": (lambda d: d.assign(task_id=[0.0, 1.0, 2.5, 3.0, 4.0]),
                  "FILE: column 'task_id' is not an integer column (dtype float64; a missing or fractional value "
                  "makes it float)", "'task_id' is an integer"),
    "unsorted": (lambda d: d.assign(arrival=[0.0, 2.0, 1.0, 3.0, 4.0]),
                 "FILE: column 'arrival': 1 value(s) not sorted (decreasing) (first at row 2: 1.0)",
                 "'arrival' is non-decreasing (rows sorted by arrival)"),
    "text-size": (lambda d: d.assign(size=["a", 1, 1, 1, 1]),
                  "FILE: column 'size' is not numeric (dtype str; first at row 0: 'a')", "'size' is numeric"),
    "nan-priority": (lambda d: d.assign(priority=[0, np.nan, 1, 1, 1]),
                     "FILE: column 'priority' is not an integer column (dtype float64; a missing or fractional "
                     "value makes it float)", "'priority' has no missing (NaN) values"),
    "negative-deadline": (lambda d: d.assign(deadline=[np.nan, -1.0, 5.0, np.nan, 9.0]),
                          "FILE: column 'deadline': 1 value(s) not >= 0 where set (first at row 1: -1.0)",
                          "'deadline' >= 0 where set"),
    "dep-on-later-row": (lambda d: d.assign(deps=["", "2", "", "", ""]),
                         "FILE: column 'deps': row 1 (task 1) depends on task 2 (a later row), not the task_id of "
                         "an earlier row (1 such row(s); a dependency must arrive first, so no cycles)",
                         schema.DEPS_EARLIER[1]),
    "dep-cycle": (lambda d: d.assign(deps=["", "2", "1", "", ""]),
                  "FILE: column 'deps': row 1 (task 1) depends on task 2 (a later row), not the task_id of an "
                  "earlier row (1 such row(s); a dependency must arrive first, so no cycles)",
                  schema.DEPS_EARLIER[1]),
    "dep-unknown": (lambda d: d.assign(deps=["", "", "", "", "99"]),
                    "FILE: column 'deps': row 4 (task 4) depends on task 99 (unknown), not the task_id of an "
                    "earlier row (1 such row(s); a dependency must arrive first, so no cycles)",
                    schema.DEPS_EARLIER[1]),
    "dep-on-itself": (lambda d: d.assign(deps=["", "1", "", "", ""]),
                      "FILE: column 'deps': row 1 (task 1) depends on task 1 (itself), not the task_id of an "
                      "earlier row (1 such row(s); a dependency must arrive first, so no cycles)",
                      schema.DEPS_EARLIER[1]),
    "dep-not-ids": (lambda d: d.assign(deps=["", "0", "x", "", ""]),
                    "FILE: column 'deps': row 2 (task 2) not a list of task ids: 'x' (1 such row(s); a dependency "
                    "must arrive first, so no cycles)",
                    schema.DEPS_EARLIER[1]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_reader_and_validate_refuse_the_same_inputs(tmp_path: Path, case: str) -> None:
    mutate, message, check = CASES[case]
    bad = mutate(frame())
    path = tmp_path / "bad.csv"
    bad.to_csv(path, index=False)
    with pytest.raises(WorkloadError) as e:
        read_tasks(path, max_memory_mb=MAX_MB)
    got = as_documented(e.value, path)
    assert got == message
    assert_one_plain_line(got)
    assert_documented(message)
    entry = validate_frame(pd.read_csv(path), case, MAX_MB)
    assert entry["success"] is False and check in failed(entry), failed(entry)


def test_clean_frames_pass_both() -> None:
    train, _ = generate_splits(SMALL)
    df = train.to_frame()
    assert validate_frame(df, "clean", MAX_MB)["success"]
    pd.testing.assert_frame_equal(read_tasks_from(df).to_frame(), df)


def read_tasks_from(df: pd.DataFrame):
    from hybridsched.kinds.machine.workload import from_frame

    return from_frame(df, max_memory_mb=MAX_MB)


def test_empty_workload_fails_generate_validate_and_the_reader(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError) as e:
        generate_splits({**SMALL, "n_test": 0})
    msg = str(e.value)
    assert msg == "workload.n_test must be >= 1, got 0 (0 tasks: an empty workload has nothing to schedule)"
    assert_documented(msg)
    # an empty file made another way: validate says "0 tasks" on one line, the reader refuses it
    frame().iloc[:0].to_csv(tmp_path / "test.csv", index=False)
    report = validate_files({"test": tmp_path / "test.csv"}, MAX_MB)
    assert report["success"] is False
    lines = failure_summary(report).splitlines()
    assert lines[1] == f"  {tmp_path / 'test.csv'}: 0 tasks (an empty workload has nothing to schedule)"
    with pytest.raises(WorkloadError, match="0 tasks"):
        read_tasks(tmp_path / "test.csv")


def test_an_empty_split_from_simulate_bounds_is_never_reached(tmp_path: Path) -> None:
    """An empty test file never reaches simulate (bounds.lower_bound on 0 tasks would raise a
    traceback): the reader stops it first, with the file's name."""
    path = tmp_path / "test.parquet"
    frame().iloc[:0].to_parquet(path, index=False)
    with pytest.raises(WorkloadError, match=r"test.parquet: 0 tasks"):
        read_tasks(path)


def test_write_json_never_writes_nan(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    write_json(path, {"r2": float("nan"), "x": np.float64("inf"), "v": np.array([1.0, np.nan]), "n": np.int64(3)})

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in strict JSON")

    data = json.loads(path.read_text(), parse_constant=refuse)
    assert data == {"r2": None, "x": None, "v": [1.0, None], "n": 3}


def constant_cluster() -> tuple[np.ndarray, Cluster]:
    cluster = Cluster(n_gpus=2, noise_sigma=0.0)
    train, _ = generate_splits({**SMALL, "n_train": 60, "size_range": [10.0, 10.0], "intensity_range": [0.5, 0.5],
                                "memory_range": [100.0, 100.0], "dag_job_size": 0})
    return task_matrix(train, cluster), cluster


def test_constant_training_target_is_detected_and_reported(tmp_path: Path) -> None:
    X, cluster = constant_cluster()
    cfg = {"model": "random_forest", "seed": 0, "random_forest": {"n_estimators": 5}, "importance_repeats": 2}
    model, metrics = train_runtime_model(X, cluster, cfg)
    assert metrics["r2"] is None and metrics["constant_target"] == ["log_cpu_s", "log_gpu_s"]
    assert "falls back to EFT" in metrics["warning"]
    assert set(metrics["importance"].values()) == {0.0}
    write_json(tmp_path / "train_rf.json", metrics)
    assert "NaN" not in (tmp_path / "train_rf.json").read_text()
    # the fallback predicts exactly the training value, also after a save/load round trip
    save_model(model, tmp_path / "rf")
    loaded = load_model(tmp_path / "rf")
    pred = loaded.predict_seconds(X)
    assert np.all(pred == pred[0]) and np.allclose(pred[0], [X[0, 3], X[0, 4]])
    assert loaded.warning == model.warning


def test_hybrid_ml_warns_when_it_falls_back(tmp_path: Path) -> None:
    from hybridsched.kinds.machine.policies.hybrid_ml import HybridML

    X, cluster = constant_cluster()
    model, _ = train_runtime_model(X, cluster, {"model": "random_forest", "random_forest": {"n_estimators": 5}})
    save_model(model, tmp_path / "rf")
    policy = HybridML(model_dir=str(tmp_path / "rf"), online=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert "constant training target" in policy.warning
    assert any("falls back to EFT" in str(w.message) for w in caught)


def test_a_learned_model_has_no_warning() -> None:
    cluster = Cluster(n_gpus=2)
    train, _ = generate_splits({**SMALL, "n_train": 80})
    model, metrics = train_runtime_model(task_matrix(train, cluster), cluster,
                                         {"model": "random_forest", "random_forest": {"n_estimators": 5}})
    assert model.warning is None and "warning" not in metrics and math.isfinite(metrics["r2"])


# --- a user's own task file -----------------------------------------------------------------------


@pytest.mark.parametrize("via", ["table", "parquet"])
def test_the_projects_parquet_to_csv_round_trip_loads(tmp_path: Path, via: str) -> None:
    train, test = generate_splits(SMALL)
    df = train.to_frame()
    if via == "parquet":  # list cells come back as numpy arrays, which to_csv writes as "[0 1]"
        df.to_parquet(tmp_path / "w.parquet", index=False)
        df = pd.read_parquet(tmp_path / "w.parquet")
    df.to_csv(tmp_path / "w.csv", index=False)
    assert "[]" in (tmp_path / "w.csv").read_text()  # the spelling to_csv writes for an empty list
    back = read_tasks(tmp_path / "w.csv")
    np.testing.assert_array_equal(back.parent_idx, train.parent_idx)
    np.testing.assert_array_equal(back.parent_ptr, train.parent_ptr)
    tr, te = load_splits({"path": str(tmp_path / "w.csv"), "split": {"test_fraction": 0.25}})
    assert len(tr) + len(te) == len(train) and len(te) == 10
    assert tr.arrival[0] == 0 and te.arrival[0] == 0  # each part starts at 0


def test_split_column_and_report(tmp_path: Path) -> None:
    df = frame(6).assign(deps=["", "0", "1", "", "3", "2"], part=["train", "train", "test", "train", "test", "test"])
    df.to_parquet(tmp_path / "mine.parquet", index=False)
    train, test, report = load_with_report({"path": str(tmp_path / "mine.parquet"), "split": {"column": "part"}})
    assert train.task_id.tolist() == [0, 1, 3] and test.task_id.tolist() == [2, 4, 5]
    assert test.parents(2).tolist() == [0]  # task 5 -> task 2 stays; 2 -> 1 and 4 -> 3 cross the split
    assert report["deps_cut_by_split"] == 2 and report["split"] == {"column": "part", "train": 3, "test": 3}
    assert report["format"] == "parquet"


FILE_CASES = {
    "no-path": ({}, "workload.path: not set (the csv or parquet task file to read)"),
    "bad-suffix": ({"path": "FILE"}, "workload.format: cannot tell the format of FILE from its suffix; set "
                                     "workload.format to one of csv, parquet"),
    "bad-format": ({"path": "FILE", "format": "json"}, "workload.format must be one of csv, parquet, got 'json'"),
    "bad-fraction": ({"path": "FILE", "format": "csv", "split": {"test_fraction": 1.0}},
                     "workload.split.test_fraction must be in (0, 1), got 1.0"),
    "no-split-column": ({"path": "FILE", "format": "csv", "split": {"column": "part"}},
                        "FILE: no column 'part' (workload.split.column)"),
    "bad-split-value": ({"path": "FILE", "format": "csv", "split": {"column": "task_id"}},
                        "FILE: column 'task_id' (workload.split.column): 5 value(s) not 'train' or 'test' "
                        "(first at row 0: '0')"),
    "empty-test-part": ({"path": "FILE", "format": "csv", "split": {"test_fraction": 0.01}},
                        "FILE: the test split has 0 tasks (workload.split {'test_fraction': 0.01}; 5 tasks in the "
                        "file)"),
}


@pytest.mark.parametrize("case", list(FILE_CASES))
def test_bad_file_workload_settings(tmp_path: Path, case: str) -> None:
    cfg, message = FILE_CASES[case]
    path = tmp_path / "tasks.txt"
    frame().to_csv(path, index=False)
    cfg = {k: (str(path) if v == "FILE" else v) for k, v in cfg.items()}
    with pytest.raises(HybridschedError) as e:
        load_splits(cfg)
    got = as_documented(e.value, path)
    assert got == message
    assert_one_plain_line(got)
    assert_documented(message)


def test_the_example_file_config_is_complete() -> None:
    import yaml

    cfg = yaml.safe_load((Path(__file__).resolve().parents[2] / "conf" / "workload" / "file.yaml").read_text())
    assert cfg["kind"] == "machine" and cfg["name"] == "file"
    assert set(cfg) >= {"path", "format", "split"} and set(cfg["split"]) == {"test_fraction", "column"}


def test_the_documented_example_file_loads(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "bad-input.md").read_text()
    csv = doc.split("```csv\n", 1)[1].split("```", 1)[0]
    (tmp_path / "mine.csv").write_text(csv)
    train, test, report = load_with_report({"path": str(tmp_path / "mine.csv"), "split": {"column": "part"}})
    assert train.task_id.tolist() == [0, 1, 3] and test.task_id.tolist() == [2, 4, 5]
    assert report["deps_cut_by_split"] == 3 and test.parents(2).tolist() == [0]
    assert np.isnan(test.deadline).all() and train.deadline[1] == 30.0
