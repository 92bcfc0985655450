"""Online correction of an offline run-time model from observed run times.

The offline forest stays fixed; a fresh *small* model is fitted on a sliding window of
the most recent observations to predict the residual ``log(actual) - log(offline)``
(one model per target).  The corrected prediction is ``offline + residual``.

Why a residual refit rather than refitting the forest on the window or warm-starting it:

* a window holds 50 to ``window`` observations: a forest refitted on so few tasks is
  worse than the offline one whenever the workload has *not* shifted, whereas a residual
  model of a correct offline model is ~0 and costs nothing;
* scikit-learn's ``warm_start`` only *adds* trees fitted on the new data, so the old trees
  keep outvoting them after a shift, and the model grows with every refit; XGBoost's
  continued training is the same idea as this residual fit, but the model grows too;
* the correction is refitted from scratch each time, so its cost and size are bounded by
  ``window`` and it forgets a shift that has passed.

Two correction kinds: ``ridge`` (closed-form ridge regression on standardised features,
compiled, tens of microseconds per refit: online learning at full simulator speed) and ``forest`` (a small
RandomForest; non-linear, ~20 ms per refit).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from hybridsched.errors import HybridschedError

CORRECTIONS = ("ridge", "forest")
_MAX_LOG_CORRECTION = 4.0  # never scale a prediction by more than e^4 ~ 55x either way


class SlidingWindow:
    """The most recent ``size`` (feature row, value) pairs, in a ring buffer."""

    def __init__(self, size: int, n_features: int) -> None:
        if size < 1:
            raise HybridschedError(f"policy window must be >= 1, got {size}")
        self.F = np.empty((size, n_features))
        self.y = np.empty(size)
        self.size = size
        self.n = 0  # how many slots hold data
        self._head = 0  # next slot to write

    def add(self, F: np.ndarray, y: np.ndarray) -> None:
        """Append rows, overwriting the oldest once full."""
        k = len(y)
        if k >= self.size:  # only the newest `size` survive
            F, y, k = F[-self.size:], y[-self.size:], self.size
        idx = (self._head + np.arange(k)) % self.size
        self.F[idx] = F
        self.y[idx] = y
        self._head = int((self._head + k) % self.size)
        self.n = min(self.size, self.n + k)

    def data(self) -> tuple[np.ndarray, np.ndarray]:
        return self.F[: self.n], self.y[: self.n]


class ResidualModel:
    """A fresh small regression of one target's residual, refitted on each call to ``fit``."""

    def __init__(self, kind: str = "ridge", alpha: float = 10.0, min_obs: int = 20,
                 forest_params: dict | None = None, seed: int = 0) -> None:
        if kind not in CORRECTIONS:
            raise HybridschedError(f"policy correction must be one of {list(CORRECTIONS)}, got {kind!r}")
        self.kind = kind
        self.alpha = float(alpha)
        self.min_obs = int(min_obs)
        self.forest_params = dict(forest_params or {"n_estimators": 10, "max_depth": 5, "min_samples_leaf": 5})
        self.seed = seed
        self._fitted: Any = None

    @property
    def fitted(self) -> bool:
        return self._fitted is not None

    def fit(self, F: np.ndarray, r: np.ndarray) -> None:
        """Refit on the window; with fewer than ``min_obs`` observations, predict 0."""
        if len(r) < self.min_obs:
            self._fitted = None
            return
        if self.kind == "ridge":
            self._fitted = _fit_ridge(np.ascontiguousarray(F), np.ascontiguousarray(r), self.alpha)
        else:
            from sklearn.ensemble import RandomForestRegressor

            self._fitted = RandomForestRegressor(random_state=self.seed, n_jobs=1, **self.forest_params).fit(F, r)

    def predict(self, F: np.ndarray) -> np.ndarray:
        """The residual (log-time correction) for feature rows ``F``; 0 when not fitted."""
        if self._fitted is None or len(F) == 0:
            return np.zeros(len(F))
        if self.kind == "ridge":
            return _predict_ridge(np.ascontiguousarray(F), *self._fitted, _MAX_LOG_CORRECTION)
        return np.clip(self._fitted.predict(F), -_MAX_LOG_CORRECTION, _MAX_LOG_CORRECTION)


@njit(cache=True)
def _fit_ridge(F, r, alpha):
    """Ridge regression on standardised features (intercept not penalised), compiled: a refit
    on 1000 observations costs ~30 microseconds, so online learning keeps up with the simulator."""
    n, p = F.shape
    mean = np.zeros(p)
    for i in range(n):
        for j in range(p):
            mean[j] += F[i, j]
    mean /= n
    var = np.zeros(p)
    for i in range(n):
        for j in range(p):
            d = F[i, j] - mean[j]
            var[j] += d * d
    scale = np.sqrt(var / n)
    for j in range(p):
        if scale[j] < 1e-12:  # a constant feature in the window carries no information
            scale[j] = 1.0
    intercept = r.mean()
    Z = np.empty((n, p))
    for i in range(n):
        for j in range(p):
            Z[i, j] = (F[i, j] - mean[j]) / scale[j]
    A = Z.T @ Z
    for j in range(p):
        A[j, j] += alpha
    return mean, scale, np.linalg.solve(A, Z.T @ (r - intercept)), intercept


@njit(cache=True)
def _predict_ridge(F, mean, scale, coef, intercept, clip):
    n, p = F.shape
    out = np.empty(n)
    for i in range(n):
        acc = intercept
        for j in range(p):
            acc += (F[i, j] - mean[j]) / scale[j] * coef[j]
        out[i] = min(max(acc, -clip), clip)
    return out
