"""The Great Expectations runner every kind's validate stage shares, and its report.

A kind brings its expectation suite as a ``suite_builder(columns, max_memory_mb)`` (the machine
kind's task tables: ``kinds/machine/validation.py``, the cluster kind's pod tables:
``kinds/cluster/validation.py``, the serving kind's requests: ``kinds/serving/validation.py``);
:func:`validate_files` runs it on each file and returns the metrics/validation.json content,
with one entry per file (a missing or unreadable file is a failed entry, not an exception), and
:func:`failure_summary` turns a failed report into the lines the stages print.

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

# Every kind's tables: at least one row (an empty workload has nothing to schedule).
MIN_TASKS = 1
NOT_EMPTY = f"at least {MIN_TASKS} task"
INTEGER_TYPES = ["int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8", "Int64", "Int32"]
NUMERIC_TYPES = ["float64", "float32", "Float64", "Float32", *INTEGER_TYPES]
N_EXAMPLES = 5
# A table longer than this is validated a slice at a time: Great Expectations holds several
# copies of what it checks (12.8 GB RSS on 2 million rows at once).  The whole-column checks a
# slice cannot see (uniqueness, order across slice boundaries) are completed on the whole
# column afterwards (:func:`merge_chunks`).
CHUNK_ROWS = 200_000
# (columns, max_memory_mb) -> the expectations; frame -> the frame with derived columns
SuiteBuilder = Callable[[list[str], float], list[Any]]
Derive = Callable[[pd.DataFrame], pd.DataFrame]


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


def validate_frame(df: pd.DataFrame, name: str, max_memory_mb: float, context: Any,
                   suite_builder: SuiteBuilder, derive: Derive | None = None) -> dict[str, Any]:
    """Run the suite ``suite_builder(columns, max_memory_mb)`` on one table; the per-file part of
    metrics/validation.json.  ``derive(frame)`` adds the derived columns a suite checks (the
    machine kind's ``deps`` check) to a copy of the table.  A table of more than
    :data:`CHUNK_ROWS` rows is checked a slice at a time (derived columns from the whole table)."""
    gx, _ = _gx()
    context = context or ephemeral_context()
    data = df.copy()
    if derive is not None:
        data = derive(data)
    expectations = suite_builder(list(df.columns), max_memory_mb)
    suite = context.suites.add(gx.ExpectationSuite(name=f"workload:{name}", expectations=expectations))
    asset = context.data_sources.add_pandas(f"source:{name}").add_dataframe_asset(name)
    batches = asset.add_batch_definition_whole_dataframe("whole")
    result_format: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": N_EXAMPLES}
    if "task_id" in data.columns:
        result_format["unexpected_index_column_names"] = ["task_id"]
    order = {e.meta["check"]: k for k, e in enumerate(expectations)}
    starts = range(0, max(len(data), 1), CHUNK_ROWS)
    chunks, success = [], True
    for start in starts:
        part = data if len(starts) == 1 else data.iloc[start:start + CHUNK_ROWS]
        run = batches.get_batch(batch_parameters={"dataframe": part}).validate(suite, result_format=result_format)
        success = success and bool(run.success)
        chunks.append(sorted((_expectation_row(r) for r in run.results),
                             key=lambda row: order.get(row["check"], len(order))))
    rows = chunks[0] if len(chunks) == 1 else merge_chunks(chunks, data, list(starts))
    return {"success": success and all(r["success"] for r in rows), "n_rows": len(df),
            "n_failed": sum(not r["success"] for r in rows), "expectations": rows}


def merge_chunks(chunks: list[list[dict[str, Any]]], data: pd.DataFrame, starts: list[int]) -> list[dict[str, Any]]:
    """One report row per expectation from the rows of each slice: counts summed, the first
    examples kept, the row count the table's; uniqueness and order, which a slice sees only
    within itself, checked on the whole column."""
    n = len(data)
    out = []
    for rows in zip(*chunks, strict=True):
        row = dict(rows[0])
        counts = [r["unexpected_count"] for r in rows if r["unexpected_count"] is not None]
        failing = [r for r in rows if not r["success"]]
        row["success"] = not failing
        row["exception"] = next((r["exception"] for r in rows if r["exception"]), None)
        row["observed_value"] = (failing or list(rows))[0]["observed_value"]
        if row["expectation"] == "expect_table_row_count_to_be_between":
            row["observed_value"] = n
        row["examples"] = [x for r in rows for x in r["examples"]][:N_EXAMPLES]
        row["example_task_ids"] = [x for r in rows for x in r["example_task_ids"]][:N_EXAMPLES]
        if counts:
            row["unexpected_count"] = int(sum(counts))
        column = row.get("column")
        if isinstance(column, str) and column in data.columns and row["expectation"] == "expect_column_values_to_be_unique":
            bad = data[column].duplicated(keep=False).to_numpy()
            _whole_column(row, data, column, bad)
        elif column in data.columns and row["expectation"] == "expect_column_values_to_be_increasing":
            values = data[column].to_numpy()
            bad = np.zeros(n, dtype=bool)
            for s in starts[1:]:  # the first row of each slice against the last of the one before
                bad[s] = values[s] < values[s - 1]
            if bad.any():
                extra = int(bad.sum())
                row["success"] = False
                row["unexpected_count"] = int(row["unexpected_count"] or 0) + extra
                if len(row["examples"]) < N_EXAMPLES:
                    row["examples"] = (row["examples"] + _plain(values[bad].tolist()))[:N_EXAMPLES]
        if row["unexpected_count"] is not None:
            row["unexpected_percent"] = 100.0 * row["unexpected_count"] / n if n else 0.0
        out.append(row)
    return out


def _whole_column(row: dict[str, Any], data: pd.DataFrame, column: str, bad: np.ndarray) -> None:
    """Set a report row's outcome from a whole-column mask of unexpected rows."""
    row["success"] = not bad.any()
    row["unexpected_count"] = int(bad.sum())
    row["examples"] = _plain(data[column].to_numpy()[bad][:N_EXAMPLES].tolist())
    ids = data["task_id"].to_numpy()[bad][:N_EXAMPLES].tolist() if "task_id" in data.columns else []
    row["example_task_ids"] = _plain(ids)


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


def validate_files(paths: dict[str, str | Path], max_memory_mb: float, suite_builder: SuiteBuilder,
                   derive: Derive | None = None) -> dict[str, Any]:
    """Validate each named workload file with one kind's suite; the whole metrics/validation.json
    content.

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
            entry.update(validate_frame(df, name, max_memory_mb, context, suite_builder, derive))
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
