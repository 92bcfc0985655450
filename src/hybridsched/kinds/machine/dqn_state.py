"""The DQN's state and action spaces, its compiled forward pass and its simulator kernel
(numpy + numba, no torch).

Everything the simulator kernel needs travels in ``params``, a :class:`KernelParams`: a flat
float64 header (sizes, scales, epsilon) with the action table, the network as separate float64
arrays (``rl.qnet.Net``: each matrix transposed, so the forward pass's inner loops run over
independent outputs and vectorise, with every sum in the reference order), and scratch arrays
for the state, hidden layers, Q-values and non-zero indices (no allocation per decision).  The
same kernel serves training, online learning (the compiled learner of ``rl/qnet_train.py``
updates the ``Net`` arrays in place) and inference: ``dqn_decide``, the kernel of
``policies/dqn.py``; the forward pass itself is the shared ``rl/qnet.py``.

State of the decision for task ``i`` at time ``t`` (``n_state = 6 + n_devices + 2 * n_actions``):

* task: standardised logs of size, memory, nominal CPU time ``C`` and nominal GPU time ``G``
  (shift/scale fitted on the training workload), compute intensity, memory-feasible max fraction;
* load: ``log1p(backlog_d / time_scale)`` per device, ``backlog_d = est_free[d] - t``;
* per action ``(gpu, f)``: ``log1p(finish / time_scale)`` with ``finish`` the nominal time from
  now until both parts would end given the believed backlogs, and ``log1p(energy / energy_scale)``
  with ``energy`` the nominal busy energy of that placement.

``time_scale`` and ``energy_scale`` are the training workload's mean nominal time and busy
energy of each task's fastest placement on an idle cluster (see ``StateSpec.fit``); the
reward uses the same two scales.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numba import njit

from collections import namedtuple

from hybridsched.rl.qnet import Net, dueling_q_net, net_from_weights, transposed_size

from hybridsched.devices import Cluster
from hybridsched.kinds.machine.engine import CPU_S, GPU_S, INTENSITY, MAX_F, MEMORY, SIZE

# Header slots of ``params``.
EPSILON, RECORD, N_STATE, HIDDEN, N_ACT, LAUNCH, TIME_SCALE, ENERGY_SCALE, CPU_W, GPU_W = range(10)
SHIFT = 10  # 4 slots: log size, log memory, log C, log G
SCALE = 14  # 4 slots
HEADER = 18
N_TASK_FEATURES = 6

DEFAULT_FRACTIONS = (0.25, 0.5, 0.75, 1.0)

# Columns of the kernel's ``pdata``: per task a pre-drawn uniform and random action (for
# epsilon), and, when recording, the decision: action, time, order, clamped fraction and
# state.  Row ``n`` (one past the last task) holds the decision counter in column 0, and
# column ORDER of row k the task decided k-th.
U, RAND_A, ACTION, TIME, SEQ, ORDER, FRAC, FEAT = range(8)


@dataclass(frozen=True)
class StateSpec:
    """Sizes and normalising constants of the state, and the discrete action table."""

    n_gpus: int
    fractions: tuple[float, ...]
    time_scale: float
    energy_scale: float
    shift: tuple[float, float, float, float]
    scale: tuple[float, float, float, float]
    launch_s: float
    cpu_busy_w: float
    gpu_busy_w: float

    @classmethod
    def fit(cls, X: np.ndarray, cluster: Cluster, fractions: tuple[float, ...] = DEFAULT_FRACTIONS) -> StateSpec:
        """Constants from a training task matrix (``sim.engine.task_matrix``)."""
        logs = np.log(np.column_stack([X[:, SIZE], X[:, MEMORY], X[:, CPU_S], X[:, GPU_S]]))
        fast_s, fast_j = _fastest_placement(X, cluster, fractions)
        return cls(
            n_gpus=cluster.n_gpus,
            fractions=tuple(float(f) for f in fractions),
            time_scale=float(fast_s.mean()),
            energy_scale=float(fast_j.mean()),
            shift=tuple(float(v) for v in logs.mean(axis=0)),
            scale=tuple(float(v) for v in np.maximum(logs.std(axis=0), 1e-6)),
            launch_s=cluster.launch_s,
            cpu_busy_w=cluster.cpu_busy_w,
            gpu_busy_w=cluster.gpu_busy_w,
        )

    @classmethod
    def from_dict(cls, d: dict) -> StateSpec:
        return cls(**{**d, "fractions": tuple(d["fractions"]), "shift": tuple(d["shift"]), "scale": tuple(d["scale"])})

    def to_dict(self) -> dict:
        return asdict(self)

    def for_cluster(self, cluster: Cluster) -> StateSpec:
        """Same normalisation, the current cluster's launch overhead and power draw."""
        return StateSpec(self.n_gpus, self.fractions, self.time_scale, self.energy_scale, self.shift, self.scale,
                         cluster.launch_s, cluster.cpu_busy_w, cluster.gpu_busy_w)

    @property
    def n_actions(self) -> int:
        return 1 + self.n_gpus * len(self.fractions)

    @property
    def n_state(self) -> int:
        return N_TASK_FEATURES + (self.n_gpus + 1) + 2 * self.n_actions

    def action_table(self) -> tuple[np.ndarray, np.ndarray]:
        """(gpu, fraction) per action: action 0 is CPU only, then each GPU at each fraction."""
        gpu = np.zeros(self.n_actions, dtype=np.int64)
        frac = np.zeros(self.n_actions)
        k = 1
        for g in range(self.n_gpus):
            for f in self.fractions:
                gpu[k], frac[k] = g, f
                k += 1
        return gpu, frac

    def header(self, hidden: int, epsilon: float = 0.0, record: bool = False) -> np.ndarray:
        """The ``params`` prefix: header slots, then the action table (gpu, then fraction)."""
        h = np.zeros(HEADER)
        h[EPSILON], h[RECORD] = epsilon, float(record)
        h[N_STATE], h[HIDDEN], h[N_ACT] = self.n_state, hidden, self.n_actions
        h[LAUNCH], h[TIME_SCALE], h[ENERGY_SCALE] = self.launch_s, self.time_scale, self.energy_scale
        h[CPU_W], h[GPU_W] = self.cpu_busy_w, self.gpu_busy_w
        h[SHIFT:SHIFT + 4] = self.shift
        h[SCALE:SCALE + 4] = self.scale
        gpu, frac = self.action_table()
        return np.concatenate([h, gpu.astype(np.float64), frac])

    def pack(self, weights: list[np.ndarray] | Net, hidden: int, epsilon: float = 0.0,
             record: bool = False) -> KernelParams:
        """The kernel's ``params``: header + action table, the network (``QNetwork.state_dict()``
        order, or a ``Net`` that is used as is, so an online learner's in-place updates show)
        and fresh scratch arrays."""
        net = weights if isinstance(weights, Net) else None
        if net is None:
            size = sum(np.asarray(w).size for w in weights)
            if size != transposed_size(self.n_state, hidden, self.n_actions):
                raise ValueError(f"weights of {size} values do not fit a network of {self.n_state} inputs, "
                                 f"{hidden} hidden units and {self.n_actions} actions")
            net = net_from_weights(weights)
        S, A = self.n_state, self.n_actions
        return KernelParams(self.header(hidden, epsilon, record), net, np.zeros(S), np.zeros(hidden),
                            np.zeros(hidden), np.zeros(A), np.zeros(max(S, hidden), dtype=np.int64))


KernelParams = namedtuple("KernelParams", "hdr net s h1 h2 q nz")
KernelParams.__doc__ = """What ``dqn_decide`` reads: ``hdr`` (header slots + action table, float64),
``net`` (an ``rl.qnet.Net``) and the scratch arrays ``s`` (state), ``h1``, ``h2`` (hidden layers),
``q`` (Q-values), ``nz`` (int64 indices of non-zero inputs, len >= max(n_state, hidden))."""


def _fastest_placement(X: np.ndarray, cluster: Cluster, fractions: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Nominal time and busy energy of each task's fastest action on an idle cluster."""
    C, G, m = X[:, CPU_S], X[:, GPU_S], X[:, MAX_F]
    best_s, best_j = C.copy(), C * cluster.cpu_busy_w
    for f in fractions:
        f = np.minimum(f, m)
        cpu = np.where(f < 1, (1 - f) * C, 0.0)
        gpu = np.where(f > 0, cluster.launch_s + f * G, 0.0)
        s, j = np.maximum(cpu, gpu), cpu * cluster.cpu_busy_w + gpu * cluster.gpu_busy_w
        better = s < best_s
        best_s, best_j = np.where(better, s, best_s), np.where(better, j, best_j)
    return best_s, best_j


@njit(cache=True)
def features_into(out, i, t, est, X, params):
    """Write the state of the decision for task ``i`` at time ``t`` into ``out``; ``params`` is the
    flat header (``StateSpec.header``, ``KernelParams.hdr``)."""
    A = int(params[N_ACT])
    n_dev = est.shape[0]
    C, G, mf = X[i, CPU_S], X[i, GPU_S], X[i, MAX_F]
    out[0] = (np.log(X[i, SIZE]) - params[SHIFT]) / params[SCALE]
    out[1] = X[i, INTENSITY]
    out[2] = (np.log(X[i, MEMORY]) - params[SHIFT + 1]) / params[SCALE + 1]
    out[3] = (np.log(C) - params[SHIFT + 2]) / params[SCALE + 2]
    out[4] = (np.log(G) - params[SHIFT + 3]) / params[SCALE + 3]
    out[5] = mf
    ts, es, launch = params[TIME_SCALE], params[ENERGY_SCALE], params[LAUNCH]
    for d in range(n_dev):
        out[N_TASK_FEATURES + d] = np.log1p(max(est[d] - t, 0.0) / ts)
    k = N_TASK_FEATURES + n_dev
    cpu_back = max(est[0] - t, 0.0)
    # actions are GPU-major with the same fractions for every GPU, and a placement's energy does
    # not depend on which GPU: from the second GPU on, its energy feature is a copy (same bits,
    # one log1p fewer per action)
    n_f = (A - 1) // (n_dev - 1) if n_dev > 1 else A
    for a in range(A):
        g = int(params[HEADER + a])
        f = min(params[HEADER + A + a], mf)
        fin = 0.0
        e = 0.0
        if f < 1.0:
            fin = cpu_back + (1.0 - f) * C
            e += (1.0 - f) * C * params[CPU_W]
        if f > 0.0:
            fin = max(fin, max(est[g + 1] - t, 0.0) + launch + f * G)
            e += (launch + f * G) * params[GPU_W]
        out[k + a] = np.log1p(fin / ts)
        if a > n_f and params[HEADER + A + a] == params[HEADER + A + a - n_f]:
            out[k + A + a] = out[k + A + a - n_f]
        else:
            out[k + A + a] = np.log1p(e / es)


# Calls across files are not disk-cached: numba's cache of a function is invalidated only
# by edits to its own file, so a cached kernel would keep a stale copy of rl/qnet.py.
@njit
def q_values_into(q, s, params):
    """Dueling forward pass of ``params.net`` (the shared ``rl.qnet``), written into ``q``."""
    dueling_q_net(q, s, params.net, params.h1, params.h2, params.nz)


@njit
def q_values_batch(S, params):
    """Q-values of each row of the state matrix ``S`` (for tests and diagnostics)."""
    out = np.empty((S.shape[0], params.q.shape[0]))
    for r in range(S.shape[0]):
        q_values_into(out[r], S[r], params)
    return out


@njit
def dqn_decide(i, t, est, true_free, X, pdata, params):
    """Engine kernel: epsilon-greedy on the Q-network in ``params`` (a ``KernelParams``); records
    the decision if asked."""
    hdr, s, q = params.hdr, params.s, params.q  # preallocated: no allocation per decision
    S = s.shape[0]
    A = q.shape[0]
    features_into(s, i, t, est, X, hdr)
    if pdata[i, U] < hdr[EPSILON]:
        a = int(pdata[i, RAND_A])
    else:
        dueling_q_net(q, s, params.net, params.h1, params.h2, params.nz)
        a = int(np.argmax(q))
    g = int(hdr[HEADER + a])
    f = hdr[HEADER + A + a]
    if hdr[RECORD] > 0.0:
        n = pdata.shape[0] - 1
        k = int(pdata[n, 0])
        pdata[n, 0] = k + 1
        pdata[i, ACTION] = a
        pdata[i, TIME] = t
        pdata[i, SEQ] = k
        pdata[k, ORDER] = i
        pdata[i, FRAC] = min(max(f, 0.0), X[i, MAX_F])  # as the engine clamps it
        for c in range(S):
            pdata[i, FEAT + c] = s[c]
    return g, f
