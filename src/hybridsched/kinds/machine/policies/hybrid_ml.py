"""Earliest predicted finish from a learned run-time model, with optional online retraining.

``prepare`` predicts the whole-task CPU time ``C`` and GPU time ``G`` of every task in
one batched call of the offline model (``models/rf``, from the train_rf stage); the
compiled kernel then makes EFT's decision (least-loaded GPU, best fraction on a grid)
from those predictions and the believed device free times.

Online (``online: true``): every ``retrain_every`` completions the engine hands over the
finished tasks; their actual ``C`` and ``G`` are recovered from the part durations
(CPU part ``(1 - f) C``, GPU part ``launch_s + f G``), the residuals against the offline
model go into a sliding window of the last ``window`` observations, a small residual
model is refitted on it (see ``kinds/machine/online.py`` for why) and the undecided tasks
within ``lookahead`` rows are re-predicted.  With the ridge correction (the default) all of this
is compiled and runs inside the engine's loop (``_learn_ridge``), and the re-prediction is lazy:
the kernel applies the latest correction to a row when it decides it, which gives the value an
eager re-prediction would have given, for one row instead of ``lookahead``.  The forest
correction runs in Python (``observe``) and re-predicts eagerly.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from numba import njit

from hybridsched.kinds.machine.features import task_features
from hybridsched.kinds.machine.online import (MAX_LOG_CORRECTION, ResidualModel, SlidingWindow, ridge_correction,
                                              ridge_refit, ridge_refit_stats, ridge_state_size, ridge_stats_size,
                                              window_add, window_add_tracked)
from hybridsched.kinds.machine.runtime_model import RuntimeModel, load_model
from hybridsched.kinds.machine.policies.base import Policy, fraction_grid
from hybridsched.kinds.machine.policies.classic import least_loaded_gpu
from hybridsched.kinds.machine.policies.eft import best_split
from hybridsched.kinds.machine.engine import MAX_F

# Columns of pdata: predicted C (s), predicted G (s), 1 once the task has been decided, the offline
# model's log C and log G, then the task's features (what the compiled learner reads).
_C, _G, _DECIDED, _BASE, _FEAT = 0, 1, 2, 3, 5
# Slots of params: launch overhead, where the fraction grid starts, the re-prediction span, the
# first undecided row at the last refit, 1 once refitted in this table, ridge alpha and min_obs,
# the size of one ridge state; then the two ridge corrections' states (online.ridge_state_size
# each), then a subclass's own slots (HybridMLOwnBelief: its believed free times), then the grid.
_LAUNCH, _GRID_AT, _SPAN, _LO, _REFITTED, _ALPHA, _MIN_OBS, _N_STATE = range(8)
_HEADER = 8
_MIN_FRACTION = 1e-9
_MAX_RESIDUAL = 4.0  # log-space: a factor of ~55 either way
RIDGE_UPDATES = ("refit", "incremental")


@njit
def _correct(i, pdata, params):
    """A refit re-predicts the undecided rows within `span` of the first undecided one; that is
    done here, lazily, for the one row being decided: same value, 1/span of the work."""
    pdata[i, _DECIDED] = 1.0  # lets the learner find the first undecided row
    if params[_REFITTED] > 0.0 and i < params[_LO] + params[_SPAN]:
        n_state = int(params[_N_STATE])
        for k in range(2):
            at = _HEADER + k * n_state
            corr = ridge_correction(params[at:at + n_state], pdata, i, _FEAT, MAX_LOG_CORRECTION)
            pdata[i, k] = np.exp(pdata[i, _BASE + k] + corr)


@njit  # not disk-cached: numba would not see edits to callees in other files
def _hybrid_ml(i, t, est, true_free, X, pdata, params):
    _correct(i, pdata, params)
    g = least_loaded_gpu(est, t)
    f, _ = best_split(pdata[i, _C], pdata[i, _G], params[_LAUNCH], est[0], est[g + 1],
                      params[int(params[_GRID_AT]):], X[i, MAX_F])
    return g, f


@njit  # not disk-cached: numba would not see edits to callees in other files
def _hybrid_ml_own(i, t, est, true_free, X, pdata, params):
    # The policy's own believed free time per device sits between the ridge states and the grid.
    # A device seen idle now (as the engine's belief sees it) frees at t; otherwise it frees
    # when the work this policy queued on it ends *by its own predictions*.
    _correct(i, pdata, params)
    grid_at = int(params[_GRID_AT])
    own = params[_HEADER + 2 * int(params[_N_STATE]):grid_at]
    for d in range(own.shape[0]):
        if true_free[d] <= t or own[d] < t:
            own[d] = t
    g = least_loaded_gpu(own, t)
    f, _ = best_split(pdata[i, _C], pdata[i, _G], params[_LAUNCH], own[0], own[g + 1], params[grid_at:], X[i, MAX_F])
    f = min(f, X[i, MAX_F])
    if f < 1.0:
        own[0] += (1.0 - f) * pdata[i, _C]
    if f > 0.0:
        own[g + 1] += params[_LAUNCH] + f * pdata[i, _G]
    return g, f


@njit
def _learn_ridge(rows, fraction, cpu_s, gpu_s, pdata, params, ldata):
    """The online step of the ridge correction, compiled (the engine calls it in its loop):
    the finished tasks' actual C and G go into the windows, both corrections are refitted and
    the undecided rows within ``span`` will be re-predicted as they are decided (see the kernel).
    ``ldata``: (window F, y, meta of C; the same of G; [refits, first undecided]; the windows'
    sums of C and G, empty unless ``ridge_update`` is incremental)."""
    wF0, wy0, m0, wF1, wy1, m1, counters, st0, st1 = ldata
    incremental = st0.shape[0] > 0
    p = wF0.shape[1]
    launch = params[_LAUNCH]
    k = rows.shape[0]
    F = np.empty((k, p))
    y = np.empty(k)
    m = 0
    for r in range(k):
        f, c = fraction[r], cpu_s[r]
        if f < 1.0 - _MIN_FRACTION and np.isfinite(c) and c > 0:
            F[m, :] = pdata[rows[r], _FEAT:_FEAT + p]
            y[m] = _residual(c / (1.0 - f), pdata[rows[r], _BASE])
            m += 1
    if incremental:
        window_add_tracked(wF0, wy0, m0, F[:m], y[:m], st0)
    else:
        window_add(wF0, wy0, m0, F[:m], y[:m])
    m = 0
    for r in range(k):
        # The launch overhead is noisy too, so G = (gpu part - launch) / f is only trustworthy
        # when the part is clearly longer than a launch; tiny GPU parts carry no information on G.
        f, g = fraction[r], gpu_s[r]
        if f > _MIN_FRACTION and np.isfinite(g) and g > 2.0 * launch:
            F[m, :] = pdata[rows[r], _FEAT:_FEAT + p]
            y[m] = _residual((g - launch) / f, pdata[rows[r], _BASE + 1])
            m += 1
    n_state = int(params[_N_STATE])
    alpha, min_obs = params[_ALPHA], int(params[_MIN_OBS])
    if incremental:
        window_add_tracked(wF1, wy1, m1, F[:m], y[:m], st1)
        ridge_refit_stats(params[_HEADER:_HEADER + n_state], st0, wF0, wy0, m0[1], alpha, min_obs)
        ridge_refit_stats(params[_HEADER + n_state:_HEADER + 2 * n_state], st1, wF1, wy1, m1[1], alpha, min_obs)
    else:
        window_add(wF1, wy1, m1, F[:m], y[:m])
        ridge_refit(params[_HEADER:_HEADER + n_state], wF0[:m0[1]], wy0[:m0[1]], alpha, min_obs)
        ridge_refit(params[_HEADER + n_state:_HEADER + 2 * n_state], wF1[:m1[1]], wy1[:m1[1]], alpha, min_obs)
    counters[0] += 1
    lo, n = counters[1], pdata.shape[0]
    while lo < n and pdata[lo, _DECIDED] != 0.0:  # each row is passed once over the whole run
        lo += 1
    counters[1] = lo
    params[_LO] = lo
    params[_REFITTED] = 1.0


@njit
def _residual(actual_s, base_log):
    """log(actual) - log(offline prediction), bounded so one odd observation cannot swamp a refit."""
    return min(max(np.log(actual_s) - base_log, -_MAX_RESIDUAL), _MAX_RESIDUAL)


class HybridML(Policy):
    """EFT on run times predicted by a RandomForest / XGBoost model (see module docstring)."""

    name = "hybrid_ml"
    role = "learned"
    trained_by = "train_rf"
    kernel = _hybrid_ml

    def __init__(self, model_dir: str = "models/rf", fraction_step: float = 0.05, online: bool = True,
                 retrain_every: int = 50, window: int = 1000, correction: str = "ridge", ridge_alpha: float = 10.0,
                 min_obs: int = 20, lookahead: int = 2000, correction_forest: dict | None = None,
                 seed: int = 0, model: RuntimeModel | None = None, ridge_update: str = "incremental") -> None:
        """``lookahead``: how many rows past the first undecided one are re-predicted after a
        refit (0 = all undecided); rows further ahead get the correction when they come
        within reach, which keeps a refit's cost independent of the workload's length.
        ``ridge_update``: ``refit`` recomputes the ridge from the window's rows at each refit (the
        schedules of every run so far); ``incremental`` keeps the window's sums up to date by
        rank-one updates and solves a p x p system per refit (``online.py``: the corrections
        agree to ~1e-12 relative, so a decision on a near-tie can differ)."""
        if ridge_update not in RIDGE_UPDATES:
            raise ValueError(f"policy ridge_update must be one of {list(RIDGE_UPDATES)}, got {ridge_update!r}")
        self.ridge_update = ridge_update
        self.model_dir = Path(model_dir)
        self.grid = fraction_grid(fraction_step)
        self.online = bool(online)
        self.retrain_every = int(retrain_every)
        if self.online and self.retrain_every < 1:
            raise ValueError(f"retrain_every must be >= 1, got {retrain_every}")
        self.observe_every = self.retrain_every if self.online else 0
        self.window = int(window)
        self.lookahead = int(lookahead)
        self._correction_args = dict(kind=correction, alpha=ridge_alpha, min_obs=min_obs,
                                     forest_params=correction_forest, seed=seed)
        ResidualModel(**self._correction_args)  # fail on a bad kind at construction, not mid-run
        self._model = model

    @property
    def model(self) -> RuntimeModel:
        """The offline model, loaded once from ``model_dir`` (ModelFileError if unusable); a model
        of a constant training target is used as the documented fallback (``runtime_model.py``),
        with a warning."""
        if self._model is None:
            self._model = load_model(self.model_dir)
            if self._model.warning:
                warnings.warn(f"{self.name}: {self._model.warning}", stacklevel=2)
        return self._model

    def load(self) -> None:
        self.model  # noqa: B018 (the property reads the file)

    @property
    def warning(self) -> str | None:
        """The fallback warning of the model (None when it learned something)."""
        return self.model.warning

    def prepare(self, tasks, cluster, X) -> None:
        self.n_gpus = cluster.n_gpus
        self.launch_s = cluster.launch_s
        self._F = task_features(X)
        self._base = self.model.predict_log(self._F)  # the one batched prediction of the run
        n, n_feat = self._F.shape
        self._pdata = np.zeros((n, _FEAT + n_feat))
        self._pdata[:, _C] = np.exp(self._base[:, 0])
        self._pdata[:, _G] = np.exp(self._base[:, 1])
        self._pdata[:, _BASE:_BASE + 2] = self._base
        self._pdata[:, _FEAT:] = self._F
        n_state = ridge_state_size(n_feat)
        grid_at = _HEADER + 2 * n_state + self.own_slots(cluster)
        self._params = np.zeros(grid_at + len(self.grid))
        self._params[_LAUNCH], self._params[_GRID_AT], self._params[_N_STATE] = cluster.launch_s, grid_at, n_state
        self._params[_SPAN] = self.lookahead if self.lookahead > 0 else n
        self._params[_ALPHA] = self._correction_args["alpha"]
        self._params[_MIN_OBS] = self._correction_args["min_obs"]
        self._params[grid_at:] = self.grid
        self._windows = (SlidingWindow(self.window, n_feat), SlidingWindow(self.window, n_feat))
        self._corrections = tuple(ResidualModel(**self._correction_args,
                                                state=self._params[_HEADER + k * n_state:_HEADER + (k + 1) * n_state])
                                  for k in range(2))
        self._counters = np.zeros(2, dtype=np.int64)  # [refits, first undecided row]
        incremental = self.ridge_update == "incremental" and self._corrections[0].kind == "ridge"
        n_stats = ridge_stats_size(n_feat) if incremental else 0
        self._stats = (np.zeros(n_stats), np.zeros(n_stats))  # the windows' sums (incremental ridge)
        # the ridge learns inside the engine's compiled loop; the forest in observe()
        self.learn_kernel = _learn_ridge if self.online and self._corrections[0].kind == "ridge" else None

    def own_slots(self, cluster) -> int:
        """Slots of params a subclass keeps for itself (between the ridge states and the grid)."""
        return 0

    @property
    def n_refits(self) -> int:
        """Refits so far (over the segments of a stream, with ``carry_on``)."""
        counters = getattr(self, "_counters", None)
        return 0 if counters is None else int(counters[0])

    def carry_on(self, tasks, cluster, X) -> None:
        """Next segment of a stream: keep the windows and corrections learned so far and apply
        them to the new tasks' predictions."""
        learned = getattr(self, "_windows", None), getattr(self, "_corrections", None), self.n_refits
        stats = getattr(self, "_stats", None)
        self.prepare(tasks, cluster, X)
        if learned[0] is None or not self.online:
            return
        self._windows = learned[0]
        self._stats = stats
        self._counters[0] = learned[2]
        for k, (correction, old) in enumerate(zip(self._corrections, learned[1])):
            correction.take_over(old)
            self._pdata[:, k] = np.exp(self._base[:, k] + correction.predict(self._F))

    def kernel_data(self):
        return self._pdata, self._params

    def learn_data(self) -> tuple:
        """What the compiled learner (``learn_kernel``) updates besides pdata and params."""
        w0, w1 = self._windows
        return w0.F, w0.y, w0.meta, w1.F, w1.y, w1.meta, self._counters, *self._stats

    def observe(self, rows, fraction, cpu_s, gpu_s) -> None:
        """Add the finished tasks' actual C and G to the windows, refit, re-predict the undecided
        (the engine calls ``learn_kernel`` in its loop instead where it can; same arithmetic)."""
        if self.learn_kernel is not None:
            self.learn_kernel(np.ascontiguousarray(rows, dtype=np.int64), np.ascontiguousarray(fraction, dtype=np.float64),
                              np.ascontiguousarray(cpu_s, dtype=np.float64), np.ascontiguousarray(gpu_s, dtype=np.float64),
                              self._pdata, self._params, self.learn_data())
            return
        F = self._F[rows]
        f = fraction
        has_cpu = (f < 1.0 - _MIN_FRACTION) & np.isfinite(cpu_s) & (cpu_s > 0)
        c = cpu_s[has_cpu] / (1.0 - f[has_cpu])
        self._add(0, F[has_cpu], _residuals(c, self._base[rows[has_cpu], 0]))
        # see _learn_ridge on why short GPU parts are skipped
        has_gpu = (f > _MIN_FRACTION) & np.isfinite(gpu_s) & (gpu_s > 2.0 * self.launch_s)
        g = (gpu_s[has_gpu] - self.launch_s) / f[has_gpu]
        self._add(1, F[has_gpu], _residuals(g, self._base[rows[has_gpu], 1]))
        for k, (window, correction) in enumerate(zip(self._windows, self._corrections)):
            if len(self._stats[k]):  # incremental ridge: the same arithmetic as _learn_ridge
                ridge_refit_stats(correction.state, self._stats[k], window.F, window.y, window.n, correction.alpha,
                                  correction.min_obs)
            else:
                correction.fit(*window.data())
        self._counters[0] += 1
        todo = self._undecided()
        if len(todo):
            Ft = self._F[todo]
            for k, correction in enumerate(self._corrections):
                self._pdata[todo, k] = np.exp(self._base[todo, k] + correction.predict(Ft))

    def _add(self, k: int, F: np.ndarray, y: np.ndarray) -> None:
        """Append observations to target ``k``'s window (and its sums, for the incremental ridge)."""
        w = self._windows[k]
        if len(self._stats[k]):
            window_add_tracked(w.F, w.y, w.meta, np.ascontiguousarray(F, dtype=np.float64),
                               np.ascontiguousarray(y, dtype=np.float64), self._stats[k])
        else:
            w.add(F, y)

    def _undecided(self) -> np.ndarray:
        """Rows not yet decided, from the first undecided one up to ``lookahead`` rows on."""
        n = len(self._pdata)
        span = int(self._params[_SPAN])
        decided = self._pdata[:, _DECIDED]
        lo = int(self._counters[1])
        while lo < n and decided[lo] != 0.0:  # each row is passed once over the whole run
            lo += 1
        self._counters[1] = lo
        return lo + np.flatnonzero(decided[lo : lo + span] == 0.0)


def _residuals(actual_s: np.ndarray, base_log: np.ndarray) -> np.ndarray:
    """``_residual`` of arrays (the forest correction's Python path)."""
    return np.clip(np.log(actual_s) - base_log, -_MAX_RESIDUAL, _MAX_RESIDUAL)


class HybridMLOwnBelief(HybridML):
    """hybrid_ml deciding on its own belief of the device free times, advanced by its own
    (corrected) predictions of the work it queued, instead of the engine's nominal belief."""

    name = "hybrid_ml_own"
    kernel = _hybrid_ml_own

    def own_slots(self, cluster) -> int:
        return cluster.n_devices

    def own_belief(self) -> np.ndarray:
        """The believed free time per device (CPU first), a view into the kernel's params."""
        return self._params[_HEADER + 2 * int(self._params[_N_STATE]):int(self._params[_GRID_AT])]

    def carry_on(self, tasks, cluster, X) -> None:
        """Next segment of a stream: the believed free times carry over too."""
        own = self.own_belief().copy() if hasattr(self, "_params") else None
        super().carry_on(tasks, cluster, X)
        if own is not None:
            self.own_belief()[:] = own
