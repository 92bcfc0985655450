"""Helpers for the serving tests: a synthetic latency table and a hand-built Run config."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from hybridsched.kinds.serving.latency import dense_latency
from hybridsched.kinds.serving.settings import ServingSettings

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"


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
    """The composed config of a serving run, built from conf/ by hand, with every path in tmp_path."""
    kind = yaml.safe_load((CONF / "kinds" / "serving.yaml").read_text())
    workload = yaml.safe_load((CONF / "workload" / "serving.yaml").read_text())
    serving = kind["serving"]
    serving["profile_path"] = str(tmp_path / "data" / "cluster_profile.json")
    serving["predictor"]["model_dir"] = str(tmp_path / "models" / "rf")
    serving["dqn"]["model_dir"] = str(tmp_path / "models" / "dqn")
    serving["tune"]["dir"] = str(tmp_path / "models" / "tune")
    serving.update(serving_overrides)
    policies = {}
    for p in sorted((CONF / "policy" / "serving").glob("*.yaml")):
        spec = yaml.safe_load(p.read_text())
        if spec.get("model_dir") == "${serving.dqn.model_dir}":
            spec["model_dir"] = serving["dqn"]["model_dir"]
        policies[p.stem] = spec
    return {"workload": workload, "serving": serving, "policies": {"serving": policies},
            "sim": {"seed": 0, "policies": {"serving": kind["sim"]["policies"]["serving"]}},
            "tracking": {"enabled": False},
            "paths": {"best_params": str(tmp_path / "models" / "best_params.yaml"),
                      "workload_dir": str(tmp_path / "data" / "workload"),
                      "traces_dir": str(tmp_path / "data" / "traces"), "metrics_dir": str(tmp_path / "metrics")}}
