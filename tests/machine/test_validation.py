"""The validate stage: the Great Expectations suite passes clean workloads and names every problem."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybridsched.kinds.machine.validation import DEPS_CHECK_COLUMN, deps_not_earlier, validate_files, validate_frame
from hybridsched.validation import failure_summary
from hybridsched.kinds.machine.workload import generate_splits

ROOT = Path(__file__).resolve().parents[2]
MAX_MEMORY_MB = 64000.0
WORKLOAD = {"seed": 3, "n_train": 300, "n_test": 200, "rate": 6.0, "size_range": [1.0, 400.0],
            "intensity_range": [0.0, 1.0], "memory_range": [50.0, 12000.0], "dag_job_size": 10, "dag_max_parents": 2}


@pytest.fixture(scope="module")
def frames() -> dict[str, pd.DataFrame]:
    train, test = generate_splits(WORKLOAD)
    return {"train": train.to_frame(), "test": test.to_frame()}


def write_workload(folder: Path, frames: dict[str, pd.DataFrame]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, df in frames.items():
        df.to_parquet(folder / f"{name}.parquet", index=False)
    return folder


def failed_checks(entry: dict) -> dict[str, dict]:
    return {e["check"]: e for e in entry["expectations"] if not e["success"]}


def run_validate_stage(workload_dir: Path, metrics_dir: Path, run_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GX_ANALYTICS_ENABLED": "false"}
    return subprocess.run(
        [sys.executable, "-m", "stages.validate", f"paths.workload_dir={workload_dir}",
         f"paths.metrics_dir={metrics_dir}", f"hydra.run.dir={run_dir}", "hydra.output_subdir=null",
         "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )


def test_clean_generated_workload_passes(tmp_path: Path, frames) -> None:
    folder = write_workload(tmp_path / "w", frames)
    report = validate_files({n: folder / f"{n}.parquet" for n in frames}, MAX_MEMORY_MB)
    assert report["success"] is True
    for name, entry in report["files"].items():
        assert entry["success"] and entry["n_failed"] == 0 and entry["n_rows"] == len(frames[name])
        checks = {e["check"] for e in entry["expectations"]}
        assert "'task_id' is unique" in checks and "every id in 'deps' is the task_id of an earlier row" in checks
        assert len(checks) == len(entry["expectations"]) >= 20
    json.dumps(report, allow_nan=False)  # strict JSON: DVC and other readers reject NaN


def test_deps_check_flags_unknown_and_later_ids() -> None:
    df = pd.DataFrame({"task_id": [10, 11, 12, 13],
                       "deps": [np.array([], dtype=np.int64), np.array([10]), np.array([13]), np.array([10, 99])]})
    assert deps_not_earlier(df).tolist() == ["", "", "13", "99"]
    csv_style = pd.DataFrame({"task_id": [1, 2], "deps": [None, "1;5"]})
    assert deps_not_earlier(csv_style).tolist() == ["", "5"]


@pytest.mark.parametrize(
    ("corrupt", "check"),
    [
        (lambda df: df.assign(arrival=df["arrival"].to_numpy()[::-1]), "'arrival' is non-decreasing (rows sorted by arrival)"),
        (lambda df: df.assign(memory_mb=df["memory_mb"].where(df.index != 4, MAX_MEMORY_MB * 2)),
         f"'memory_mb' > 0 and <= {MAX_MEMORY_MB:g} (largest device memory)"),
        (lambda df: df.assign(deps=[[int(df['task_id'].iloc[-1])]] + df["deps"].tolist()[1:]),
         "every id in 'deps' is the task_id of an earlier row"),
        (lambda df: df.assign(task_id=df["task_id"].astype(float)), "'task_id' is an integer"),
        (lambda df: df.assign(intensity=df["intensity"].where(df.index != 2, 1.5)), "'intensity' in [0, 1]"),
    ],
    ids=["arrival-decreasing", "memory-too-large", "dep-on-later-task", "float-ids", "intensity-above-1"],
)
def test_each_kind_of_bad_data_fails_its_expectation(frames, corrupt, check: str) -> None:
    entry = validate_frame(corrupt(frames["train"]), "train", MAX_MEMORY_MB)
    assert entry["success"] is False
    assert check in failed_checks(entry)
    assert DEPS_CHECK_COLUMN not in frames["train"].columns  # the derived column stays out of the caller's frame


def test_missing_file_is_a_failed_entry_not_a_crash(tmp_path: Path, frames) -> None:
    folder = write_workload(tmp_path / "w", {"train": frames["train"]})
    report = validate_files({"train": folder / "train.parquet", "test": folder / "test.parquet"}, MAX_MEMORY_MB)
    assert report["files"]["train"]["success"] and not report["files"]["test"]["success"]
    assert "test.parquet: file not found" in failure_summary(report)


@pytest.mark.slow
def test_stage_exits_non_zero_and_names_each_problem(tmp_path: Path, frames) -> None:
    bad = frames["train"].copy()
    bad.loc[3, "size"] = -5.0
    bad.loc[5, "intensity"] = np.nan
    bad.loc[8, "task_id"] = bad.loc[7, "task_id"]  # task 9 depends on 8: its dep is now unknown too
    bad = bad.drop(columns=["memory_mb"])
    folder = write_workload(tmp_path / "w", {"train": bad, "test": frames["test"]})
    metrics = tmp_path / "metrics"

    proc = run_validate_stage(folder, metrics, tmp_path / "run")

    assert proc.returncode == 1, proc.stderr
    err = proc.stderr
    assert "train.parquet: 5 of" in err and "test.parquet" not in err.split("details:")[0]
    for problem in ["column 'memory_mb' exists", "column missing",
                    "'size' > 0", "-5.0 (task_id 3)",
                    "'intensity' has no missing (NaN) values", "nan (task_id 5)",
                    "'task_id' is unique", "e.g. 7, 7",
                    "every id in 'deps' is the task_id of an earlier row", "8 (task_id 9)"]:
        assert problem in err, f"{problem!r} not in:\n{err}"
    assert "Traceback" not in err
    # the report is complete JSON (written atomically), with no temp file left beside it
    assert sorted(p.name for p in metrics.iterdir()) == ["validation.json"]
    report = json.loads((metrics / "validation.json").read_text())
    assert report["success"] is False
    assert report["files"]["test"]["success"] is True
    assert set(failed_checks(report["files"]["train"])) == {
        "column 'memory_mb' exists", "'size' > 0", "'intensity' has no missing (NaN) values", "'task_id' is unique",
        "every id in 'deps' is the task_id of an earlier row"}


@pytest.mark.slow
def test_stage_passes_a_clean_workload(tmp_path: Path, frames) -> None:
    folder = write_workload(tmp_path / "w", frames)
    proc = run_validate_stage(folder, tmp_path / "metrics", tmp_path / "run")
    assert proc.returncode == 0, proc.stderr
    assert "expectations passed on 300 rows" in proc.stdout
    assert json.loads((tmp_path / "metrics" / "validation.json").read_text())["success"] is True
