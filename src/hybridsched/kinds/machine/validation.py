"""The Great Expectations suite for workload files, and its report.

Every workload file (parquet, or csv with ``;``-separated ``deps``) is checked against the
task schema of ``schema.py`` - the same rules the reader (``workload.from_frame``) enforces,
so a file that passes validate loads in every stage and one that fails is refused by both:
at least one task, the required columns exist with their types, nothing is missing,
``size > 0``, ``intensity`` in [0, 1], ``0 < memory_mb <=`` the largest device memory,
``task_id`` unique, ``arrival`` non-decreasing, ``priority`` a whole number, ``deadline >= 0``
where set, and every id in ``deps`` names a task of an earlier row.

Great Expectations runs on an ephemeral (in-memory) context with analytics and progress
bars off; it is imported inside the functions because the import takes seconds.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybridsched.kinds.machine import schema
from hybridsched.kinds.machine.schema import REQUIRED_COLUMNS

INTEGER_TYPES = ["int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8", "Int64", "Int32"]
NUMERIC_TYPES = ["float64", "float32", "Float64", "Float32", *INTEGER_TYPES]
# A derived column: the ids in ``deps`` that are not tasks of earlier rows ("" = all fine).
DEPS_CHECK_COLUMN = "deps_not_earlier"
N_EXAMPLES = 5


def _gx():
    # analytics off before the import reads the variable; the Makefile exports it too
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    import great_expectations.expectations as gxe

    return gx, gxe


def ephemeral_context():
    """An in-memory Great Expectations context with analytics and progress bars off."""
    gx, _ = _gx()
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
    )
    return gx.get_context(mode="ephemeral", project_config=config)


def deps_not_earlier(df: pd.DataFrame) -> pd.Series:
    """Per row, the ids in ``deps`` that are not the ``task_id`` of an earlier row, as ``"3;7"``
    (``""`` where every dependency is fine, or the row has none); ``schema.deps_problems``,
    which the reader uses too."""
    if "deps" not in df.columns:
        return pd.Series([""] * len(df), index=df.index, dtype=object)
    ids = df["task_id"].tolist() if "task_id" in df.columns else [None] * len(df)
    return pd.Series(schema.deps_problems(ids, df["deps"].tolist()), index=df.index, dtype=object)


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
                   suite_builder: Callable[[list[str], float], list[Any]] | None = None) -> dict[str, Any]:
    """Run the suite on one task table; the per-file part of metrics/validation.json.
    ``suite_builder(columns, max_memory_mb)`` replaces ``build_suite`` for another schema
    (the Alibaba pod tables: ``kinds/cluster/validation.py``)."""
    gx, _ = _gx()
    context = context or ephemeral_context()
    data = df.copy()
    if "deps" in data.columns:
        data[DEPS_CHECK_COLUMN] = deps_not_earlier(data)
    expectations = (suite_builder or build_suite)(list(df.columns), max_memory_mb)
    suite = context.suites.add(gx.ExpectationSuite(name=f"workload:{name}", expectations=expectations))
    asset = context.data_sources.add_pandas(f"source:{name}").add_dataframe_asset(name)
    batch = asset.add_batch_definition_whole_dataframe("whole").get_batch(batch_parameters={"dataframe": data})
    result_format: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": N_EXAMPLES}
    if "task_id" in data.columns:
        result_format["unexpected_index_column_names"] = ["task_id"]
    run = batch.validate(suite, result_format=result_format)
    order = {e.meta["check"]: k for k, e in enumerate(expectations)}
    rows = sorted((_expectation_row(r) for r in run.results), key=lambda row: order.get(row["check"], len(order)))
    return {"success": bool(run.success), "n_rows": len(df), "n_failed": sum(not r["success"] for r in rows),
            "expectations": rows}


def _expectation_row(r: Any) -> dict[str, Any]:
    cfg = r.expectation_config
    kwargs = {k: v for k, v in cfg.kwargs.items() if k != "batch_id"}
    res = r.result or {}
    exc = (r.exception_info or {}) if isinstance(r.exception_info, dict) else {}
    if "exception_message" not in exc:  # keyed by metric when a metric raised
        exc = next((v for v in exc.values() if isinstance(v, dict) and v.get("raised_exception")), {})
    rows = res.get("partial_unexpected_index_list") or []
    return {
        "check": (cfg.meta or {}).get("check", cfg.type),
        "expectation": cfg.type,
        "column": kwargs.get("column"),
        "kwargs": _plain(kwargs),
        "success": bool(r.success),
        "unexpected_count": res.get("unexpected_count"),
        "unexpected_percent": _plain(res.get("unexpected_percent")),
        "observed_value": _plain(res.get("observed_value")),
        "examples": _plain(res.get("partial_unexpected_list", [])[:N_EXAMPLES]),
        "example_task_ids": _plain([row.get("task_id") for row in rows[:N_EXAMPLES]]),
        "exception": exc.get("exception_message") if exc.get("raised_exception") else None,
    }


def _plain(v: Any) -> Any:
    """JSON-safe values: numpy scalars to Python, NaN/inf to strings (JSON has no NaN)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple | np.ndarray):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def read_frame(path: Path) -> pd.DataFrame:
    """A workload file as read, without any checks (those are the suite's job)."""
    return pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)


def validate_files(paths: dict[str, str | Path], max_memory_mb: float,
                   suite_builder: Callable[[list[str], float], list[Any]] | None = None) -> dict[str, Any]:
    """Validate each named workload file; the whole metrics/validation.json content.

    A file that is missing or unreadable is a failed entry with an ``error``, not an
    exception, so the report always covers every file.
    """
    context = ephemeral_context()
    files: dict[str, Any] = {}
    for name, p in paths.items():
        path = Path(p)
        entry: dict[str, Any] = {"path": str(path)}
        try:
            df = read_frame(path)
        except FileNotFoundError:
            entry.update(success=False, error="file not found", n_failed=1, expectations=[])
        except Exception as e:  # parser errors differ by format; keep the message to one line
            entry.update(success=False, error=f"cannot read: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
                         n_failed=1, expectations=[])
        else:
            entry.update(validate_frame(df, name, max_memory_mb, context, suite_builder))
        files[name] = entry
    return {"success": all(f["success"] for f in files.values()), "max_memory_mb": float(max_memory_mb),
            "files": files}


def failure_summary(report: dict[str, Any]) -> str:
    """A multi-line summary naming each failing file and each failed expectation."""
    bad = {n: f for n, f in report["files"].items() if not f["success"]}
    lines = [f"workload validation failed for {len(bad)} of {len(report['files'])} file(s):"]
    for f in bad.values():
        if f.get("error"):
            lines.append(f"  {f['path']}: {f['error']}")
            continue
        if f.get("n_rows") == 0:  # every column check passes vacuously; only the count matters
            lines.append(f"  {f['path']}: 0 tasks (an empty workload has nothing to schedule)")
            continue
        lines.append(f"  {f['path']}: {f['n_failed']} of {len(f['expectations'])} expectations failed")
        for e in f["expectations"]:
            if not e["success"]:
                lines.append(f"    - {e['check']} [{e['expectation']}]: {_what_failed(e, f['n_rows'])}")
    return "\n".join(lines)


def _what_failed(e: dict[str, Any], n_rows: int) -> str:
    if e["exception"]:
        return f"could not be checked: {e['exception']}"
    if e["expectation"] == "expect_column_to_exist":
        return "column missing"
    if e["expectation"] == "expect_table_row_count_to_be_between":
        return f"{_plain(e['observed_value'])} tasks"
    if e["unexpected_count"] is None:
        return f"observed {e['observed_value']!r}"
    text = f"{e['unexpected_count']} of {n_rows} rows fail"
    if e["examples"]:
        ids = e["example_task_ids"] if e["column"] != "task_id" else []
        ids = ids or [None] * len(e["examples"])
        shown = [str(v) if t is None else f"{v} (task_id {t})" for v, t in zip(e["examples"], ids, strict=False)]
        text += ", e.g. " + ", ".join(shown[:3])
    return text
