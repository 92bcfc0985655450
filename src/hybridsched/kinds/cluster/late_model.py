"""The ``train_late`` stage's model files of the cluster kind: ``<model_dir>/model.json`` of
``eft_queue`` (queue weights) and of ``learned_queue`` (the joint weights), read by the
policies when they are fitted (late_train.py writes them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hybridsched.errors import HybridschedError

MODEL_FILE = "model.json"


def read_model(model_dir: str | Path, policy: str, key: str) -> tuple[dict[str, Any], Path]:
    """``(document, path)`` of ``<model_dir>/model.json`` for ``policy``, which must hold a
    ``key`` mapping of weights; a missing, broken or foreign file is one line naming it."""
    path = Path(model_dir) / MODEL_FILE
    rerun = "run `dvc repro train_late` (the train_late stage on this workload)"
    if not path.is_file():
        raise HybridschedError(f"{policy}: {path} not found; {rerun}")
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:  # a truncated or overwritten file
        raise HybridschedError(f"{path}: not a valid model file ({type(e).__name__}); {rerun}") from None
    if not isinstance(doc, dict) or doc.get("policy") != policy or not isinstance(doc.get(key), dict):
        got = doc.get("policy") if isinstance(doc, dict) else None
        raise HybridschedError(f"{path}: not a {policy} model (policy {got!r}, expected a {key!r} mapping); {rerun}")
    return doc, path
