"""``dqn_late``: a per-candidate Q-network for late dispatch (after Decima's per-node scores).

At each pick (``late_engine.py``) every waiting task offers up to three candidates, one per
split rule on the believed free times of the CPU and the GPU that frees first:

- ``A``: the split of earliest believed finish (plain EFT, ``eft_late`` with every weight 0);
- ``B``: the split of least ``finish + s * (beta_cpu * cpu_busy + beta_gpu * gpu_busy)``
  (eft_rank's work charge; ``s`` as ``eft_late``'s, ``late.load_scale``), only when it differs
  from A.  The model file's ``option_b`` sets ``beta_cpu``, ``beta_gpu`` and ``backlog_s``;
  without it they are 1, 1 and 0 (``s = 1``): a weight-1 charge;
- ``C``: only when the model file has ``option_c`` (the same keys): B's rule with that charge,
  only when its split differs from A's and B's.

A candidate whose split uses only busy devices is not offered (the task waits); with the
model file's ``queue_slack`` neither is a split that would start on a GPU while its CPU part
waits longer than that many times its GPU part (``late.start_device``).  Each
candidate gets ``N_FEAT`` features (``FEATURES``, dimensionless: times over the running mean
best-alone time ``m``, squashed by ``x / (1 + x)``), and

    Q = MLP(features) - finish / m

with ``MLP`` two ReLU layers of ``hidden`` units and one linear output.  The candidate of
largest Q starts (ties: the first).  The ``- finish / m`` term is a fixed prior: with the
MLP's output layer 0 the policy is plain late EFT (``eft_late_plain``), so training starts
from a sane policy and the network learns the correction.  Training
(:mod:`hybridsched.kinds.machine.late_dqn_train`) is double DQN on Decima's reward,
``-(seconds to the next decision) x (tasks in the system) / m``, whose sum over a run is
minus the total latency.  The forward pass here is numba (no torch), the same arithmetic as
the training network's (a test checks they agree).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numba import njit

from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.engine import CPU_S, GPU_S, MAX_F
from hybridsched.kinds.machine.late_engine import RESERVED
from hybridsched.kinds.machine.policies.late import (
    _ALONE,
    _B_CPU,
    _B_GPU,
    _BACKLOG,
    _LAUNCH,
    _N_PARAMS,
    _SLACK,
    _RANK,
    _WORK,
    LateList,
    least_free_gpu,
    load_scale,
    split_times,
    start_device,
    task_data,
)

MODEL_FILE = "model.json"
FEATURES = ("finish", "alone", "wait", "cpu_time", "gpu_time", "on_cpu", "split", "rank", "children", "queue",
            "load", "pool", "busy", "idle_share", "option_b")
N_FEAT = len(FEATURES)
_CHILDREN, _MEAN = 4, 5  # extra pdata columns after late.task_data's four
# params: the list kernel's head (option B's charge in it), option C's (present, beta_cpu,
# beta_gpu, backlog_s), hidden units, the packed MLP, its two weight matrices again transposed
# (the forward pass reads them unit-minor), then the fraction grid (at ``grid_start``)
_C_ON, _C_CPU, _C_GPU, _C_BACKLOG = range(_N_PARAMS, _N_PARAMS + 4)
_HID = _N_PARAMS + 4
_NET = _HID + 1


def n_weights(hidden: int) -> int:
    """Length of the packed MLP: W1 (hidden x N_FEAT), b1, W2 (hidden x hidden), b2, w3, b3."""
    return hidden * N_FEAT + hidden + hidden * hidden + hidden + hidden + 1


@njit
def _sq(x):
    return x / (1.0 + x) if x > 0.0 else 0.0


@njit
def split_options(i, t, cpu_free, gpu_free, X, params, grid0, s_b, s_c, n_opt, out):
    """``out[o] = (f, finish, cpu_busy, gpu_busy)`` of task ``i``'s split under option ``o``
    (module docstring): A (no charge), B (option B's charge at scale ``s_b``) and, when
    ``n_opt`` is 3, C (option C's at ``s_c``), in one pass over the fraction grid.  Each is
    ``late.split_charged``'s result with the same arithmetic in the same order (tested)."""
    c_s = X[i, CPU_S]
    g_s = X[i, GPU_S]
    launch = params[_LAUNCH]
    b_cpu, b_gpu = params[_B_CPU], params[_B_GPU]
    c_cpu, c_gpu = params[_C_CPU], params[_C_GPU]
    s_a = s_b * 0.0  # A is B's rule with no charge
    fin0 = cpu_free + c_s
    best_a = fin0 - t + s_a * b_cpu * c_s
    best_b = fin0 - t + s_b * b_cpu * c_s
    best_c = fin0 - t + s_c * c_cpu * c_s
    for o in range(3):
        out[o, 0] = 0.0
        out[o, 1] = fin0
        out[o, 2] = c_s
        out[o, 3] = 0.0
    for k in range(grid0 + 1, params.shape[0]):
        f = params[k]
        if f > X[i, MAX_F]:
            break
        cb, gb, fin = split_times(f, c_s, g_s, launch, cpu_free, gpu_free)
        cost = fin - t + s_a * (b_cpu * cb + b_gpu * gb)
        if cost < best_a:
            best_a = cost
            out[0, 0], out[0, 1], out[0, 2], out[0, 3] = f, fin, cb, gb
        cost = fin - t + s_b * (b_cpu * cb + b_gpu * gb)
        if cost < best_b:
            best_b = cost
            out[1, 0], out[1, 1], out[1, 2], out[1, 3] = f, fin, cb, gb
        if n_opt == 3:
            cost = fin - t + s_c * (c_cpu * cb + c_gpu * gb)
            if cost < best_c:
                best_c = cost
                out[2, 0], out[2, 1], out[2, 2], out[2, 3] = f, fin, cb, gb


@njit
def candidates(t, pool, n_pool, idle, est, X, qlen, ready, pdata, params, grid0):
    """Every startable (task, split) candidate: features (n, N_FEAT + 1; the last column is the
    prior ``finish / m``), pool position, start device, split, and the GPU of the splits."""
    n_dev = est.shape[0]
    g = least_free_gpu(est)
    newest = 0
    b = 0.0
    for k in range(n_pool):
        newest = max(newest, pool[k])
        b += pdata[pool[k], _WORK]
    for d in range(n_dev):
        b += est[d] - t
    m = pdata[newest, _MEAN]
    b /= n_dev
    load = b / (b + m)
    n_idle = 0
    for d in range(n_dev):
        n_idle += idle[d]
    s_b = load_scale(t, pool, n_pool, est, pdata, params[_BACKLOG])  # option B's charge scale
    n_opt = 3 if params[_C_ON] > 0.0 else 2
    s_c = load_scale(t, pool, n_pool, est, pdata, params[_C_BACKLOG]) if n_opt == 3 else 0.0
    feat = np.zeros((n_opt * n_pool, N_FEAT + 1))
    ck = np.empty(n_opt * n_pool, dtype=np.int64)
    cd = np.empty(n_opt * n_pool, dtype=np.int64)
    cf = np.empty(n_opt * n_pool)
    opts = np.empty((3, 4))
    c = 0
    for k in range(n_pool):
        i = pool[k]
        f_a = -1.0
        f_b = -1.0
        split_options(i, t, est[0], est[g + 1], X, params, grid0, s_b, s_c, n_opt, opts)
        for opt in range(n_opt):
            f, fin, cb, gb = opts[opt, 0], opts[opt, 1], opts[opt, 2], opts[opt, 3]
            if opt == 0:
                f_a = f
            elif opt == 1:
                if f == f_a:
                    continue
                f_b = f
            elif f == f_a or f == f_b:
                continue
            d = start_device(f, g, idle, t, est[0], gb, params[_SLACK])
            if d < 0:
                continue
            q = 0.0
            if f < 1.0:
                q += qlen[0]
            if f > 0.0:
                q += qlen[g + 1]
            fr = (fin - t) / m
            feat[c, 0] = _sq(fr)
            feat[c, 1] = _sq(pdata[i, _ALONE] / m)
            feat[c, 2] = _sq((t - ready[i]) / m)
            feat[c, 3] = _sq(X[i, CPU_S] / m)
            feat[c, 4] = _sq((params[0] + X[i, GPU_S]) / m)
            feat[c, 5] = 1.0 if d == 0 else 0.0
            feat[c, 6] = 1.0 if (f > 0.0 and f < 1.0) else 0.0
            feat[c, 7] = _sq(pdata[i, _RANK] / m)
            feat[c, 8] = _sq(pdata[i, _CHILDREN])
            feat[c, 9] = _sq(q)
            feat[c, 10] = load
            feat[c, 11] = _sq(n_pool / n_dev)
            feat[c, 12] = _sq((cb + gb) / m)
            feat[c, 13] = n_idle / n_dev
            feat[c, 14] = 1.0 if opt > 0 else 0.0
            feat[c, N_FEAT] = fr
            ck[c] = k
            cd[c] = d
            cf[c] = f
            c += 1
    return c, g, feat, ck, cd, cf


@njit
def q_values(feat, c, params, off, hidden):
    """Q of the first ``c`` candidates: the MLP at ``off`` (``forward_params``) minus the prior.

    The sums run over the transposed copies of W1 and W2 (after the packed MLP), so the
    innermost loop is over the hidden units (which the compiler vectorises), while each unit's
    sum keeps the order ``acc = b; acc += w_q x_q`` for q = 0, 1, ...: the operations of the
    plain row-by-row forward pass, in its order, so the same bits.  A unit of layer 1 whose
    ReLU is off is skipped: adding ``w * 0`` changes no sum but the sign of a zero."""
    w1 = off
    b1 = w1 + hidden * N_FEAT
    w2 = b1 + hidden
    b2 = w2 + hidden * hidden
    w3 = b2 + hidden
    b3 = w3 + hidden
    t1 = b3 + 1  # W1 transposed (N_FEAT x hidden), then W2 transposed (hidden x hidden)
    t2 = t1 + N_FEAT * hidden
    # 2-D views whose rows the inner loops walk: plain ``params[i + r]`` indexing keeps
    # numba's negative-index check in the loop, which stops the compiler vectorising it
    w1t = params[t1:t2].reshape((N_FEAT, hidden))
    w2t = params[t2:t2 + hidden * hidden].reshape((hidden, hidden))
    out = np.empty(c)
    h1 = np.empty(hidden)
    h2 = np.empty(hidden)
    for j in range(c):
        for r in range(hidden):
            h1[r] = params[b1 + r]
        for q in range(N_FEAT):
            x = feat[j, q]
            wq = w1t[q]
            for r in range(hidden):
                h1[r] += wq[r] * x
        for r in range(hidden):
            h2[r] = params[b2 + r]
        for q in range(hidden):
            x = h1[q]
            if x > 0.0:  # the ReLU of layer 1: a unit that is off adds nothing
                wq = w2t[q]
                for r in range(hidden):
                    h2[r] += wq[r] * x
        v = params[b3]
        for r in range(hidden):
            if h2[r] > 0.0:
                v += params[w3 + r] * h2[r]
        out[j] = v - feat[j, N_FEAT]
    return out


@njit
def _dqn_late(t, pool, n_pool, idle, est, qlen, X, ready, pdata, params):
    hidden = int(params[_HID])
    grid0 = grid_start(hidden)
    c, g, feat, ck, cd, cf = candidates(t, pool, n_pool, idle, est, X, qlen, ready, pdata, params, grid0)
    if c == 0:
        return -1, -1, 0.0, g
    q = q_values(feat, c, params, _NET, hidden)
    a = 0
    for j in range(1, c):
        if q[j] > q[a]:
            a = j
    return ck[a], cd[a], cf[a], g


@njit
def n_weights_nb(hidden):
    return hidden * N_FEAT + hidden + hidden * hidden + hidden + hidden + 1


@njit
def grid_start(hidden):
    """Where the fraction grid starts in the kernel's params (``head_params``)."""
    return _NET + n_weights_nb(hidden) + N_FEAT * hidden + hidden * hidden


def pdata_of(tasks, cluster, X) -> np.ndarray:
    """late.task_data's columns plus dependants and the causal running mean best-alone time."""
    n = len(tasks)
    base = task_data(tasks, cluster, X, 0.0)
    running = np.cumsum(base[:, _ALONE]) / np.arange(1, n + 1)  # rows in arrival order: causal
    child_ptr, _ = tasks.children_csr()
    return np.column_stack([base, np.diff(child_ptr).astype(np.float64), np.maximum(running, 1e-9)])


OPTION_B = {"beta_cpu": 1.0, "beta_gpu": 1.0, "backlog_s": 0.0}  # a model file without ``option_b``


def option_of(model: dict[str, Any], key: str, who: str) -> dict[str, float] | None:
    """The model's split option ``key`` (``option_b`` / ``option_c``) work charge: ``OPTION_B``'s
    keys, missing ones from it; None when the file has no such key; one line on a bad one."""
    given = model.get(key)
    if given is None:
        return None
    ok = isinstance(given, dict) and set(given) <= set(OPTION_B) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in given.values())
    if not ok:
        raise HybridschedError(f"{who}: {key} must hold non-negative numbers {sorted(OPTION_B)}, got {given!r}")
    return {k: float(v) for k, v in {**OPTION_B, **given}.items()}


def slack_of(model: dict[str, Any], who: str) -> float:
    """The model's ``queue_slack`` (``late.start_device``): infinite (no hold) when absent; one
    line on a bad one."""
    v = model.get("queue_slack")
    if v is None:
        return np.inf
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not v >= 0:
        raise HybridschedError(f"{who}: queue_slack must be a number >= 0, got {v!r}")
    return float(v)


def reserved_of(model: dict[str, Any], who: str) -> str:
    """The model's ``reserved_order`` (the late engine's order of reserved parts): ``fifo`` when
    absent; one line on a bad one."""
    v = model.get("reserved_order", "fifo")
    if v not in RESERVED:
        raise HybridschedError(f"{who}: reserved_order must be one of {list(RESERVED)}, got {v!r}")
    return v


def head_params(cluster, hidden: int, weights: np.ndarray, grid: np.ndarray,
                option_b: dict[str, float] | None = None, option_c: dict[str, float] | None = None,
                queue_slack: float = np.inf) -> np.ndarray:
    """The kernel's params: split option B's work charge (``OPTION_B`` unless given), the split
    hold (``late.start_device``; none unless given), option C's charge (none unless given), the
    hidden-unit count, the packed MLP, its W1 and W2 transposed (``q_values``), the fraction grid."""
    b = option_b or OPTION_B
    c = [1.0, option_c["beta_cpu"], option_c["beta_gpu"], option_c["backlog_s"]] if option_c else [0.0] * 4
    head = [cluster.launch_s, 1.0, 0.0, 0.0, 0.0, b["beta_cpu"], b["beta_gpu"], b["backlog_s"], queue_slack, *c]
    return np.concatenate([np.asarray(head, dtype=np.float64), [float(hidden)], forward_params(weights, hidden), grid])


def forward_params(weights: np.ndarray, hidden: int) -> np.ndarray:
    """The packed MLP (``n_weights``) followed by its W1 and W2 transposed: what ``q_values``
    reads at its ``off``."""
    w = np.asarray(weights, dtype=np.float64)
    w1t = w[:hidden * N_FEAT].reshape(hidden, N_FEAT).T.ravel()
    at = hidden * N_FEAT + hidden
    w2t = w[at:at + hidden * hidden].reshape(hidden, hidden).T.ravel()
    return np.concatenate([w, w1t, w2t])


class DQNLate(LateList):
    """Per-candidate Q-network (module docstring); weights in ``model_dir/model.json`` (``hidden``,
    ``weights``), or given as ``model``."""

    name = "dqn_late"
    role = "learned"
    trained_by = "train_late"
    pick_kernel: ClassVar[object] = _dqn_late

    def __init__(self, model_dir: str = "models/dqn_late", fraction_step: float = 0.05,
                 model: dict[str, Any] | None = None) -> None:
        super().__init__(fraction_step=fraction_step)
        self.model_dir = Path(model_dir)
        self._model = model

    def prepare(self, tasks, cluster, X) -> None:
        if self._model is None:
            path = self.model_dir / MODEL_FILE
            if not path.is_file():
                raise HybridschedError(f"{self.name} policy: no trained model at {path}; "
                                       f"`dvc repro train_late` trains it")
            self._model = json.loads(path.read_text())
        hidden = int(self._model["hidden"])
        w = np.asarray(self._model["weights"], dtype=np.float64)
        if w.size != n_weights(hidden):
            raise HybridschedError(f"{self.name} model: {n_weights(hidden)} weights expected for hidden={hidden}, "
                                   f"got {w.size}")
        self.n_gpus = cluster.n_gpus
        who = f"{self.name} model"
        self._params = head_params(cluster, hidden, w, self.grid, option_of(self._model, "option_b", who),
                                   option_of(self._model, "option_c", who), slack_of(self._model, who))
        self.reserved_order = reserved_of(self._model, who)
        self._pdata = pdata_of(tasks, cluster, X)


class PGLate(DQNLate):
    """``dqn_late``'s per-candidate network and kernel (greedy: the candidate of largest score),
    trained by policy gradient (:mod:`hybridsched.kinds.machine.late_pg_train`)."""

    name = "pg_late"

    def __init__(self, model_dir: str = "models/pg_late", fraction_step: float = 0.05,
                 model: dict[str, Any] | None = None) -> None:
        super().__init__(model_dir=model_dir, fraction_step=fraction_step, model=model)
