"""Shared benchmark helpers: the project's config composed by Hydra (as the stages see it),
``--smoke`` and override arguments, timing with tracemalloc peaks, table printing, JSON output."""

from __future__ import annotations

import argparse
import os
import platform
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hybridsched.io import write_json
from hybridsched.kinds.machine.profiling import cpu_name  # /proc/cpuinfo's model name

ROOT = Path(__file__).resolve().parents[1]
# set by parse(): a --smoke run checks that the benchmark runs, on tiny sizes, and saves nothing
SMOKE = False


def parse(ap: argparse.ArgumentParser) -> argparse.Namespace:
    """``ap``'s arguments plus ``--smoke`` (tiny sizes: does the benchmark run at all?) and
    Hydra overrides of the config (``fgd.coverage=0.9``, ``paths.traces=/data/traces``)."""
    global SMOKE
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, nothing saved: check that it runs")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides of conf/ (e.g. paths.traces=DIR)")
    args = ap.parse_args()
    SMOKE = args.smoke
    return args


def settings(overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """conf/ composed by Hydra with ``overrides`` and resolved, exactly as the stages see it
    (so ``paths.traces`` and ``$HYBRIDSCHED_TRACES`` work); MLflow tracking off."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
            cfg = compose(config_name="config", overrides=["tracking.enabled=false", *overrides])
    finally:
        GlobalHydra.instance().clear()
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def project_path(p: str | os.PathLike[str]) -> Path:
    """A config path as the stages mean it: relative paths are relative to the project root
    (the stages run there), so a benchmark works from any directory."""
    return Path(p) if Path(p).is_absolute() else ROOT / p


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not on this platform
        return None


LOAD_AT_START = _load_average()  # taken when a benchmark imports this module, before its runs


def machine() -> dict[str, Any]:
    """Where a benchmark ran: CPU model, logical cores, load average (1, 5, 15 min) at its start
    and at the end: timings on a shared machine are only comparable within one run."""
    return {"platform": platform.platform(), "cpu_model": cpu_name(), "cores": os.cpu_count(),
            "load_average_at_start": LOAD_AT_START, "load_average_at_end": _load_average()}


def measure(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, peak traced MB) of one call; numpy reports its buffers to tracemalloc."""
    tracemalloc.start()
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return dt, peak


def report(name: str, rows: list[dict[str, Any]], notes: dict[str, Any] | None = None,
           folder: Path | None = None) -> Path:
    """Print rows as a table and the machine, and save both to ``folder``/<name>.json (by default
    metrics/<name>.json)."""
    import pandas as pd

    print(pd.DataFrame(rows).to_string(index=False))
    where = machine()
    print(f"machine: {where['cpu_model']}, {where['cores']} cores, load average at start {where['load_average_at_start']}"
          f", at end {where['load_average_at_end']}")
    out = (folder if folder is not None else ROOT / "metrics") / f"{name}.json"
    if SMOKE:
        print(f"smoke run: {out} not written")
        return out
    write_json(out, {"machine": where, "python": platform.python_version(), **(notes or {}), "rows": rows})
    print(f"saved {out}")
    return out
