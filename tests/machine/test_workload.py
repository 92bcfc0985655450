"""Workload files: round trip and one clear error per kind of bad input."""

import numpy as np
import pandas as pd
import pytest

from hybridsched.errors import WorkloadError
from hybridsched.kinds.machine.workload import from_frame, read_tasks
from tests.conftest import small_workload


def _frame(n=5):
    return pd.DataFrame({"task_id": np.arange(n), "arrival": np.arange(n, dtype=float), "size": np.full(n, 10.0),
                         "intensity": np.full(n, 0.5), "memory_mb": np.full(n, 100.0)})


def test_parquet_round_trip_keeps_every_field(tmp_path):
    t = small_workload(50, dag_job_size=10)
    t.to_frame().to_parquet(tmp_path / "w.parquet")
    r = read_tasks(tmp_path / "w.parquet")
    for f in ("task_id", "arrival", "size", "intensity", "memory_mb", "priority"):
        np.testing.assert_array_equal(getattr(r, f), getattr(t, f))
    np.testing.assert_array_equal(r.parent_idx, t.parent_idx)
    assert r.has_deps


def test_csv_deps_as_semicolon_lists(tmp_path):
    df = _frame(3)
    df["deps"] = ["", "0", "0;1"]
    df.to_csv(tmp_path / "w.csv", index=False)
    r = read_tasks(tmp_path / "w.csv")
    assert r.parents(2).tolist() == [0, 1]
    child_ptr, child_idx = r.children_csr()
    assert child_idx[child_ptr[0]:child_ptr[1]].tolist() == [1, 2]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.drop(columns="size"), "missing column(s) size"),
        (lambda d: d.assign(intensity=[0.5, np.nan, 0.5, 0.5, 0.5]), "'intensity': 1 value(s) NaN"),
        (lambda d: d.assign(size=[1.0, 2.0, -3.0, 4.0, 5.0]), "'size': 1 value(s) not > 0 (first at row 2"),
        (lambda d: d.assign(intensity=[0.5, 1.5, 0.5, 0.5, 0.5]), "not in [0, 1]"),
        (lambda d: d.assign(memory_mb=[1e9, 1, 1, 1, 1]), "not > 0 and <= 64000 (largest device memory)"),
        (lambda d: d.assign(task_id=[0, 1, 1, 3, 4]), "'task_id': 1 value(s) duplicated"),
        (lambda d: d.assign(arrival=[0.0, 2.0, 1.0, 3.0, 4.0]), "not sorted"),
        (lambda d: d.assign(size=["a", 1, 1, 1, 1]), "'size' is not numeric"),
        (lambda d: d.assign(deps=["", "2", "1", "", ""]), "depends on task 2 (a later row), not the task_id of an earlier row"),
        (lambda d: d.assign(deps=["", "", "", "", "99"]), "depends on task 99 (unknown)"),
        (lambda d: d.assign(deps=["", "1", "", "", ""]), "depends on task 1 (itself)"),
    ],
)
def test_bad_input_names_file_column_and_problem(tmp_path, mutate, message):
    path = tmp_path / "bad.csv"
    mutate(_frame()).to_csv(path, index=False)
    with pytest.raises(WorkloadError) as e:
        read_tasks(path, max_memory_mb=64000)
    assert str(path) in str(e.value) and message in str(e.value)
    assert "\n" not in str(e.value)


def test_unreadable_and_missing_files(tmp_path):
    bad = tmp_path / "w.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(WorkloadError, match="cannot read"):
        read_tasks(bad)
    with pytest.raises(WorkloadError, match="file not found"):
        read_tasks(tmp_path / "missing.parquet")


def test_subset_drops_dependencies_on_removed_tasks():
    t = from_frame(_frame(3).assign(deps=["", "0", "1"]))
    s = t.subset(np.array([1, 2]))
    assert s.parents(0).tolist() == [] and s.parents(1).tolist() == [0]
