"""MLflow logging for stage runs: the composed config as params, metrics, artifacts, models,
and the git commit as a tag so `mlflow ui` compares runs across commits.

Each pipeline run has one parent run, named after the DVC experiment (``DVC_EXP_NAME``) or
``<short commit>-workspace``, tagged with the settings that differ from the committed
``params.yaml``, carrying the evaluate stage's headline figures; each stage is a run nested
under it.  Tracking never fails a stage: an MLflow error is one warning line.

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
# the tracking URI schemes MLflow's tracking store takes
URI_SCHEMES = ("file", "http", "https", "sqlite", "postgresql", "mysql", "mssql", "databricks")
# a tracking server must answer a connection within this many seconds; MLflow's own HTTP
# retries (7, with backoff: minutes) and timeout (120 s) are lowered for the stages' calls
CONNECT_TIMEOUT_S = 3.0
HTTP_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
            "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


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


def pipeline_name(cwd: str | os.PathLike[str] = ".") -> str:
    """The name of this pipeline run: the DVC experiment's (``DVC_EXP_NAME``, which
    ``dvc exp run`` sets), else ``<short commit>-workspace``."""
    name = os.environ.get("DVC_EXP_NAME", "").strip()
    if name:
        return name
    commit, _ = git_commit(cwd)
    return f"{commit[:7]}-workspace" if commit != "unknown" else "workspace"


def changed_params(cwd: str | os.PathLike[str] = ".", path: str = "params.yaml") -> dict[str, str]:
    """Flattened key -> value of the settings in ``params.yaml`` that differ from (or are not in)
    the committed ``HEAD:params.yaml``; {} when either cannot be read (no git, no commit)."""
    import yaml

    try:
        now = yaml.safe_load((Path(cwd) / path).read_text()) or {}
        committed = subprocess.run(["git", "show", f"HEAD:{path}"], cwd=cwd, capture_output=True, text=True, check=True)
        head = yaml.safe_load(committed.stdout) or {}
    except (OSError, subprocess.CalledProcessError, yaml.YAMLError):
        return {}
    if not isinstance(now, Mapping) or not isinstance(head, Mapping):
        return {}
    old, new = flatten(head), flatten(now)
    return {k: str(v) for k, v in new.items() if k not in old or old[k] != v}


MAX_PARAM_TAGS = 50  # a changed workload can differ in hundreds of keys; the list tag names them all


def pipeline_tags(name: str, changed: Mapping[str, str]) -> dict[str, str]:
    """The parent run's tags: the experiment's name, how many and which settings changed, and
    ``param.<key>`` with the value of the first :data:`MAX_PARAM_TAGS` of them."""
    tags = {"pipeline_run": name, "dvc_experiment": name, "changed_params": ", ".join(changed)[:5000] or "(none)",
            "n_changed_params": str(len(changed))}
    tags.update({f"param.{k}": v[:250] for k, v in list(changed.items())[:MAX_PARAM_TAGS]})
    return tags


def _quoted(value: str) -> str:
    return value.replace("\\", "").replace("'", "")  # MLflow's filter strings have no escapes


def parent_run_id(client: Any, experiment_id: str, name: str, stage: str) -> str:
    """The parent run of this pipeline run: the newest run tagged ``pipeline_run=name`` that has
    no nested run of ``stage`` yet (a stage that ran under it already means a new pipeline run),
    else a new one named ``name``, with the :func:`pipeline_tags`."""
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    found = client.search_runs([experiment_id], filter_string=f"tags.pipeline_run = '{_quoted(name)}'",
                               order_by=["attributes.start_time DESC"], max_results=1)
    if found:
        pid = found[0].info.run_id
        done = client.search_runs([experiment_id], max_results=1,
                                  filter_string=f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{pid}' and tags.stage = '{_quoted(stage)}'")
        if not done:
            return str(pid)
    commit, dirty = git_commit()
    tags = {**pipeline_tags(name, changed_params()), "mlflow.source.git.commit": commit, "git_commit": commit,
            "git_dirty": str(dirty)}
    parent = client.create_run(experiment_id, run_name=name, tags=tags)
    client.set_terminated(parent.info.run_id)
    return str(parent.info.run_id)


def log_run(
    stage: str,
    config: Mapping[str, Any],
    metrics: Mapping[str, Any],
    artifacts: Iterable[str | os.PathLike[str]] = (),
    model: tuple[str, Any] | None = None,
    experiment: str = "hybridsched",
    enabled: bool = True,
    headline: Mapping[str, Any] | None = None,
) -> str | None:
    """Log one stage run as a nested run of its pipeline run's parent (:func:`parent_run_id`);
    ``headline`` (the evaluate stage's figures, flattened: ``headline.best.mean_latency``) goes on
    the parent, numbers as metrics and names as tags.  Returns the stage
    run's id; None when disabled or when MLflow fails (a warning line: tracking never fails a
    stage whose outputs are written).

    ``model`` is ``(flavor, object)`` or ``(flavor, object, log_model_kwargs)`` with flavor
    ``sklearn``, ``xgboost`` or ``pytorch`` (which needs ``input_example`` for its pt2 format).
    """
    if not enabled:
        return None
    import sys

    problem = uri_problem(os.environ.get("MLFLOW_TRACKING_URI", DEFAULT_URI))
    if problem:
        print(f"warning: MLflow tracking of stage {stage!r} skipped: {problem}; the stage's outputs are written",
              file=sys.stderr)
        return None
    try:
        return _log_run(stage, config, metrics, artifacts, model, experiment, headline)
    except Exception as e:  # noqa: BLE001 - any MLflow or store error: the stage's outputs stand
        first = (str(e).strip().splitlines() or [""])[0][:300]
        print(f"warning: MLflow tracking of stage {stage!r} failed ({type(e).__name__}: {first}); "
              f"the stage's outputs are written", file=sys.stderr)
        return None


def uri_problem(uri: str) -> str | None:
    """Why the tracking URI cannot be used now, in a few words (None when it can): a scheme
    MLflow has no store for, or an http(s) server that does not accept a connection within
    :data:`CONNECT_TIMEOUT_S` (MLflow itself would retry for minutes)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    scheme = parts.scheme.split("+")[0]
    if scheme and scheme not in URI_SCHEMES and len(scheme) > 1:  # "C:" is a Windows path
        return (f"MLFLOW_TRACKING_URI {uri!r}: unknown scheme {scheme!r} "
                f"(use a folder or a {', '.join(s + '://' for s in URI_SCHEMES[:6])} URI)")
    if scheme in ("http", "https"):
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError:
            return f"MLFLOW_TRACKING_URI {uri!r}: not a valid port"
        host = parts.hostname or "localhost"
        try:
            socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as e:
            why = e.strerror or ("timed out" if isinstance(e, TimeoutError) else type(e).__name__)
            return f"cannot reach the MLflow tracking server at {host}:{port} ({why})"
    return None


def numeric_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a nested metrics mapping, flattened (``a.b``)."""
    return {k: float(v) for k, v in flatten(metrics).items()
            if isinstance(v, int | float) and not isinstance(v, bool) and v == v}


def _log_run(stage: str, config: Mapping[str, Any], metrics: Mapping[str, Any],
             artifacts: Iterable[str | os.PathLike[str]], model: tuple[str, Any] | None, experiment: str,
             headline: Mapping[str, Any] | None) -> str:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    for key, value in HTTP_ENV.items():  # the user's own settings win
        os.environ.setdefault(key, value)
    import mlflow

    mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI", DEFAULT_URI))
    exp = mlflow.set_experiment(experiment)
    client = mlflow.MlflowClient()
    name = pipeline_name()
    parent = parent_run_id(client, exp.experiment_id, name, stage)
    if headline:
        client.log_batch(parent, metrics=[mlflow.entities.Metric(k, v, _now_ms(), 0)
                                          for k, v in numeric_metrics(headline).items()],
                         tags=[mlflow.entities.RunTag(k, str(v)[:250])
                               for k, v in flatten(headline).items() if isinstance(v, str)])
    commit, dirty = git_commit()
    params = {k: str(v)[:500] for k, v in flatten(config).items() if not k.startswith("hydra")}
    with mlflow.start_run(run_name=stage, experiment_id=exp.experiment_id, parent_run_id=parent) as run:
        mlflow.set_tags({"stage": stage, "dvc_experiment": name, "mlflow.source.git.commit": commit,
                         "git_commit": commit, "git_dirty": str(dirty)})
        mlflow.log_params(params)
        mlflow.log_metrics(numeric_metrics(metrics))
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
        return str(run.info.run_id)


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
