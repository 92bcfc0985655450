"""Helpers for the serving tests: a synthetic latency table and a hand-built Run config."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hybridsched.kinds.serving.latency import dense_latency
from hybridsched.kinds.serving.settings import ServingSettings

ROOT = Path(__file__).resolve().parents[2]


def traces_dir() -> Path:
    """The shared public traces: $HYBRIDSCHED_TRACES, ../shared/traces of the checkout, or /work/shared/traces."""
    import os

    for c in (os.environ.get("HYBRIDSCHED_TRACES"), ROOT.parent / "shared" / "traces", Path("/work/shared/traces")):
        if c and Path(c).is_dir():
            return Path(c)
    return ROOT.parent / "shared" / "traces"


def linear_table(settings: ServingSettings, base_s: dict[str, float] | None = None,
                 batches=(1, 2, 4, 8, 16, 32, 64, 128)) -> pd.DataFrame:
    """Latency a + 0.4 a b per model (onnx 20 % faster), as long rows."""
    base_s = base_s or {"resnet18": 0.03, "resnet50": 0.08, "vit_b16": 0.4}
    rows = [{"model": m, "backend": be, "precision": p, "batch": b,
             "latency_ms": 1e3 * base_s[m] * (0.8 if be == "onnx" else 1.0) * (0.6 + 0.4 * b), "fitted": False}
            for m in settings.model_names for be in settings.backends for p in settings.precisions
            for b in batches if b <= max(settings.max_batch, 1) or b == batches[-1]]
    return pd.DataFrame(rows)


def dense(settings: ServingSettings) -> np.ndarray:
    return dense_latency(linear_table(settings), settings)


def serving_cfg(tmp_path: Path, **serving_overrides) -> dict:
    """The composed config of a serving run (conf/ with workload=serving), every path in tmp_path;
    ``serving_overrides`` replace keys of the ``serving`` block."""
    from tests.runs import compose_run, outputs_in

    run = compose_run("workload=serving", *outputs_in(tmp_path), f"serving.tune.dir={tmp_path / 'models' / 'tune'}")
    run.cfg["serving"].update(serving_overrides)
    return run.cfg
