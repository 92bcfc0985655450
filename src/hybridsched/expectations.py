"""What every kind's validate stage shares: the report's fate.

The expectation suites themselves are per kind (``kinds/<kind>/validation.py``) and run
through the Great Expectations runner in ``hybridsched/validation.py``; this module writes
the report and turns a failed suite into the one-line error the stages print.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hybridsched.errors import DataValidationError
from hybridsched.io import write_json


def check_report(report: dict[str, Any], out: Path) -> dict[str, Any]:
    """Write ``report`` to ``out`` (on failure too: it is where the details are); raise
    DataValidationError listing every failed expectation if the suite failed."""
    from hybridsched.validation import failure_summary

    write_json(out, report)
    if not report["success"]:
        raise DataValidationError(f"{failure_summary(report)}\n  details: {out}")
    for f in report["files"].values():
        print(f"validate: {f['path']}: {len(f['expectations'])} expectations passed on {f['n_rows']} rows")
    return report
