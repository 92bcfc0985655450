"""Duration predictor for pods of the Alibaba GPU trace (used by the node policy ``hybrid_ml``).

A RandomForest (or XGBoost: ``make_estimator`` of ``estimators.py``) predicts the log of
a pod's duration on the reference GPU from what a scheduler sees when the pod is submitted:
its CPU, memory, GPU count and per-GPU share, QoS class and whether it names GPU models.
Logs because durations span six decades (4 s .. 145 days).  Scored on a held-out part of the
training split by R² of the log-duration and by Spearman rank correlation (the queue order is
what the policy uses the estimate for).

Saved like ``runtime_model``: skops with an explicit trusted-type list (no pickle) plus
``meta.json`` with the feature names, checked on load.

A constant target (every training pod has the same duration, e.g. an untimed pod list run
with ``workload.untimed_duration_s``) has nothing to learn: R² and Spearman are undefined
(reported as null), importances are 0, the metrics carry a ``warning``, and the model
predicts exactly that duration for every pod, so ``hybrid_ml`` falls back to a documented
rule: the queue in arrival order (FIFO: equal estimates tie, ties go by arrival) and each
pod on the feasible node with the fastest GPU model (EFT with the constant as estimate),
instead of ordering the queue by floating-point noise of the forest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hybridsched.kinds.cluster.trace import PodTable
from hybridsched.estimators import SKOPS_TRUSTED, make_estimator, r2_score, save_skops
from hybridsched.errors import HybridschedError, ModelFileError
from hybridsched.io import atomic_dir, json_text, read_model_meta

QOS_CLASSES = ("LS", "BE", "Burstable", "Guaranteed")
FEATURE_NAMES: tuple[str, ...] = ("log_cpu_milli", "log1p_memory_mib", "num_gpu", "gpu_share", "gpu_spec_set",
                                  *(f"qos_{q}" for q in QOS_CLASSES))
META_FILE = "meta.json"
MODEL_FILE = "model.skops"
FORMAT = "hybridsched-pod-runtime/1"


def pod_features(pods: PodTable) -> np.ndarray:
    """``(n, len(FEATURE_NAMES))`` features known at submission time."""
    qos = [(pods.qos == q).astype(np.float64) for q in QOS_CLASSES]
    return np.column_stack([np.log(np.maximum(pods.cpu_milli, 1.0)), np.log1p(pods.memory_mib), pods.num_gpu,
                            pods.gpu_milli / 1000.0, (pods.gpu_spec != "").astype(np.float64), *qos])


@dataclass
class PodRuntimeModel:
    """A fitted regressor of log duration; :meth:`predict_seconds` for a pod table."""

    estimator: Any
    kind: str = "random_forest"
    config: dict = field(default_factory=dict)
    constant_s: float | None = None  # set when the training target was constant: predict exactly this

    def predict_seconds(self, pods: PodTable) -> np.ndarray:
        if len(pods) == 0:
            return np.zeros(0)
        if self.constant_s is not None:
            return np.full(len(pods), self.constant_s)
        return np.exp(np.asarray(self.estimator.predict(pod_features(pods)), dtype=np.float64))

    @property
    def warning(self) -> str | None:
        """Why the model is a constant (None for a learned model)."""
        return None if self.constant_s is None else constant_warning(self.constant_s)


def constant_warning(value_s: float) -> str:
    """The one-line warning of a constant training target."""
    return (f"every training pod has the same duration ({value_s:g} s; an untimed pod list?): nothing to learn, "
            f"so hybrid_ml falls back to FIFO queue order with {value_s:g} s as every pod's estimate")


def train_pod_runtime(train: PodTable, cfg: dict) -> tuple[PodRuntimeModel, dict]:
    """Fit on a random ``1 - test_fraction`` of the training split, score on the rest (``cfg`` is
    the ``rf`` config: ``model``, ``seed``, ``test_fraction`` and per-kind hyper-parameters)."""
    from scipy.stats import spearmanr

    kind = str(cfg.get("model", "random_forest"))
    if kind != "random_forest":
        raise HybridschedError(f"rf.model: the pod duration model supports random_forest only, got {kind!r}")
    seed = int(cfg.get("seed", 0))
    test_fraction = float(cfg.get("test_fraction", 0.2))
    if len(train) < 2 or not np.all(np.isfinite(train.duration) & (train.duration > 0)):
        raise HybridschedError(f"rf: the pod duration model needs >= 2 training pods with a duration > 0 "
                               f"(got {len(train)} pods, {int(np.sum(~np.isfinite(train.duration)))} without a "
                               f"duration: an untimed pod list needs workload.untimed_duration_s)")
    F, y = pod_features(train), np.log(train.duration)
    if np.ptp(y) == 0:
        return _constant_model(train, kind, cfg)
    order = np.random.default_rng(seed).permutation(len(train))
    n_test = max(1, int(round(test_fraction * len(train))))
    te, tr = order[:n_test], order[n_test:]
    est = make_estimator(kind, cfg.get(kind) or {}, seed)
    est.fit(F[tr], y[tr])
    pred = est.predict(F[te])
    model = PodRuntimeModel(est, kind, dict(cfg))
    metrics = {
        "model": kind, "target": "log duration (s)", "n_train": int(len(tr)), "n_test": int(len(te)),
        "r2": float(r2_score(y[te, None], pred[:, None])[0]),
        "spearman": float(spearmanr(y[te], pred).statistic),
        "mae_log": float(np.mean(np.abs(y[te] - pred))),
        "mae_s": {"duration": float(np.mean(np.abs(np.exp(y[te]) - np.exp(pred))))},
        "importance": permutation_importance(est, F[te], y[te], np.random.default_rng(seed),
                                             int(cfg.get("importance_repeats", 3))),
    }
    return model, metrics


def _constant_model(train: PodTable, kind: str, cfg: dict) -> tuple[PodRuntimeModel, dict]:
    """A model that predicts the one training duration (see the module docstring), still with a
    fitted (trivial) forest so the saved model has the usual files."""
    value = float(train.duration[0])
    est = make_estimator(kind, cfg.get(kind) or {}, int(cfg.get("seed", 0)))
    est.fit(pod_features(train), np.log(train.duration))
    metrics = {"model": kind, "target": "log duration (s)", "n_train": int(len(train)), "n_test": 0,
               "constant_target": True, "constant_s": value, "warning": constant_warning(value),
               "r2": None, "spearman": None, "mae_log": 0.0, "mae_s": {"duration": 0.0},
               "importance": {name: 0.0 for name in FEATURE_NAMES}}
    return PodRuntimeModel(est, kind, dict(cfg), constant_s=value), metrics


def permutation_importance(est: Any, F: np.ndarray, y: np.ndarray, rng: np.random.Generator,
                           repeats: int = 3) -> dict[str, float]:
    """Mean drop in held-out R² (log duration) when one feature's column is shuffled, largest first."""
    base = r2_score(y[:, None], est.predict(F)[:, None])[0]
    out = {}
    for j, name in enumerate(FEATURE_NAMES):
        drops = []
        for _ in range(repeats):
            G = F.copy()
            G[:, j] = rng.permutation(G[:, j])
            drops.append(base - r2_score(y[:, None], est.predict(G)[:, None])[0])
        out[name] = float(np.mean(drops))
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def save_pod_runtime(model: PodRuntimeModel, model_dir: str | Path, extra_meta: dict | None = None) -> Path:
    """``model.skops`` + ``meta.json`` into ``model_dir``, atomically."""
    meta = {"format": FORMAT, "kind": model.kind, "features": list(FEATURE_NAMES), "config": model.config,
            "constant_s": model.constant_s, **(extra_meta or {})}
    with atomic_dir(model_dir) as tmp:
        save_skops(model.estimator, tmp / MODEL_FILE)  # byte-identical for a seed
        (tmp / META_FILE).write_text(json_text(meta, str))
    return Path(model_dir)


def load_pod_runtime(model_dir: str | Path) -> PodRuntimeModel:
    """Load what :func:`save_pod_runtime` wrote; ModelFileError names the file and problem."""
    import skops.io as sio

    d = Path(model_dir)
    meta = read_model_meta(d / META_FILE, "the train_rf stage on a cluster workload")
    if meta.get("format") != FORMAT or tuple(meta.get("features", ())) != FEATURE_NAMES:
        raise ModelFileError(f"{d / META_FILE}: not a pod duration model with features {list(FEATURE_NAMES)} "
                             f"(format {meta.get('format')!r}; retrain with the train_rf stage)")
    try:
        est = sio.load(d / MODEL_FILE, trusted=SKOPS_TRUSTED)
    except Exception as e:  # zip errors, untrusted types
        raise ModelFileError(f"{d / MODEL_FILE}: unreadable or untrusted skops model "
                             f"({type(e).__name__}: {e})") from None
    constant = meta.get("constant_s")
    return PodRuntimeModel(est, meta["kind"], meta.get("config") or {},
                           constant_s=None if constant is None else float(constant))
