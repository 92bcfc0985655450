"""Shared benchmark helpers: timing with tracemalloc peaks, table printing, JSON output."""

from __future__ import annotations

import platform
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hybridsched.io import write_json


def measure(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, peak traced MB) of one call; numpy reports its buffers to tracemalloc."""
    tracemalloc.start()
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return dt, peak


def report(name: str, rows: list[dict[str, Any]], notes: dict[str, Any] | None = None) -> Path:
    """Print rows as a table and save them to metrics/<name>.json."""
    import pandas as pd

    print(pd.DataFrame(rows).to_string(index=False))
    out = Path("metrics") / f"{name}.json"
    write_json(out, {"machine": platform.platform(), "python": platform.python_version(), **(notes or {}), "rows": rows})
    print(f"saved {out}")
    return out
