"""A Hydra callback that gathers a multirun's per-job ``result.json`` into one table.

Registered in conf/config.yaml under ``hydra.callbacks``; after ``python -m stages.X -m ...``
it writes ``comparison.csv`` and ``comparison.md`` in the sweep folder and prints the table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from hybridsched.io import write_frame, write_text


def comparison_table(sweep_dir: Path) -> pd.DataFrame:
    """One row per (job, result row): the job's overrides as columns, then its metrics."""
    rows = []
    for f in sorted(sweep_dir.glob("*/result.json"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0):
        res = json.loads(f.read_text())
        sweep = dict(o.lstrip("+~").split("=", 1) for o in res["overrides"] if "=" in o)
        for r in res["rows"]:
            rows.append({"job": f.parent.name, **sweep, **r})
    return pd.DataFrame(rows)


class ComparisonTable(Callback):
    """Writes the comparison table when a multirun ends."""

    def __init__(self, metrics: list[str] | None = None) -> None:
        self.metrics = metrics

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        table = comparison_table(sweep_dir)
        if table.empty:
            return
        if self.metrics:
            keep = [c for c in table.columns if c not in _metric_like(table) or c in self.metrics]
            table = table[keep]
        write_frame(sweep_dir / "comparison.csv", table)
        write_text(sweep_dir / "comparison.md", table.round(4).to_markdown(index=False) + "\n")
        print(f"comparison of {table['job'].nunique()} jobs: {sweep_dir / 'comparison.md'}")
        print(table.round(3).to_string(index=False))


def _metric_like(table: pd.DataFrame) -> set[str]:
    return set(table.select_dtypes("number").columns)
