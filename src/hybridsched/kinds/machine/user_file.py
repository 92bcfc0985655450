"""A user's own task file as the machine kind's workload (``workload=file``, conf/workload/file.yaml).

The file (csv or parquet, the task schema of ``schema.py``: the same checks as the project's
own splits) is read whole, then split into train and test by one of two rules:

* ``split.column``: a column whose value is ``train`` or ``test`` on every row;
* ``split.test_fraction`` (default 0.5): chronological, the last fraction of the tasks by
  arrival is the test set (no task of the future leaks into training).

Each part is shifted to start at arrival 0 (deadlines move with it), and a dependency on a
task of the other part is dropped (counted in the report: the generate stage writes it to
``metrics/import_report.json``).  The generate stage writes the parts as it writes generated
ones, so validate and every later stage see the same two files either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybridsched.errors import WorkloadError
from hybridsched.kinds.machine.workload import TaskTable, read_tasks

FORMATS = ("csv", "parquet")
SPLITS = ("train", "test")


def file_format(workload: dict) -> str:
    """``workload.format``, or the file's suffix when it is null."""
    fmt = workload.get("format")
    if fmt is None:
        fmt = Path(str(workload["path"])).suffix.lstrip(".").lower()
        if fmt not in FORMATS:
            raise WorkloadError(f"workload.format: cannot tell the format of {workload['path']} from its suffix; "
                                f"set workload.format to one of {', '.join(FORMATS)}")
    if fmt not in FORMATS:
        raise WorkloadError(f"workload.format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return str(fmt)


def load_splits(workload: dict, max_memory_mb: float | None = None) -> tuple[TaskTable, TaskTable]:
    """``(train, test)`` from the task file ``workload.path`` (see the module docstring)."""
    train, test, _ = load_with_report(workload, max_memory_mb)
    return train, test


def load_with_report(workload: dict, max_memory_mb: float | None = None) -> tuple[TaskTable, TaskTable, dict]:
    """:func:`load_splits` plus the import report (what was read, the split, cut dependencies)."""
    if not workload.get("path"):
        raise WorkloadError("workload.path: not set (the csv or parquet task file to read)")
    path = Path(str(workload["path"]))
    fmt = file_format(workload)
    tasks = read_tasks(path, max_memory_mb=max_memory_mb, fmt=fmt)
    split = dict(workload.get("split") or {})
    unknown = set(split) - {"column", "test_fraction"}
    if unknown:
        raise WorkloadError(f"workload.split: unknown key(s) {sorted(unknown)}; known: column, test_fraction")
    if split.get("column"):
        is_test = _split_column(path, fmt, str(split["column"]))
        rule: dict[str, Any] = {"column": str(split["column"])}
    else:
        frac = float(split.get("test_fraction", 0.5))
        if not 0 < frac < 1:
            raise WorkloadError(f"workload.split.test_fraction must be in (0, 1), got {frac}")
        n_test = int(round(frac * len(tasks)))
        is_test = np.arange(len(tasks)) >= len(tasks) - n_test
        rule = {"test_fraction": frac}
    parts = {}
    for name, rows in zip(SPLITS, (np.flatnonzero(~is_test), np.flatnonzero(is_test)), strict=True):
        if len(rows) == 0:
            raise WorkloadError(f"{path}: the {name} split has 0 tasks (workload.split {rule}; {len(tasks)} tasks "
                                f"in the file)")
        parts[name] = _shifted(tasks.subset(rows))
    n_deps = len(tasks.parent_idx)
    kept = sum(len(p.parent_idx) for p in parts.values())
    report = {"kind": "machine", "source": "file", "workload": workload.get("name"), "path": str(path),
              "format": fmt, "rows_read": len(tasks), "split": {**rule, **{n: len(p) for n, p in parts.items()}},
              "deps_cut_by_split": int(n_deps - kept)}
    return parts["train"], parts["test"], report


def _split_column(path: Path, fmt: str, column: str) -> np.ndarray:
    """Per row: True for ``test``; WorkloadError for a missing column or another value."""
    df = pd.read_csv(path) if fmt == "csv" else pd.read_parquet(path)
    if column not in df.columns:
        raise WorkloadError(f"{path}: no column {column!r} (workload.split.column)")
    values = df[column].astype(str).str.strip()
    bad = ~values.isin(SPLITS)
    if bad.any():
        r = int(np.flatnonzero(bad.to_numpy())[0])
        raise WorkloadError(f"{path}: column {column!r} (workload.split.column): {int(bad.sum())} value(s) not "
                            f"'train' or 'test' (first at row {r}: {values.iloc[r]!r})")
    return (values == "test").to_numpy()


def _shifted(part: TaskTable) -> TaskTable:
    """The part with arrivals (and deadlines) moved so the first task arrives at 0."""
    t0 = float(part.arrival[0])
    part.arrival = part.arrival - t0
    part.deadline = part.deadline - t0
    return part
