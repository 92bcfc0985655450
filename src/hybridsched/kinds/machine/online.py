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
RandomForest; non-linear, ~20 ms per refit).  The ridge's window, refit and prediction are numba
functions on plain arrays, so ``hybrid_ml`` runs them inside the engine's compiled loop.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from hybridsched.errors import HybridschedError

CORRECTIONS = ("ridge", "forest")
MAX_LOG_CORRECTION = 4.0  # never scale a prediction by more than e^4 ~ 55x either way


class SlidingWindow:
    """The most recent ``size`` (feature row, value) pairs, in a ring buffer (arrays only, so
    a compiled learner can append to it: see ``window_add``)."""

    def __init__(self, size: int, n_features: int) -> None:
        if size < 1:
            raise HybridschedError(f"policy window must be >= 1, got {size}")
        self.F = np.empty((size, n_features))
        self.y = np.empty(size)
        self.size = size
        self.meta = np.zeros(2, dtype=np.int64)  # [next slot to write, how many slots hold data]

    @property
    def n(self) -> int:
        """How many slots hold data."""
        return int(self.meta[1])

    def add(self, F: np.ndarray, y: np.ndarray) -> None:
        """Append rows, overwriting the oldest once full."""
        window_add(self.F, self.y, self.meta, np.ascontiguousarray(F, dtype=np.float64),
                   np.ascontiguousarray(y, dtype=np.float64))

    def data(self) -> tuple[np.ndarray, np.ndarray]:
        """The stored (features, values), in slot order (the order every refit sees them in)."""
        return self.F[: self.n], self.y[: self.n]


@njit(cache=True)
def window_add(wF, wy, meta, F, y):
    """Append rows ``F``, ``y`` to the ring buffer ``wF``, ``wy`` (``meta`` = [head, n])."""
    size = wy.shape[0]
    k = y.shape[0]
    first = 0
    if k >= size:  # only the newest `size` survive
        first, k = y.shape[0] - size, size
    head = meta[0]
    for r in range(k):
        slot = (head + r) % size
        wF[slot, :] = F[first + r, :]
        wy[slot] = y[first + r]
    meta[0] = (head + k) % size
    meta[1] = min(size, meta[1] + k)


def ridge_state_size(n_features: int) -> int:
    """Length of a ridge correction's state vector: [fitted, intercept, mean, scale, coef]."""
    return 2 + 3 * n_features


class ResidualModel:
    """A fresh small regression of one target's residual, refitted on each call to ``fit``.

    A ridge correction lives in one float vector (``state``, see ``ridge_state_size``), which
    the caller may hand in as a view of a larger array, so a compiled kernel reads the current
    correction without a call back into Python."""

    def __init__(self, kind: str = "ridge", alpha: float = 10.0, min_obs: int = 20,
                 forest_params: dict | None = None, seed: int = 0, state: np.ndarray | None = None) -> None:
        if kind not in CORRECTIONS:
            raise HybridschedError(f"policy correction must be one of {list(CORRECTIONS)}, got {kind!r}")
        self.kind = kind
        self.alpha = float(alpha)
        self.min_obs = int(min_obs)
        self.forest_params = dict(forest_params or {"n_estimators": 10, "max_depth": 5, "min_samples_leaf": 5})
        self.seed = seed
        self.state = state  # ridge: allocated on the first fit when not handed in
        self._forest: Any = None

    @property
    def fitted(self) -> bool:
        if self.kind == "ridge":
            return self.state is not None and self.state[0] > 0.0
        return self._forest is not None

    def take_over(self, other: ResidualModel) -> None:
        """Continue from ``other``'s fit (a stream's next segment)."""
        if self.kind == "ridge":
            if other.state is not None:
                if self.state is None:
                    self.state = np.zeros_like(other.state)
                self.state[:] = other.state
        else:
            self._forest = other._forest

    def fit(self, F: np.ndarray, r: np.ndarray) -> None:
        """Refit on the window; with fewer than ``min_obs`` observations, predict 0."""
        if self.kind == "ridge":
            if self.state is None:
                self.state = np.zeros(ridge_state_size(F.shape[1]))
            ridge_refit(self.state, np.ascontiguousarray(F), np.ascontiguousarray(r), self.alpha, self.min_obs)
            return
        if len(r) < self.min_obs:
            self._forest = None
            return
        from sklearn.ensemble import RandomForestRegressor

        self._forest = RandomForestRegressor(random_state=self.seed, n_jobs=1, **self.forest_params).fit(F, r)

    def predict(self, F: np.ndarray) -> np.ndarray:
        """The residual (log-time correction) for feature rows ``F``; 0 when not fitted."""
        if not self.fitted or len(F) == 0:
            return np.zeros(len(F))
        if self.kind == "ridge":
            return _predict_ridge(np.ascontiguousarray(F), self.state, MAX_LOG_CORRECTION)
        return np.clip(self._forest.predict(F), -MAX_LOG_CORRECTION, MAX_LOG_CORRECTION)


@njit(cache=True)
def _fit_ridge(F, r, alpha):
    """Ridge regression on standardised features (intercept not penalised), compiled: a refit
    on 1000 observations costs tens of microseconds, so online learning keeps up with the simulator.

    The arithmetic (and its order) is what every hybrid_ml schedule so far was made with:
    keep it, or the schedules change."""
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
def ridge_refit(state, F, r, alpha, min_obs):
    """Refit the ridge correction ``state`` on ``F``, ``r``; unfitted (predicts 0) below ``min_obs``."""
    if r.shape[0] < min_obs:
        state[0] = 0.0
        return
    p = F.shape[1]
    mean, scale, coef, intercept = _fit_ridge(F, r, alpha)
    state[0], state[1] = 1.0, intercept
    state[2:2 + p] = mean
    state[2 + p:2 + 2 * p] = scale
    state[2 + 2 * p:2 + 3 * p] = coef


@njit(cache=True)
def ridge_correction(state, F, i, col, clip):
    """The correction of row ``i`` whose features start at column ``col`` of ``F``: 0 when not
    fitted, else the ridge prediction clipped to +-``clip``."""
    if state[0] <= 0.0:
        return 0.0
    p = (state.shape[0] - 2) // 3
    acc = state[1]
    for j in range(p):
        acc += (F[i, col + j] - state[2 + j]) / state[2 + p + j] * state[2 + 2 * p + j]
    return min(max(acc, -clip), clip)


@njit(cache=True)
def _predict_ridge(F, state, clip):
    out = np.empty(F.shape[0])
    for i in range(F.shape[0]):
        out[i] = ridge_correction(state, F, i, 0, clip)
    return out


# --- incremental ridge: the window's sums kept up to date, a p x p solve per refit ---------------
#
# ``ridge_refit`` recomputes the window's means, scales and Z^T Z from its rows (O(window p^2) per
# refit).  ``ridge_update: incremental`` keeps the sums those are made of (shifted by a fixed row
# ``c`` so that no large mean cancels: u = F - c; sum r, sum u, sum u r, sum u u^T) up to date with
# one rank-one update per row entering or leaving the window, and turns them into the same
# standardised ridge system at each refit (p x p, solved by Cholesky).  Same solution in exact
# arithmetic; the float sums are added in another order, so the corrections differ from the full
# refit in the last bits (relative ~1e-12, test_learned_speed.py), and a decision that sat on such a
# tie can go the other way.  The sums are recomputed from the window's rows once per ``window``
# additions, so rounding does not pile up over a long run.

def ridge_stats_size(n_features: int) -> int:
    """Length of a window's sums vector: [shift set, rows since exact, sum r, c, sum u, sum u r, sum u u^T]."""
    return 3 + 3 * n_features + n_features * n_features


@njit(cache=True)
def _stats_row(st, f, r, sign):
    """Add (sign 1) or remove (sign -1) the row ``f`` with value ``r`` from the sums ``st``."""
    p = f.shape[0]
    c, su, sur, suu = 3, 3 + p, 3 + 2 * p, 3 + 3 * p
    st[2] += sign * r
    for j in range(p):
        uj = f[j] - st[c + j]
        st[su + j] += sign * uj
        st[sur + j] += sign * uj * r
        row = suu + j * p
        for k in range(j, p):  # upper triangle: the solve reads no more
            st[row + k] += sign * uj * (f[k] - st[c + k])


@njit(cache=True)
def _stats_exact(st, wF, wy, n):
    """The sums recomputed from the window's ``n`` rows (bounds the rounding of the updates)."""
    p = wF.shape[1]
    st[2:3] = 0.0
    st[3 + p:] = 0.0
    for i in range(n):
        _stats_row(st, wF[i], wy[i], 1.0)
    st[1] = 0.0


@njit(cache=True)
def window_add_tracked(wF, wy, meta, F, y, st):
    """``window_add`` that keeps the window's sums ``st`` (``ridge_stats_size``) up to date: a row
    that a new one overwrites leaves them, the new one enters."""
    size = wy.shape[0]
    p = wF.shape[1]
    k = y.shape[0]
    first = 0
    if k >= size:
        first, k = y.shape[0] - size, size
    if k == 0:
        return
    if st[0] == 0.0:  # the shift: the first row ever seen
        st[3:3 + p] = F[first, :]
        st[0] = 1.0
    head, n = meta[0], meta[1]
    for r in range(k):
        slot = (head + r) % size
        if n == size:
            _stats_row(st, wF[slot], wy[slot], -1.0)
        else:
            n += 1
        wF[slot, :] = F[first + r, :]
        wy[slot] = y[first + r]
        _stats_row(st, wF[slot], wy[slot], 1.0)
    meta[0] = (head + k) % size
    meta[1] = n
    st[1] += k
    if st[1] >= size:
        _stats_exact(st, wF, wy, n)


@njit(cache=True)
def ridge_refit_stats(state, st, wF, wy, n, alpha, min_obs):
    """``ridge_refit`` from the window's sums: the same standardised ridge system (population
    scale, unpenalised intercept), built in O(p^2) and solved by Cholesky in O(p^3).  Falls back
    to the full refit on the window's rows if the system is not positive definite (alpha 0 and
    a degenerate window), where the full refit's LU solve decides what happens."""
    if n < min_obs:
        state[0] = 0.0
        return
    p = wF.shape[1]
    c, su, sur, suu = 3, 3 + p, 3 + 2 * p, 3 + 3 * p
    mu = np.empty(p)
    scale = np.empty(p)
    for j in range(p):
        mu[j] = st[su + j] / n
        var = st[suu + j * p + j] / n - mu[j] * mu[j]
        scale[j] = np.sqrt(var) if var > 0.0 else 0.0
        if scale[j] < 1e-12:
            scale[j] = 1.0
    rbar = st[2] / n
    L = np.zeros((p, p))
    b = np.empty(p)
    for j in range(p):
        b[j] = (st[sur + j] - n * mu[j] * rbar) / scale[j]
        for k in range(j, p):
            a = (st[suu + j * p + k] - n * mu[j] * mu[k]) / (scale[j] * scale[k])
            L[k, j] = a + alpha if k == j else a  # lower triangle of A, factored in place below
    for j in range(p):  # Cholesky A = L L^T
        d = L[j, j]
        for k in range(j):
            d -= L[j, k] * L[j, k]
        if not d > 0.0:
            ridge_refit(state, wF[:n], wy[:n], alpha, min_obs)
            return
        d = np.sqrt(d)
        L[j, j] = d
        for i in range(j + 1, p):
            v = L[i, j]
            for k in range(j):
                v -= L[i, k] * L[j, k]
            L[i, j] = v / d
    coef = np.empty(p)
    for j in range(p):  # L z = b
        v = b[j]
        for k in range(j):
            v -= L[j, k] * coef[k]
        coef[j] = v / L[j, j]
    for j in range(p - 1, -1, -1):  # L^T coef = z
        v = coef[j]
        for k in range(j + 1, p):
            v -= L[k, j] * coef[k]
        coef[j] = v / L[j, j]
    state[0], state[1] = 1.0, rbar
    for j in range(p):
        state[2 + j] = st[c + j] + mu[j]
        state[2 + p + j] = scale[j]
        state[2 + 2 * p + j] = coef[j]
