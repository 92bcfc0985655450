"""MLflow logging for stage runs: the composed config as params, metrics, artifacts, models,
and the git commit as a tag so `mlflow ui` compares runs across commits.

The store is ``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///mlflow.db`` in the working
directory (the project root under DVC). mlflow is imported lazily: it costs ~1.4 s.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

DEFAULT_URI = "sqlite:///mlflow.db"
# Explicit requirements make log_model take ~1 s instead of 6-7 s of inference.
MODEL_REQUIREMENTS = {
    "sklearn": ["scikit-learn==1.9.1", "skops==0.16.0", "numpy==2.4.6"],
    "xgboost": ["xgboost-cpu==3.2.0", "numpy==2.4.6"],
    "pytorch": ["torch==2.13.0", "numpy==2.4.6"],
}
# mlflow saves sklearn models with skops, which wants the tree type named as trusted
MODEL_KWARGS = {"sklearn": {"skops_trusted_types": ["sklearn.tree._tree.Tree"]}}


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> {"a.b.c": value}; lists become their string form."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{key}."))
        else:
            out[key] = v
    return out


def git_commit(cwd: str | os.PathLike[str] = ".") -> tuple[str, bool]:
    """(HEAD commit or "unknown", whether the work tree has uncommitted changes)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                                    capture_output=True, text=True, check=True).stdout.strip())
        return head, dirty
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def log_run(
    stage: str,
    config: Mapping[str, Any],
    metrics: Mapping[str, Any],
    artifacts: Iterable[str | os.PathLike[str]] = (),
    model: tuple[str, Any] | None = None,
    experiment: str = "hybridsched",
    enabled: bool = True,
) -> str | None:
    """Log one stage run; returns its run id (None when disabled).

    ``model`` is ``(flavor, object)`` or ``(flavor, object, log_model_kwargs)`` with flavor
    ``sklearn``, ``xgboost`` or ``pytorch`` (which needs ``input_example`` for its pt2 format).
    """
    if not enabled:
        return None
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    import mlflow

    mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI", DEFAULT_URI))
    mlflow.set_experiment(experiment)
    commit, dirty = git_commit()
    params = {k: str(v)[:500] for k, v in flatten(config).items() if not k.startswith("hydra")}
    numeric = {k: float(v) for k, v in flatten(metrics).items()
               if isinstance(v, int | float) and not isinstance(v, bool) and v == v}
    with mlflow.start_run(run_name=stage) as run:
        mlflow.set_tags({"stage": stage, "mlflow.source.git.commit": commit, "git_commit": commit,
                         "git_dirty": str(dirty)})
        mlflow.log_params(params)
        mlflow.log_metrics(numeric)
        for path in artifacts:
            p = Path(path)
            if p.is_dir():
                mlflow.log_artifacts(str(p), artifact_path=p.name)
            elif p.exists():
                mlflow.log_artifact(str(p))
        if model is not None:
            flavor, obj, *extra = model
            kwargs = {**MODEL_KWARGS.get(flavor, {}), **(extra[0] if extra else {})}
            getattr(mlflow, flavor).log_model(obj, name="model", pip_requirements=MODEL_REQUIREMENTS[flavor], **kwargs)
        return run.info.run_id
