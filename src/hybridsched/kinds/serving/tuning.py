"""Optuna (TPE) over the micro-batch window, max batch, lanes and the dynamic scheduler's weights;
objective: SLO attainment (or goodput) of the dynamic scheduler on a validation stream (the last
``validation_fraction`` of the training stream, re-based to time 0)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from hybridsched.errors import HybridschedError
from hybridsched.kinds.serving.engine import simulate
from hybridsched.kinds.serving.metrics import summarize
from hybridsched.kinds.serving.policies import Dynamic
from hybridsched.kinds.serving.workload import to_requests

WEIGHTS = ("w_slack", "w_doomed", "w_gain", "w_class", "w_wait")


def validation_split(train_df, fraction: float):
    """The last ``fraction`` of the training stream, arrivals re-based to 0."""
    if not 0 < fraction < 1:
        raise HybridschedError(f"serving.tune.validation_fraction: must be in (0, 1), got {fraction}")
    val = train_df.iloc[int(len(train_df) * (1 - fraction)):].copy()
    val["arrival"] -= val["arrival"].iloc[0]
    return val.reset_index(drop=True)


def run_study(train_df, settings, lat: np.ndarray, pred: np.ndarray, dynamic_cfg: dict[str, Any],
              tune_cfg: dict[str, Any]) -> dict[str, Any]:
    """Run the study; returns best values, default score, the trials and the study object."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    objective_name = tune_cfg.get("objective", "slo_attainment")
    if objective_name not in ("slo_attainment", "goodput_rps"):
        raise HybridschedError(f"serving.tune.objective: unknown {objective_name!r}; known: goodput_rps, slo_attainment")
    val = validation_split(train_df, float(tune_cfg.get("validation_fraction", 0.3)))
    base_w = {k: v for k, v in dynamic_cfg.items() if k != "_target_"}
    max_lanes = int(tune_cfg.get("max_lanes", settings.lanes))
    # never above the configured max batch: the latency table covers only that far
    sizes = [b for b in (8, 16, 32, 64, 128) if b <= settings.max_batch] or [settings.max_batch]

    def score(s, w: dict[str, Any]) -> float:
        reqs = to_requests(val, s, "validation stream")
        tr = simulate(reqs, s, lat, Dynamic(**w), pred, noise_seed=int(tune_cfg.get("seed", 0)))
        return float(summarize(tr.requests, tr.batches, s)[objective_name])

    def objective(trial) -> float:
        s = dataclasses.replace(settings,
                                window_ms=trial.suggest_float("window_ms", 1.0, 200.0, log=True),
                                max_batch=trial.suggest_categorical("max_batch", sizes),
                                lanes=trial.suggest_int("lanes", 1, max_lanes))
        w = {**base_w, **{k: trial.suggest_float(k, 0.0, 3.0) for k in WEIGHTS}}
        return score(s, w)

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=int(tune_cfg.get("seed", 0))))
    default = score(settings, base_w)
    study.enqueue_trial({"window_ms": settings.window_ms, "max_batch": max(sizes),
                         "lanes": min(settings.lanes, max_lanes), **{k: base_w.get(k, 1.0) for k in WEIGHTS}})
    study.optimize(objective, n_trials=int(tune_cfg.get("n_trials", 30)))
    best = study.best_params
    tuned = {"serving": {k: best[k] for k in ("window_ms", "max_batch", "lanes")},
             "policies": {"serving": {"dynamic": {k: best[k] for k in WEIGHTS}}}}
    return {"objective": objective_name, "default": default, "best": float(study.best_value), "best_params": best,
            "n_trials": len(study.trials), "n_validation": len(val), "tuned_config": tuned, "study": study}
