"""Run-time predictor: a RandomForest or XGBoost model of a task's actual CPU and GPU times.

Both part durations of a split are linear in the GPU fraction ``f`` (CPU part
``(1 - f) * C``, GPU part ``launch_s + f * G``), so two numbers per task fix every split:
the whole-task CPU time ``C`` and the whole-task GPU compute + transfer time ``G``.  The
model predicts ``log C`` and ``log G`` (times span four decades; logs make the error
relative) from :func:`hybridsched.kinds.machine.features.task_features`, as one multi-output
estimator so a batch needs one ``predict`` call.

Labels are the times a run would actually take: nominal time times the lognormal noise
that ``Cluster.sample_noise`` draws for a seeded run.

A target that is constant over the training tasks (e.g. every task the same size, no noise)
has nothing to learn: its R² is undefined (null in the metrics), it is left out of the
permutation importances (0 for every feature when both targets are constant), the metrics
carry a ``warning``, and the model predicts exactly that value (``RuntimeModel.constant``),
so ``hybrid_ml`` falls back to EFT with the training mean as every task's estimate instead
of acting on the forest's floating-point noise.

Saved models are safe formats only: scikit-learn via skops with an explicit list of
trusted types (no pickle), XGBoost as UBJSON; ``meta.json`` beside the model holds the
feature list, targets, estimator kind and training config, and is checked on load.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from hybridsched.devices import Cluster
from hybridsched.estimators import SKOPS_TRUSTED, make_estimator, r2_score, save_skops
from hybridsched.errors import HybridschedError, ModelFileError
from hybridsched.io import atomic_dir, json_text, read_model_meta
from hybridsched.kinds.machine.features import FEATURE_NAMES, task_features
from hybridsched.kinds.machine.forest_predict import FlatForest, flatten_forest
from hybridsched.kinds.machine.engine import CPU_S, GPU_S

TARGETS: tuple[str, ...] = ("log_cpu_s", "log_gpu_s")
META_FILE = "meta.json"
FORMAT_VERSION = 1
# rf.max_train_rows: the forest's memory grows with its training rows (about 3 KB a row for the
# default forest); a larger training split is fitted on a seeded sample of this many rows
MAX_TRAIN_ROWS = 200_000
# estimator kind -> file name of the saved estimator
MODEL_FILES: dict[str, str] = {"random_forest": "model.skops", "xgboost": "model.ubj"}


@dataclass
class RuntimeModel:
    """A fitted estimator plus what it was fitted on; ``predict_*`` take a feature matrix."""

    kind: str
    estimator: Any
    feature_names: tuple[str, ...] = FEATURE_NAMES
    targets: tuple[str, ...] = TARGETS
    config: dict = field(default_factory=dict)
    # per target: the exact log value to predict when the training target was constant, else NaN
    constant: tuple[float, ...] | None = None

    @property
    def warning(self) -> str | None:
        """Why some predictions are a constant (None for a learned model)."""
        const = self._constant()
        if const is None or np.isnan(const).all():
            return None
        return constant_warning({t: float(np.exp(v)) for t, v in zip(self.targets, const) if not np.isnan(v)})

    @cached_property
    def _flat(self) -> FlatForest | None:
        """The forest flattened for the compiled predictor (None: predict through the estimator)."""
        return flatten_forest(self.estimator) if self.kind == "random_forest" else None

    def _constant(self) -> np.ndarray | None:
        return None if self.constant is None else np.asarray(self.constant, dtype=np.float64)

    def predict_log(self, F: np.ndarray) -> np.ndarray:
        """``(n, 2)`` predicted ``[log C, log G]`` for feature rows ``F``: one batched call."""
        if len(F) == 0:
            return np.zeros((0, len(self.targets)))
        if self.kind == "xgboost":
            out = self.estimator.get_booster().inplace_predict(F)
        elif self._flat is not None and self._flat.accepts(F):
            out = self._flat.predict(F)  # compiled, bit-identical to the forest's own predict
        else:
            out = self.estimator.predict(F)
        out = np.asarray(out, dtype=np.float64).reshape(len(F), len(self.targets))
        const = self._constant()
        if const is not None:
            fixed = ~np.isnan(const)
            out[:, fixed] = const[fixed]
        return out

    def predict_seconds(self, X: np.ndarray) -> np.ndarray:
        """``(n, 2)`` predicted ``[C, G]`` in seconds for the task matrix ``X``."""
        return np.exp(self.predict_log(task_features(X)))


# --- labels and fitting -------------------------------------------------------------


def constant_warning(values_s: dict[str, float]) -> str:
    """The one-line warning of constant training targets (target -> its value in seconds)."""
    shown = ", ".join(f"{t.removeprefix('log_')} = {v:g} s" for t, v in values_s.items())
    return (f"constant training target ({shown}): nothing to learn, so hybrid_ml falls back to "
            f"EFT with that value as every task's estimate")


def constant_targets(y: np.ndarray) -> np.ndarray:
    """Per target column: its value where the column is constant, else NaN."""
    const = np.full(y.shape[1], np.nan)
    if len(y):
        same = np.ptp(y, axis=0) == 0
        const[same] = y[0, same]
    return const


def runtime_labels(X: np.ndarray, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
    """``(n, 2)`` actual ``[log C, log G]`` of the tasks in ``X`` under one seeded noise draw."""
    noise = cluster.sample_noise(len(X), rng)
    return np.column_stack([np.log(X[:, CPU_S] * noise.cpu_factor), np.log(X[:, GPU_S] * noise.gpu_factor)])


def fit_model(kind: str, F: np.ndarray, y: np.ndarray, params: dict, seed: int = 0,
              config: dict | None = None) -> RuntimeModel:
    """Fit a :class:`RuntimeModel` of ``kind`` on features ``F`` and log-time targets ``y``."""
    try:
        est = make_estimator(kind, params, seed)
        est.fit(F, y)
    except TypeError as e:  # an unknown hyper-parameter name
        raise HybridschedError(f"rf.{kind}: bad parameter ({e})") from None
    return RuntimeModel(kind, est, FEATURE_NAMES, TARGETS, dict(config or {}))


def _mean_or_none(v: np.ndarray) -> float | None:
    """Mean over the defined (finite) entries; None (JSON null) when none is."""
    v = np.asarray(v, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(v.mean()) if len(v) else None


def score_model(model: RuntimeModel, F: np.ndarray, y: np.ndarray) -> dict:
    """R² of the log-times and of the times, and MAE in seconds, per target."""
    pred = model.predict_log(F)
    r2_log = r2_score(y, pred)
    r2_s = r2_score(np.exp(y), np.exp(pred))
    mae = np.abs(np.exp(y) - np.exp(pred)).mean(axis=0)
    names = [t.removeprefix("log_") for t in model.targets]
    return {
        "r2": _mean_or_none(r2_log),
        "r2_log": dict(zip(model.targets, r2_log.tolist())),
        "r2_seconds": dict(zip(names, r2_s.tolist())),
        "mae_s": dict(zip(names, mae.tolist())),
    }


def permutation_importance(model: RuntimeModel, F: np.ndarray, y: np.ndarray, rng: np.random.Generator,
                           repeats: int = 3) -> dict[str, float]:
    """Mean drop in held-out R² (averaged over targets) when one feature's column is shuffled.

    Model-agnostic, so RandomForest and XGBoost importances compare on one scale.
    ``repeats = 0`` skips it (an empty dict), e.g. inside tuning trials."""
    if repeats <= 0:
        return {}
    varied = np.ptp(y, axis=0) > 0 if len(y) else np.zeros(y.shape[1], dtype=bool)
    if not varied.any():  # constant targets: no feature can matter
        return {name: 0.0 for name in model.feature_names}
    base = r2_score(y, model.predict_log(F))[varied].mean()
    out = {}
    for j, name in enumerate(model.feature_names):
        drops = []
        for _ in range(repeats):
            G = F.copy()
            G[:, j] = rng.permutation(G[:, j])
            drops.append(base - r2_score(y, model.predict_log(G))[varied].mean())
        out[name] = float(np.mean(drops))
    return out


def recorded_config(cfg: dict, n_rows: int) -> dict:
    """The ``rf`` config as a model's meta.json and the tune study's name record it:
    ``max_train_rows`` only when it bounds a training split of ``n_rows`` tasks."""
    cap = cfg.get("max_train_rows")
    return cfg if cap is not None and n_rows > int(cap) else {k: v for k, v in cfg.items() if k != "max_train_rows"}


def train_runtime_model(X: np.ndarray, cluster: Cluster, cfg: dict) -> tuple[RuntimeModel, dict]:
    """Label the task matrix ``X`` with actual run times, fit on a random split, score on the rest.

    ``cfg`` is the ``rf`` config: ``model``, ``seed``, ``test_fraction``, ``importance_repeats``
    and one mapping of hyper-parameters per estimator kind.  A training part longer than
    ``max_train_rows`` is fitted on a seeded sample of that many rows (one line says so).
    Returns the model fitted on the training part and a metrics dict (R², MAE per target,
    permutation importances, fit time)."""
    kind = str(cfg.get("model", "random_forest"))
    if kind not in MODEL_FILES:
        raise HybridschedError(f"rf.model: unknown estimator {kind!r}; known: {sorted(MODEL_FILES)}")
    test_fraction = float(cfg.get("test_fraction", 0.2))
    if not 0 < test_fraction < 1:
        raise HybridschedError(f"rf.test_fraction must be in (0, 1), got {test_fraction}")
    seed = int(cfg.get("seed", 0))
    noise_rng, split_rng, perm_rng = np.random.default_rng(seed).spawn(3)

    F = task_features(X)
    y = runtime_labels(X, cluster, noise_rng)
    order = split_rng.permutation(len(X))
    n_test = max(1, int(round(test_fraction * len(X))))
    test, train = order[:n_test], order[n_test:]
    if len(train) < 2:
        raise HybridschedError(f"rf: {len(X)} tasks are too few to train on")
    recorded = recorded_config(cfg, len(train))
    cap = int(cfg.get("max_train_rows", MAX_TRAIN_ROWS))
    sampled_from = None
    if len(train) > cap:  # bounded memory and time; the held-out part is scored whole
        sampled_from = int(len(train))
        train = np.sort(np.random.default_rng(seed).choice(train, size=cap, replace=False))
        print(f"rf: fitting on a sample of {cap} of {sampled_from} training tasks (rf.max_train_rows={cap})")

    t0 = time.perf_counter()
    model = fit_model(kind, F[train], y[train], cfg.get(kind) or {}, seed, config=recorded)
    fit_s = time.perf_counter() - t0
    const = constant_targets(y[train])
    if not np.isnan(const).all():
        model.constant = tuple(float(c) for c in const)
    scores = score_model(model, F[test], y[test])
    importance = permutation_importance(model, F[test], y[test], perm_rng, int(cfg.get("importance_repeats", 3)))
    metrics = {
        "model": kind,
        "n_train": int(len(train)),
        "n_test": int(len(test)),
        **({} if sampled_from is None else {"sampled_from": sampled_from}),
        **scores,
        "importance": dict(sorted(importance.items(), key=lambda kv: -kv[1])),
        "fit_s": fit_s,
    }
    if model.warning:
        metrics.update(constant_target=[t for t, c in zip(model.targets, const) if not np.isnan(c)],
                       warning=model.warning)
    return model, metrics


# --- saving and loading ---------------------------------------------------------------


def save_model(model: RuntimeModel, model_dir: str | Path, extra_meta: dict | None = None) -> Path:
    """Write the estimator (skops or UBJSON) and ``meta.json`` into ``model_dir``, atomically."""
    model_dir = Path(model_dir)
    file_name = MODEL_FILES[model.kind]
    meta = {
        "format_version": FORMAT_VERSION,
        "kind": model.kind,
        "model_file": file_name,
        "features": list(model.feature_names),
        "targets": list(model.targets),
        "config": model.config,
        "constant": None if model.constant is None else list(model.constant),
        **(extra_meta or {}),
    }
    with atomic_dir(model_dir) as tmp:
        if model.kind == "xgboost":
            model.estimator.save_model(str(tmp / file_name))
        else:
            save_skops(model.estimator, tmp / file_name)  # byte-identical for a seed
        (tmp / META_FILE).write_text(json_text(meta, _json_default))
    return model_dir


def load_model(model_dir: str | Path) -> RuntimeModel:
    """Load a model saved by :func:`save_model`; raise ModelFileError naming the file and the
    problem if it is missing, corrupt, of unknown kind or fitted on other features."""
    model_dir = Path(model_dir)
    meta_path = model_dir / META_FILE
    meta = read_model_meta(meta_path, "the train_rf stage first")
    try:
        kind, file_name = meta["kind"], meta["model_file"]
        features, targets = tuple(meta["features"]), tuple(meta["targets"])
    except (ValueError, KeyError, TypeError) as e:
        raise ModelFileError(f"{meta_path}: corrupt model metadata ({type(e).__name__}: {e})") from None
    if kind not in MODEL_FILES or file_name != MODEL_FILES[kind]:
        raise ModelFileError(f"{meta_path}: unknown estimator kind {kind!r} or file {file_name!r}")
    if features != FEATURE_NAMES:
        raise ModelFileError(f"{meta_path}: model was fitted on features {list(features)}, "
                             f"but the current features are {list(FEATURE_NAMES)} (retrain it)")
    if targets != TARGETS:
        raise ModelFileError(f"{meta_path}: model predicts {list(targets)}, expected {list(TARGETS)}")
    path = model_dir / file_name
    if not path.is_file():
        raise ModelFileError(f"{path}: not found (model folder is incomplete; rerun train_rf)")
    estimator = _load_estimator(kind, path)
    n_in = getattr(estimator, "n_features_in_", None)
    if n_in is not None and int(n_in) != len(FEATURE_NAMES):
        raise ModelFileError(f"{path}: estimator expects {n_in} features, metadata lists {len(FEATURE_NAMES)}")
    const = meta.get("constant")
    const = None if const is None else tuple(np.nan if c is None else float(c) for c in const)
    return RuntimeModel(kind, estimator, features, targets, dict(meta.get("config") or {}), const)


def _load_estimator(kind: str, path: Path) -> Any:
    if kind == "xgboost":
        from xgboost import XGBRegressor

        est = XGBRegressor()
        try:
            est.load_model(str(path))
        except Exception as e:  # XGBoostError, ValueError, ... : any failure means the file is bad
            raise ModelFileError(f"{path}: corrupt or unreadable XGBoost model ({_first_line(e)})") from None
        return est
    import skops.io as sio

    try:
        est = sio.load(path, trusted=SKOPS_TRUSTED)
    except Exception as e:  # zip errors, untrusted types, bad schema
        raise ModelFileError(f"{path}: corrupt, unreadable or untrusted skops model ({_first_line(e)})") from None
    if not hasattr(est, "predict"):
        raise ModelFileError(f"{path}: holds a {type(est).__name__}, not a fitted regressor")
    return est


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)
