"""The learned latency predictor: a per-variant line (fixed cost + per-sample cost) fitted on the
profile, corrected by a random forest (or gradient boosting) on the log ratio of actual to line.

Features: model, backend, precision (codes), log2 batch size, threads per lane.  It is scored on
*held-out batch sizes*: trained on some sizes of the profile, tested on the others, with R²
(of log latency) and MAPE, against a per-model mean baseline.  The simulator uses its dense
table ``pred[v, b]``; the online correction (an EWMA of actual / predicted per variant,
``online_alpha``) runs inside the engine as batches complete.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from hybridsched.errors import HybridschedError
from hybridsched.kinds.serving.settings import ServingSettings, config_block

FEATURES = ["model", "backend", "precision", "log2_batch", "threads"]


def _encode(df: pd.DataFrame, settings: ServingSettings) -> np.ndarray:
    cats = {"model": settings.model_names, "backend": list(settings.backends), "precision": list(settings.precisions)}
    cols = [pd.Categorical(df[c].astype(str), categories=v).codes.astype(float) for c, v in cats.items()]
    threads = df["threads"].to_numpy(float) if "threads" in df else np.ones(len(df))
    return np.column_stack([*cols, np.log2(df["batch"].to_numpy(float)), threads])


@dataclass
class LatencyPredictor:
    """Line per variant times a tree ensemble's correction."""

    settings: ServingSettings
    lines: dict[tuple[str, str, str], tuple[float, float]]
    forest: Any

    @classmethod
    def fit(cls, table: pd.DataFrame, settings: ServingSettings, kind: str = "random_forest", seed: int = 0,
            n_estimators: int = 200) -> LatencyPredictor:
        """Fit on the rows of ``table`` (model, backend, precision, batch, latency_ms)."""
        from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor

        lines = {}
        for key, g in table.groupby(["model", "backend", "precision"]):
            b, y = g["batch"].to_numpy(float), g["latency_ms"].to_numpy(float) / 1e3
            slope, icpt = np.polyfit(b, y, 1) if len(np.unique(b)) > 1 else (0.0, float(y.mean()))
            lines[key] = (max(float(icpt), 1e-6), max(float(slope), 0.0))
        models = {"random_forest": lambda: RandomForestRegressor(n_estimators=n_estimators, min_samples_leaf=1,
                                                                 random_state=seed),
                  "gradient_boosting": lambda: GradientBoostingRegressor(n_estimators=n_estimators, max_depth=3,
                                                                         random_state=seed)}
        if kind not in models:
            raise HybridschedError(f"rf.serving.model: unknown model {kind!r}; known: {sorted(models)}")
        self = cls(settings, lines, models[kind]())
        base = self._line(table)
        self.forest.fit(_encode(table, settings), np.log(table["latency_ms"].to_numpy(float) / 1e3 / base))
        return self

    def _line(self, df: pd.DataFrame) -> np.ndarray:
        out = np.empty(len(df))
        for k, (m, be, p, b) in enumerate(zip(df["model"], df["backend"], df["precision"], df["batch"], strict=True)):
            if (m, be, p) not in self.lines:
                raise HybridschedError(f"latency predictor: no profile rows for {(m, be, p)}")
            a, s = self.lines[(m, be, p)]
            out[k] = a + s * float(b)
        return out

    def predict_s(self, df: pd.DataFrame) -> np.ndarray:
        """Predicted latency in seconds for rows (model, backend, precision, batch[, threads])."""
        return self._line(df) * np.exp(self.forest.predict(_encode(df, self.settings)))

    def dense(self) -> np.ndarray:
        """``pred[v, b]`` for b = 0..max_batch (NaN for variants without profile rows), non-decreasing."""
        s = self.settings
        out = np.full((s.n_variants, s.max_batch + 1), np.nan)
        b = np.arange(1, s.max_batch + 1)
        for v in range(s.n_variants):
            m, be, p = s.variant_names(v)
            if (m, be, p) in self.lines:
                df = pd.DataFrame({"model": m, "backend": be, "precision": p, "batch": b})
                out[v, 1:] = np.maximum.accumulate(self.predict_s(df))
        return out


def held_out_scores(table: pd.DataFrame, settings: ServingSettings, test_batches: list[int], kind: str,
                    seed: int = 0, n_estimators: int = 200) -> dict[str, Any]:
    """Fit on the batch sizes not in ``test_batches``, score on those: R² of log latency and MAPE,
    for the predictor and for the per-model mean baseline."""
    from sklearn.metrics import r2_score

    test = table["batch"].isin(test_batches)
    if not test.any() or test.all():
        raise HybridschedError(f"rf.serving.test_batches: {test_batches} must split the profile's batch sizes "
                               f"{sorted(table['batch'].unique().tolist())}")
    tr, te = table[~test], table[test]
    model = LatencyPredictor.fit(tr, settings, kind, seed, n_estimators)
    y = te["latency_ms"].to_numpy(float) / 1e3
    pred = model.predict_s(te)
    base = te["model"].map(tr.groupby("model")["latency_ms"].mean() / 1e3).to_numpy(float)

    def mape(p: np.ndarray) -> float:
        return float(np.mean(np.abs(p - y) / y))

    return {"n_train": int((~test).sum()), "n_test": int(test.sum()), "test_batches": list(test_batches),
            "r2_log": float(r2_score(np.log(y), np.log(pred))), "mape": mape(pred),
            "baseline_r2_log": float(r2_score(np.log(y), np.log(base))), "baseline_mape": mape(base)}


def importance(model: LatencyPredictor) -> dict[str, float]:
    """The forest's impurity importances by feature."""
    imp = getattr(model.forest, "feature_importances_", np.zeros(len(FEATURES)))
    return {f: float(v) for f, v in zip(FEATURES, imp, strict=True)}


def fit_predictor(run, s: ServingSettings, table: pd.DataFrame) -> LatencyPredictor:
    """The learned latency predictor of the ``serving.predictor`` settings, fitted on the
    latency table (seeded: the same table and settings give the same predictor)."""
    p = config_block(run, "predictor")
    return LatencyPredictor.fit(table, s, p.get("model", "random_forest"), int(p.get("seed", 0)),
                                int(p.get("n_estimators", 200)))


def pred_table(run, s: ServingSettings, lat: np.ndarray, table: pd.DataFrame | None = None) -> tuple[np.ndarray, str]:
    """The scheduler's latency model: the learned predictor's table, or the profile table.

    With ``table`` (the stages that run before ``train_rf`` in the DAG: tune, train_dqn) the
    predictor is fitted here, in memory, from the latency table they declare as a dep: the same
    seeded fit that train_rf saves (well under a second), so no stage reads models/rf before
    train_rf writes it.  Without, it is read from train_rf's ``pred_latency.npy`` (simulate).
    """
    from pathlib import Path

    p = config_block(run, "predictor")
    if p.get("use", "learned") == "table":
        return lat, "latency table"
    if table is not None:
        return fit_predictor(run, s, table).dense(), "learned predictor"
    path = Path(p.get("model_dir", "models/rf")) / "pred_latency.npy"
    try:
        pred = np.load(path)
    except FileNotFoundError:
        raise HybridschedError(f"{path}: not found (run train_rf, or set serving.predictor.use=table)") from None
    if pred.shape != lat.shape:
        raise HybridschedError(f"{path}: shape {pred.shape} does not match the settings {lat.shape} (rerun train_rf)")
    return pred, "learned predictor"
