"""The learned late dispatcher ``cem_late``: a per-candidate scorer over (waiting task, idle
device) pairs, searched by the cross-entropy method (``train_cem`` with
``cem.machine.dispatch=late``; :mod:`hybridsched.kinds.machine.late_cem_train`).

At each pick (``late_engine.py``) every waiting task ``i`` gets its split and start device
exactly as in :mod:`~hybridsched.kinds.machine.policies.late` (so a task whose split uses
only busy devices still waits), and the startable candidate of least

    score = key_i                                      # the base late heuristic's key, exactly
          + m * sum_k lin_k * phi_k                     # per-candidate terms (``LINEAR``)
          + m * sum_h out_h * tanh(in_h . psi + bias_h) # a tiny hidden layer (``HIDDEN_INPUTS``)

starts.  ``m`` is the running mean best-alone time of the tasks arrived so far (causal), so
``phi`` and ``psi`` are dimensionless: the candidate's believed finish, best time alone,
wait so far, predicted CPU and GPU times, whether it starts on the CPU, whether it is
split, the work left behind it (upward rank) and its dependants, the reserved parts queued
on its devices, the device-seconds it takes, and the finish, time alone and wait times the
load ``L = B / (B + m)`` (``B`` the believed work per device in queues and pool).  With
every learned weight 0 the score is the base key bit for bit (adding 0.0 changes no float).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numba import njit

from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.engine import CPU_S, GPU_S
from hybridsched.kinds.machine.policies.late import (
    _AGING,
    _ALONE,
    _BACKLOG,
    _LAUNCH,
    _N_PARAMS,
    _SLACK,
    _RANK,
    _W_ALONE,
    _W_FIN,
    _W_RANK,
    _WEIGHT,
    _WORK,
    N_PDATA,
    LateList,
    least_free_gpu,
    load_scale,
    split_of,
    start_device,
    task_data,
)

MODEL_FILE = "model.json"
LINEAR = ("finish", "alone", "wait", "cpu_time", "gpu_time", "on_cpu", "split", "rank", "children", "queue",
          "finish_x_load", "alone_x_load", "wait_x_load", "busy")
HIDDEN_INPUTS = ("finish", "alone", "wait", "cpu_time", "gpu_time", "on_cpu", "rank", "load")
N_LIN, N_IN = len(LINEAR), len(HIDDEN_INPUTS)
BASE_KEYS = ("w_fin", "w_alone", "w_rank", "aging", "beta_cpu", "beta_gpu", "backlog_s", "kappa")
_N_HID = _N_PARAMS  # params: the list kernel's head, the hidden-unit count, lin, hidden, then the grid
_HEAD = _N_PARAMS + 1
_CHILDREN, _MEAN = N_PDATA, N_PDATA + 1


@njit
def _cem_late(t, pool, n_pool, idle, est, qlen, X, ready, pdata, params):
    n_hid = int(params[_N_HID])
    lin = _HEAD
    hid = lin + N_LIN
    grid0 = hid + n_hid * (N_IN + 2)
    g = least_free_gpu(est)
    s = load_scale(t, pool, n_pool, est, pdata, params[_BACKLOG])
    newest = 0
    b = 0.0
    for k in range(n_pool):
        newest = max(newest, pool[k])
        b += pdata[pool[k], _WORK]
    for d in range(est.shape[0]):
        b += est[d] - t
    m = pdata[newest, _MEAN]
    b /= est.shape[0]
    load = b / (b + m)
    best_k = -1
    best_d = -1
    best_f = 0.0
    best = np.inf
    for k in range(n_pool):
        i = pool[k]
        f, fin, cb, gb = split_of(i, t, est[0], est[g + 1], X, params, grid0, s)
        d = start_device(f, g, idle, t, est[0], gb, params[_SLACK])
        if d < 0:
            continue
        key = (params[_W_FIN] * (fin - t) + params[_W_ALONE] * pdata[i, _ALONE] / pdata[i, _WEIGHT]
               - params[_W_RANK] * pdata[i, _RANK] - params[_AGING] * (t - ready[i]))
        fr = (fin - t) / m
        al = pdata[i, _ALONE] / m
        wt = (t - ready[i]) / m
        ct = X[i, CPU_S] / m
        gt = (params[_LAUNCH] + X[i, GPU_S]) / m
        on_cpu = 1.0 if d == 0 else 0.0
        split = 1.0 if (f > 0.0 and f < 1.0) else 0.0
        rk = pdata[i, _RANK] / m
        q = 0.0
        if f < 1.0:
            q += qlen[0]
        if f > 0.0:
            q += qlen[g + 1]
        extra = (params[lin] * fr + params[lin + 1] * al + params[lin + 2] * wt + params[lin + 3] * ct
                 + params[lin + 4] * gt + params[lin + 5] * on_cpu + params[lin + 6] * split + params[lin + 7] * rk
                 + params[lin + 8] * pdata[i, _CHILDREN] + params[lin + 9] * q + params[lin + 10] * fr * load
                 + params[lin + 11] * al * load + params[lin + 12] * wt * load + params[lin + 13] * (cb + gb) / m)
        for h in range(n_hid):
            o = hid + h * (N_IN + 2)
            z = (params[o] * fr / (1.0 + fr) + params[o + 1] * al / (1.0 + al) + params[o + 2] * wt / (1.0 + wt)
                 + params[o + 3] * ct / (1.0 + ct) + params[o + 4] * gt / (1.0 + gt) + params[o + 5] * on_cpu
                 + params[o + 6] * rk / (1.0 + rk) + params[o + 7] * load + params[o + 8])
            extra += params[o + N_IN + 1] * math.tanh(z)
        score = key + m * extra
        if score < best:
            best = score
            best_k = k
            best_d = d
            best_f = f
    return best_k, best_d, best_f, g


def learned_vector(model: dict[str, Any]) -> np.ndarray:
    """The learned part of the kernel's params from a model dict (``lin``, ``hidden``)."""
    lin = np.asarray(model["lin"], dtype=np.float64)
    hidden = np.asarray(model.get("hidden", []), dtype=np.float64).reshape(-1, N_IN + 2)
    if lin.shape != (N_LIN,):
        raise HybridschedError(f"cem_late model: 'lin' must have {N_LIN} weights, got {lin.size}")
    return np.concatenate([lin, hidden.ravel()])


class CEMLate(LateList):
    """Learned late dispatcher (module docstring); weights in ``model_dir/model.json``, written
    by ``train_cem`` with ``cem.machine.dispatch=late``, or given as ``model``."""

    name = "cem_late"
    role = "learned"
    trained_by = "train_late"
    pick_kernel: ClassVar[object] = _cem_late

    def __init__(self, model_dir: str = "models/cem_late", fraction_step: float = 0.05,
                 model: dict[str, Any] | None = None) -> None:
        super().__init__(fraction_step=fraction_step)
        self.model_dir = Path(model_dir)
        self._model = model  # read at prepare(), so a config check never needs the trained file

    def prepare(self, tasks, cluster, X) -> None:
        if self._model is None:
            self._model = load_model(self.model_dir)
        base = self._model["base"]
        self.w = {**self.w, **{k: float(base[k]) for k in BASE_KEYS}}  # queue_slack stays the default
        learned = learned_vector(self._model)
        n_hidden = (learned.size - N_LIN) // (N_IN + 2)
        self.n_gpus = cluster.n_gpus
        self._params = np.concatenate([np.asarray(self.head(cluster), dtype=np.float64), [float(n_hidden)], learned,
                                       self.grid])
        n = len(tasks)
        base_data = task_data(tasks, cluster, X, self.w["kappa"])
        running = np.cumsum(base_data[:, _ALONE]) / np.arange(1, n + 1)  # rows in arrival order: causal
        child_ptr, _ = tasks.children_csr()
        self._pdata = np.column_stack([base_data, np.diff(child_ptr).astype(np.float64), np.maximum(running, 1e-9)])


def base_from_spec(spec: dict[str, Any]) -> dict[str, float]:
    """A late heuristic's config (``policies.machine.<name>``) as the scorer's ``base`` block:
    the class's fixed weights (e.g. eft_late's ``w_fin = 1``) with the config's on top."""
    from hybridsched.kinds.base import instantiate

    policy = instantiate(spec)
    if not isinstance(policy, LateList):
        raise HybridschedError(f"cem.machine.late_base: {spec.get('_target_')} is not a late-dispatch heuristic")
    return {k: float(policy.w[k]) for k in BASE_KEYS}


def load_model(model_dir: Path) -> dict[str, Any]:
    """``model_dir/model.json``; one line naming the path when none was trained."""
    path = Path(model_dir) / MODEL_FILE
    if not path.is_file():
        raise HybridschedError(f"cem_late policy: no trained model at {path}; `dvc repro train_late` trains it")
    return json.loads(path.read_text())
