"""The Great Expectations suite for the machine kind's task files.

Every workload file (parquet, or csv with ``;``-separated ``deps``) is checked against the
task schema of ``schema.py`` - the same rules the reader (``workload.from_frame``) enforces,
so a file that passes validate loads in every stage and one that fails is refused by both:
at least one task, the required columns exist with their types, nothing is missing,
``size > 0``, ``intensity`` in [0, 1], ``0 < memory_mb <=`` the largest device memory,
``task_id`` unique, ``arrival`` non-decreasing, ``priority`` a whole number, ``deadline >= 0``
where set, and every id in ``deps`` names a task of an earlier row.

The suite runs through the runner every kind shares (``hybridsched/validation.py``), which
also writes the report's shape and its failure summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from hybridsched import validation as gx_runner
from hybridsched.kinds.machine import schema
from hybridsched.kinds.machine.schema import REQUIRED_COLUMNS
from hybridsched.validation import INTEGER_TYPES, NUMERIC_TYPES, SuiteBuilder, _gx

# A derived column: the ids in ``deps`` that are not tasks of earlier rows ("" = all fine).
DEPS_CHECK_COLUMN = "deps_not_earlier"


def deps_not_earlier(df: pd.DataFrame) -> pd.Series:
    """Per row, the ids in ``deps`` that are not the ``task_id`` of an earlier row, as ``"3;7"``
    (``""`` where every dependency is fine, or the row has none); ``schema.deps_problems``,
    which the reader uses too."""
    if "deps" not in df.columns:
        return pd.Series([""] * len(df), index=df.index, dtype=object)
    ids = df["task_id"].tolist() if "task_id" in df.columns else [None] * len(df)
    return pd.Series(schema.deps_problems(ids, df["deps"].tolist()), index=df.index, dtype=object)


def with_deps_check(data: pd.DataFrame) -> pd.DataFrame:
    """``data`` with the :data:`DEPS_CHECK_COLUMN` that the suite's deps expectation reads."""
    if "deps" in data.columns:
        data[DEPS_CHECK_COLUMN] = deps_not_earlier(data)
    return data


def build_suite(columns: list[str], max_memory_mb: float) -> list[Any]:
    """The expectations for a frame with these columns, generated from ``schema.TASK_SCHEMA`` (the
    reader's rules too), each with a readable ``meta["check"]``.  Checks of a missing column are
    left to its ``column exists`` expectation (running them would only raise)."""
    _, gxe = _gx()

    def expect(label: str, cls: Any, **kw: Any) -> Any:
        return cls(meta={"check": label}, **kw)

    present = set(columns)
    suite = [expect(schema.NOT_EMPTY, gxe.ExpectTableRowCountToBeBetween, min_value=schema.MIN_TASKS)]
    suite += [expect(f"column '{c}' exists", gxe.ExpectColumnToExist, column=c) for c in REQUIRED_COLUMNS]
    for rule in schema.TASK_SCHEMA:
        if rule.name not in present or rule.dtype == "ids":
            continue
        c = rule.name
        suite.append(expect(schema.type_label(rule), gxe.ExpectColumnValuesToBeInTypeList, column=c,
                            type_list=INTEGER_TYPES if rule.dtype == "int" else NUMERIC_TYPES))
        if not rule.nullable:
            suite.append(expect(schema.null_label(rule), gxe.ExpectColumnValuesToNotBeNull, column=c))
        label = schema.range_label(rule, max_memory_mb)
        if label is not None:
            lo, hi = rule.limits(max_memory_mb)
            suite.append(expect(label, gxe.ExpectColumnValuesToBeBetween, column=c, min_value=lo, max_value=hi,
                                strict_min=rule.min_strict))
    if "arrival" in present:
        suite.append(expect(schema.SORTED[1], gxe.ExpectColumnValuesToBeIncreasing, column="arrival", strictly=False))
    if "task_id" in present:
        suite.append(expect(schema.UNIQUE[1], gxe.ExpectColumnValuesToBeUnique, column="task_id"))
    if "deps" in present:
        suite.append(expect(schema.DEPS_EARLIER[1], gxe.ExpectColumnValuesToBeInSet, column=DEPS_CHECK_COLUMN,
                            value_set=[""]))
    return suite


def validate_frame(df: pd.DataFrame, name: str, max_memory_mb: float, context: Any = None,
                   suite_builder: SuiteBuilder | None = None) -> dict[str, Any]:
    """Run the task-table suite on one table; the per-file part of metrics/validation.json."""
    return gx_runner.validate_frame(df, name, max_memory_mb, context, suite_builder or build_suite, with_deps_check)


def validate_files(paths: dict[str, str | Path], max_memory_mb: float,
                   suite_builder: SuiteBuilder | None = None) -> dict[str, Any]:
    """Validate each named task file (the shared runner with this suite); metrics/validation.json."""
    return gx_runner.validate_files(paths, max_memory_mb, suite_builder or build_suite, with_deps_check)
