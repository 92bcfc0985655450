"""Earliest predicted finish from a learned run-time model, with optional online retraining.

``prepare`` predicts the whole-task CPU time ``C`` and GPU time ``G`` of every task in
one batched call of the offline model (``models/rf``, from the train_rf stage); the
compiled kernel then makes EFT's decision (least-loaded GPU, best fraction on a grid)
from those predictions and the believed device free times.

Online (``online: true``): every ``retrain_every`` completions the engine hands over the
finished tasks; their actual ``C`` and ``G`` are recovered from the part durations
(CPU part ``(1 - f) C``, GPU part ``launch_s + f G``), the residuals against the offline
model go into a sliding window of the last ``window`` observations, a small residual
model is refitted on it (see ``kinds/machine/online.py`` for why) and the undecided tasks are
re-predicted in one batch.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from numba import njit

from hybridsched.kinds.machine.features import task_features
from hybridsched.kinds.machine.online import ResidualModel, SlidingWindow
from hybridsched.kinds.machine.runtime_model import RuntimeModel, load_model
from hybridsched.kinds.machine.policies.base import Policy, fraction_grid
from hybridsched.kinds.machine.policies.classic import least_loaded_gpu
from hybridsched.kinds.machine.policies.eft import best_split
from hybridsched.kinds.machine.engine import MAX_F

# Columns of pdata: predicted C (s), predicted G (s), 1 once the task has been decided.
_C, _G, _DECIDED = range(3)
_MIN_FRACTION = 1e-9
_MAX_RESIDUAL = 4.0  # log-space: a factor of ~55 either way


@njit  # not disk-cached: numba would not see edits to callees in other files
def _hybrid_ml(i, t, est, true_free, X, pdata, params):
    pdata[i, _DECIDED] = 1.0  # lets observe() re-predict only tasks still to be decided
    g = least_loaded_gpu(est, t)
    f, _ = best_split(pdata[i, _C], pdata[i, _G], params[0], est[0], est[g + 1], params[1:], X[i, MAX_F])
    return g, f


@njit  # not disk-cached: numba would not see edits to callees in other files
def _hybrid_ml_own(i, t, est, true_free, X, pdata, params):
    # params: launch, n_devices, the policy's own believed free time per device, then the grid.
    # A device seen idle now (as the engine's belief sees it) frees at t; otherwise it frees
    # when the work this policy queued on it ends *by its own predictions*.
    pdata[i, _DECIDED] = 1.0
    n_dev = int(params[1])
    own = params[2: 2 + n_dev]
    for d in range(n_dev):
        if true_free[d] <= t or own[d] < t:
            own[d] = t
    g = least_loaded_gpu(own, t)
    f, _ = best_split(pdata[i, _C], pdata[i, _G], params[0], own[0], own[g + 1], params[2 + n_dev:], X[i, MAX_F])
    f = min(f, X[i, MAX_F])
    if f < 1.0:
        own[0] += (1.0 - f) * pdata[i, _C]
    if f > 0.0:
        own[g + 1] += params[0] + f * pdata[i, _G]
    return g, f


class HybridML(Policy):
    """EFT on run times predicted by a RandomForest / XGBoost model (see module docstring)."""

    name = "hybrid_ml"
    kernel = _hybrid_ml

    def __init__(self, model_dir: str = "models/rf", fraction_step: float = 0.05, online: bool = True,
                 retrain_every: int = 50, window: int = 1000, correction: str = "ridge", ridge_alpha: float = 10.0,
                 min_obs: int = 20, lookahead: int = 2000, correction_forest: dict | None = None,
                 seed: int = 0, model: RuntimeModel | None = None) -> None:
        """``lookahead``: how many rows past the first undecided one are re-predicted after a
        refit (0 = all undecided); rows further ahead get the correction when they come
        within reach, which keeps a refit's cost independent of the workload's length."""
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
        self.n_refits = 0

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

    @property
    def warning(self) -> str | None:
        """The fallback warning of the model (None when it learned something)."""
        return self.model.warning

    def prepare(self, tasks, cluster, X) -> None:
        self.n_gpus = cluster.n_gpus
        self.launch_s = cluster.launch_s
        self._F = task_features(X)
        self._base = self.model.predict_log(self._F)  # the one batched prediction of the run
        self._pdata = np.zeros((len(X), 3))
        self._pdata[:, _C] = np.exp(self._base[:, 0])
        self._pdata[:, _G] = np.exp(self._base[:, 1])
        self._params = np.concatenate([[cluster.launch_s], self.grid])
        n_feat = self._F.shape[1]
        self._windows = (SlidingWindow(self.window, n_feat), SlidingWindow(self.window, n_feat))
        self._corrections = (ResidualModel(**self._correction_args), ResidualModel(**self._correction_args))
        self._first_undecided = 0
        self.n_refits = 0

    def carry_on(self, tasks, cluster, X) -> None:
        """Next segment of a stream: keep the windows and corrections learned so far and apply
        them to the new tasks' predictions."""
        learned = getattr(self, "_windows", None), getattr(self, "_corrections", None), self.n_refits
        self.prepare(tasks, cluster, X)
        if learned[0] is None or not self.online:
            return
        self._windows, self._corrections, self.n_refits = learned
        for k, correction in enumerate(self._corrections):
            self._pdata[:, k] = np.exp(self._base[:, k] + correction.predict(self._F))

    def kernel_data(self):
        return self._pdata, self._params

    def observe(self, rows, fraction, cpu_s, gpu_s) -> None:
        """Add the finished tasks' actual C and G to the windows, refit, re-predict the undecided."""
        F = self._F[rows]
        f = fraction
        has_cpu = (f < 1.0 - _MIN_FRACTION) & np.isfinite(cpu_s) & (cpu_s > 0)
        c = cpu_s[has_cpu] / (1.0 - f[has_cpu])
        self._windows[0].add(F[has_cpu], _residual(c, self._base[rows[has_cpu], 0]))
        # The launch overhead is noisy too, so G = (gpu part - launch) / f is only trustworthy
        # when the part is clearly longer than a launch; tiny GPU parts carry no information on G.
        has_gpu = (f > _MIN_FRACTION) & np.isfinite(gpu_s) & (gpu_s > 2.0 * self.launch_s)
        g = (gpu_s[has_gpu] - self.launch_s) / f[has_gpu]
        self._windows[1].add(F[has_gpu], _residual(g, self._base[rows[has_gpu], 1]))
        for window, correction in zip(self._windows, self._corrections):
            correction.fit(*window.data())
        self.n_refits += 1
        todo = self._undecided()
        if len(todo):
            Ft = self._F[todo]
            for k, correction in enumerate(self._corrections):
                self._pdata[todo, k] = np.exp(self._base[todo, k] + correction.predict(Ft))

    def _undecided(self) -> np.ndarray:
        """Rows not yet decided, from the first undecided one up to ``lookahead`` rows on."""
        n = len(self._pdata)
        span = self.lookahead if self.lookahead > 0 else n
        decided = self._pdata[:, _DECIDED]
        lo = self._first_undecided
        while lo < n:  # skip decided blocks; each row is skipped once over the whole run
            open_rows = np.flatnonzero(decided[lo : lo + span] == 0.0)
            if len(open_rows):
                lo += int(open_rows[0])
                break
            lo += span
        self._first_undecided = lo
        return lo + np.flatnonzero(decided[lo : lo + span] == 0.0)


def _residual(actual_s: np.ndarray, base_log: np.ndarray) -> np.ndarray:
    """log(actual) - log(offline prediction), bounded so one odd observation cannot swamp a refit."""
    return np.clip(np.log(actual_s) - base_log, -_MAX_RESIDUAL, _MAX_RESIDUAL)


class HybridMLOwnBelief(HybridML):
    """hybrid_ml deciding on its own belief of the device free times, advanced by its own
    (corrected) predictions of the work it queued, instead of the engine's nominal belief."""

    name = "hybrid_ml_own"
    kernel = _hybrid_ml_own

    def prepare(self, tasks, cluster, X) -> None:
        super().prepare(tasks, cluster, X)
        self._params = np.concatenate([[cluster.launch_s, cluster.n_devices], np.zeros(cluster.n_devices), self.grid])

    def carry_on(self, tasks, cluster, X) -> None:
        """Next segment of a stream: the believed free times carry over too."""
        own = self._params[2: 2 + cluster.n_devices].copy() if hasattr(self, "_params") else None
        super().carry_on(tasks, cluster, X)
        if own is not None:
            self._params[2: 2 + cluster.n_devices] = own
