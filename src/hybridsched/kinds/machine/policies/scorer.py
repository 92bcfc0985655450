"""The learned ``cem`` policy: a per-candidate scoring function, searched by the cross-entropy
method (``train_cem`` stage, :mod:`hybridsched.kinds.machine.cem_train`).

At each decision it scores every candidate split ``f`` on the fraction grid (on the GPU that
frees up first: the GPUs are identical, so for a given ``f`` that GPU's candidate is never
worse than another GPU's under any term below) and takes the cheapest, as ``_weighted`` does:

    cost = alpha * w_i * (finish - t) + s * (beta_cpu * cpu_busy + beta_gpu * gpu_busy)
         + beta_transfer * transfer + gamma * energy                 # eft_rank's terms, exactly
         + sum_k lin_k * phi_k                                        # extra per-candidate terms
         + m_i * sum_h out_h * tanh(in_h . psi + bias_h)              # a tiny hidden layer

``phi`` (seconds; see ``LINEAR``) are the candidate's device-seconds unscaled and scaled by
each device class's believed backlog, its finish time scaled by load and by task size,
energy, idle-device terms and memory headroom; ``psi`` (see ``HIDDEN_INPUTS``) are the same
quantities made dimensionless by ``m_i``, the running mean of the best-alone time of the
tasks that arrived so far (causal: rows are in arrival order).  With every ``lin``/``out``
weight 0 the cost *is* eft_rank's, bit for bit (adding 0.0 changes no float), which the
search starts from.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.bounds import best_alone_seconds
from hybridsched.kinds.machine.engine import CPU_S, GPU_S, INTENSITY, MAX_F, MEMORY
from hybridsched.kinds.machine.policies.base import fraction_grid
from hybridsched.kinds.machine.policies.classic import least_loaded_gpu
from hybridsched.kinds.machine.policies.weighted import WeightedEFT, candidate, weighted_cost

MODEL_FILE = "model.json"
# The extra linear terms, in the order of the ``lin`` weights (docs/machine.md, "Learned policies and their training").
LINEAR = ("cpu_busy", "gpu_busy", "cpu_busy_x_cpu_backlog", "gpu_busy_x_gpu_backlog", "finish_x_load",
          "finish_x_size", "cpu_busy_gpu_idle", "gpu_busy_cpu_idle", "gpu_busy_x_memory_cap", "transfer", "energy")
HIDDEN_INPUTS = ("f", "cpu_busy", "gpu_busy", "finish", "cpu_backlog", "gpu_backlog", "size", "max_f", "intensity")
N_LIN, N_IN = len(LINEAR), len(HIDDEN_INPUTS)

# params layout: _weighted's head, then the learned part, then the fraction grid
# (the first ten slots are weighted.py's, so its cost function reads them)
_LAUNCH, _ALPHA, _B_CPU, _B_GPU, _B_TR, _GAMMA, _W_CPU, _W_GPU, _RATE, _BACKLOG, _N_HID = range(11)
_HEAD = 11
# pdata columns
_W, _MEAN, _SIZE = range(3)


def _n_learned(n_hidden: int) -> int:
    return N_LIN + n_hidden * (N_IN + 2)


@njit
def _cem_scorer(i, t, est, true_free, X, pdata, params):
    g = least_loaded_gpu(est, t)
    n_dev = est.shape[0]
    cpu_free = est[0]
    gpu_free = est[g + 1]
    b = 0.0
    for d in range(n_dev):
        b += max(est[d] - t, 0.0)
    b /= n_dev
    s = 1.0
    if params[_BACKLOG] > 0:
        s = b / (b + params[_BACKLOG])
    b_cpu = max(cpu_free - t, 0.0)
    b_gpu = 0.0
    for d in range(1, n_dev):
        b_gpu += max(est[d] - t, 0.0)
    b_gpu /= n_dev - 1
    m = pdata[i, _MEAN]
    rel = pdata[i, _SIZE]
    cpu_load = b_cpu / (b_cpu + m)      # 0 (idle) .. 1 (a long queue), relative to a typical task
    gpu_load = b_gpu / (b_gpu + m)
    cpu_idle = 1.0 if b_cpu <= 0.0 else 0.0
    gpu_idle = 1.0 if gpu_free <= t else 0.0
    cap = 1.0 - X[i, MAX_F]             # the share the GPU memory cannot take
    w = params[_ALPHA] * pdata[i, _W]
    c_s = X[i, CPU_S]
    g_s = X[i, GPU_S]
    tr = X[i, MEMORY] / params[_RATE]
    n_hid = int(params[_N_HID])
    lin = _HEAD
    hid = lin + N_LIN
    grid0 = hid + n_hid * (N_IN + 2)
    best_f = 0.0
    best = np.inf
    for k in range(grid0, params.shape[0]):
        f = params[k]
        if f > X[i, MAX_F]:
            break
        cpu_busy, gpu_busy, fin = candidate(f, t, c_s, g_s, cpu_free, gpu_free, params[_LAUNCH])
        energy = params[_W_CPU] * cpu_busy + params[_W_GPU] * gpu_busy
        cost = weighted_cost(params, w, s, t, f, tr, cpu_busy, gpu_busy, fin)  # eft_rank's, bit for bit
        cost += (params[lin] * cpu_busy + params[lin + 1] * gpu_busy
                 + params[lin + 2] * cpu_busy * cpu_load + params[lin + 3] * gpu_busy * gpu_load
                 + params[lin + 4] * (fin - t) * s + params[lin + 5] * (fin - t) * rel / (1.0 + rel)
                 + params[lin + 6] * cpu_busy * gpu_idle + params[lin + 7] * gpu_busy * cpu_idle
                 + params[lin + 8] * gpu_busy * cap + params[lin + 9] * f * tr
                 + params[lin + 10] * energy / (params[_W_GPU] + 1e-12))
        for h in range(n_hid):
            o = hid + h * (N_IN + 2)
            z = (params[o] * f + params[o + 1] * cpu_busy / m + params[o + 2] * gpu_busy / m
                 + params[o + 3] * (fin - t) / m + params[o + 4] * cpu_load + params[o + 5] * gpu_load
                 + params[o + 6] * rel / (1.0 + rel) + params[o + 7] * X[i, MAX_F] + params[o + 8] * X[i, INTENSITY]
                 + params[o + 9])
            cost += params[o + N_IN + 1] * m * math.tanh(z)
        if cost < best:
            best = cost
            best_f = f
    return g, best_f


def learned_vector(model: dict[str, Any]) -> np.ndarray:
    """The learned part of the kernel's params from a model dict (``lin``, ``hidden``)."""
    lin = np.asarray(model["lin"], dtype=np.float64)
    hidden = np.asarray(model.get("hidden", []), dtype=np.float64).reshape(-1, N_IN + 2)
    if lin.shape != (N_LIN,):
        raise HybridschedError(f"cem model: 'lin' must have {N_LIN} weights, got {lin.size}")
    return np.concatenate([lin, hidden.ravel()])


class CEMScorer(WeightedEFT):
    """Per-candidate learned scorer (module docstring); its weights are ``model_dir/model.json``,
    written by the ``train_cem`` stage, or given directly as ``model`` (training, tests)."""

    name = "cem"
    role = "learned"
    trained_by = "train_cem"
    kernel = _cem_scorer

    def __init__(self, model_dir: str = "models/cem", fraction_step: float = 0.05,
                 model: dict[str, Any] | None = None) -> None:
        self.model_dir = Path(model_dir)
        self.grid = fraction_grid(fraction_step)
        self._model = model  # read at prepare(), so a config check never needs the trained file

    def load(self) -> None:
        self._load()

    def _load(self) -> dict[str, Any]:
        if self._model is None:
            self._model = load_model(self.model_dir)
        return self._model

    def prepare(self, tasks, cluster, X) -> None:
        model = self._load()
        base = model["base"]
        self.backlog_s, self.kappa = float(base["backlog_s"]), float(base["kappa"])
        learned = learned_vector(model)
        n_hidden = (learned.size - N_LIN) // (N_IN + 2)
        head = [cluster.launch_s, base["alpha"], base["beta_cpu"], base["beta_gpu"], base["beta_transfer"],
                base["gamma"], cluster.cpu_busy_w, cluster.gpu_busy_w, cluster.transfer_mb_per_s, self.backlog_s,
                n_hidden]
        self._params = np.concatenate([np.asarray(head, dtype=np.float64), learned, self.grid])
        n = len(tasks)
        d = best_alone_seconds(X[:, CPU_S], X[:, GPU_S], np.full(n, cluster.launch_s), X[:, MAX_F])
        running = np.cumsum(d) / np.arange(1, n + 1)  # rows are in arrival order: only tasks already seen
        pdata = np.empty((n, 3))
        pdata[:, _W] = self._finish_weights(tasks, cluster, X)
        pdata[:, _MEAN] = np.maximum(running, 1e-9)
        pdata[:, _SIZE] = d / pdata[:, _MEAN]
        self._pdata = pdata


def base_from_eft_rank(spec: dict[str, Any]) -> dict[str, float]:
    """eft_rank's weights (its policy config) in the scorer's ``base`` block."""
    keys = {"alpha": 1.0, "beta_cpu": 1.0, "beta_gpu": 0.5, "beta_transfer": 0.0, "gamma": 0.0, "backlog_s": 2.0,
            "kappa": 0.5}
    return {k: float(spec.get(k, v)) for k, v in keys.items()}


def load_model(model_dir: Path) -> dict[str, Any]:
    """``model_dir/model.json``; one line naming the path when the train_cem stage has not made one."""
    path = Path(model_dir) / MODEL_FILE
    if not path.is_file():
        why = " (train_cem skipped: see skipped.json there)" if (Path(model_dir) / "skipped.json").is_file() else ""
        raise HybridschedError(f"{path}: no trained cem model{why} (run: dvc repro train_cem)")
    try:
        model = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:  # a truncated or overwritten file
        raise HybridschedError(f"{path}: not a valid model file ({type(e).__name__} at char "
                               f"{getattr(e, 'pos', getattr(e, 'start', '?'))}); rerun the train_cem stage") from None
    base_keys = ("alpha", "beta_cpu", "beta_gpu", "beta_transfer", "gamma", "backlog_s", "kappa")
    missing = [k for k in ("base", "lin") if not isinstance(model, dict) or k not in model]
    missing += [f"base.{k}" for k in base_keys if isinstance(model, dict) and isinstance(model.get("base"), dict)
                and k not in model["base"]]
    if missing:
        raise HybridschedError(f"{path}: model lacks key(s) {', '.join(missing)}; rerun the train_cem stage")
    return model
