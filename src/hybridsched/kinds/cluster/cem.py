"""``cem`` on the node cluster: a per-candidate linear scorer over the feasible nodes plus a
learned queue order, both around EFT so that all-zero weights *are* ``eft``.

Node choice.  For task ``i`` and each feasible node ``c`` the score is

    rel_c + sum_j w_j * f_j(c)        (lowest wins; ties: best fit, as eft)

where ``rel_c = est_i / speed(c) / min_c' est_i / speed(c')`` is the predicted run time on the
node's GPU model relative to the fastest feasible one (1 for a CPU-only task) - every
feasible node starts the task now, so this is also its relative predicted finish - and the
features ``f_j`` (:data:`NODE_FEATURES`) are:

* ``slow_long``: ``(rel_c - 1) * log(est_i / est_ref)``: the slowdown, weighted up for
  tasks predicted long (``est_ref`` = the median training estimate);
* ``gpu_left``: GPUs' worth of free capacity the node keeps after placement, over 8;
* ``cpu_left``: the node's free CPU share after placement;
* ``frag``: FGD's increase of the expected GPU fragmentation for the training split's task
  mix (``fragmentation.py``), in GPUs per pod;
* ``rank``: the speed rank of the node's GPU model in this cluster (0 fastest, 1 slowest);
* ``idle``: 1 if the node holds nothing now (the task would open a fresh node);
* ``cpu_on_gpu``: 1 for a CPU-only task on a node with GPUs.

Queue order.  Waiting tasks are tried in increasing

    log(est_i) + q_gpu * log(1 + GPUs_i) + q_cpu * cores_i / 32 + q_aging * arrival_i / 3600 s

(the engine's static ``queue_key``).  A term ``-q_aging * waited_i(t) / 3600`` for the time
waited so far would give the same order at every instant, because ``waited_i(t) = t -
arrival_i`` and ``t`` is common to all waiting tasks; so the static key *is* a learned
trade-off between shortest-predicted-first and FIFO (aging).  All-zero weights: the
shortest class-mean first order of ``eft``.

``est_i`` is eft's class-mean estimate (``EarliestFinishTime``, fitted on the training split).
The scoring is one compiled function (:func:`_choose_scored`) that both the compiled engine
and the Python loop call, so the two agree by construction.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from numba import njit

from hybridsched.errors import HybridschedError
from hybridsched.kinds.cluster.fragmentation import _fgd_from_stats, _node_stats, gpu_task_mix
from hybridsched.kinds.cluster.kernels import ALL, Kernel, _left_after
from hybridsched.kinds.cluster.policies import EarliestFinishTime, keeps
from hybridsched.kinds.cluster.trace import MILLI, PodTable

NODE_FEATURES = ("slow_long", "gpu_left", "cpu_left", "frag", "rank", "idle", "cpu_on_gpu")
QUEUE_FEATURES = ("gpu", "cpu", "aging")
FEATURES = NODE_FEATURES + QUEUE_FEATURES  # the parameter vector's layout
_NF = len(NODE_FEATURES)
_FRAG = NODE_FEATURES.index("frag")
AGING_S = 3600.0        # the aging weight is per hour waited
CPU_SCALE = 32_000.0    # milli-CPU: the cpu queue weight is per 32 cores
GPU_SCALE = 8_000.0     # milli-GPU: the gpu_left feature is per 8 GPUs (the largest node)
MODEL_FILE = "theta.json"


class ScoredEFT(EarliestFinishTime):
    """EFT with the linear node score and queue key above.  ``node`` and ``queue`` map feature
    names to weights (missing: 0); with no weights this is ``eft`` exactly (tested)."""

    name = "scored_eft"

    def __init__(self, node: dict[str, float] | None = None, queue: dict[str, float] | None = None) -> None:
        self.set_weights(weights_vector(node or {}, queue or {}, "policy weights"))

    def set_weights(self, theta: np.ndarray) -> None:
        """The full parameter vector (layout :data:`FEATURES`)."""
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (len(FEATURES),) or not np.all(np.isfinite(theta)):
            raise HybridschedError(f"{self.name}: weights must be {len(FEATURES)} finite numbers ({', '.join(FEATURES)})")
        self.theta = theta.copy()

    def fit(self, train: PodTable) -> None:
        super().fit(train)
        self._mix_pods = train  # FGD's task mix for the frag feature (built per cluster in prepare)
        est = self._estimates(train)
        self._est_ref = float(np.median(est[train.num_gpu > 0])) if (train.num_gpu > 0).any() else 1.0

    def _estimates(self, pods: PodTable) -> np.ndarray:
        return np.array([self._by_class.get((q, k), self._by_qos.get(q, self._overall))
                         for q, k in zip(pods.qos, pods.num_gpu, strict=True)], dtype=np.float64)

    def prepare(self, inp, cluster) -> None:
        super().prepare(inp, cluster)
        speed = cluster.model_speed()
        gpu_task = inp.k > 0
        # column m < M: eft's own table (estimate / mean speed of model m; 0 for CPU-only tasks),
        # column M: log(est / est_ref), the slow_long feature's weight for this task
        self.table = np.column_stack([np.where(gpu_task[:, None], self.estimate[:, None] / speed[None, :], 0.0),
                                      np.log(np.maximum(self.estimate, 1e-9) / self._est_ref)])
        distinct = np.unique(speed[:-1]) if len(speed) > 1 else np.ones(1)  # GPU models (CPU_MODEL last)
        rank = np.array([np.sum(distinct > s) for s in speed], dtype=np.float64) / max(len(distinct) - 1, 1)
        rank[-1] = 0.0  # CPU-only nodes: CPU-only tasks run alike everywhere
        self.params = np.concatenate([self.theta[:_NF], rank])
        mix = gpu_task_mix(self._mix_pods.num_gpu, self._mix_pods.gpu_milli, len(cluster.models))
        self.mix = (mix.k.astype(np.int64), mix.p.astype(np.float64), mix.count / max(mix.total, 1.0))

    def queue_key(self) -> np.ndarray:
        q = self.theta[_NF:]
        inp = self.inp
        return (np.log(np.maximum(self.estimate, 1e-9)) + q[0] * np.log1p(inp.k * inp.p / MILLI)
                + q[1] * inp.cpu / CPU_SCALE + q[2] * inp.arrival / AGING_S)

    def choose(self, i, nodes, state) -> int:
        pos, _ = _choose_scored(i, np.asarray(nodes, dtype=np.int64), len(nodes), self._state_arrays(state),
                                self._kernel_data())
        return int(pos)

    def _state_arrays(self, state) -> tuple:
        """The compiled loop's ``st`` tuple (kernels.py) for the Python loop's state."""
        inp, cl = self.inp, self.cluster
        return (inp.k, inp.p, inp.cpu, state.gpu_free, state.cpu_free, self.has_gpu, cl.gpu_cap.astype(np.float64),
                cl.nodes.cpu_milli.astype(np.float64), cl.node_model, state.version)

    def _kernel_data(self) -> tuple:
        tk, tp, tw = self.mix
        return (np.ascontiguousarray(self.table), tk, tp, tw, self.params)

    def kernel(self) -> Kernel | None:
        """The compiled choice (``policies.NodePolicy.kernel``); None if a subclass overrides ``choose``."""
        if not keeps(self, ScoredEFT, ("choose", "gpus")):
            return None
        return Kernel(_choose_scored, ALL, self._kernel_data(), np.zeros(1, dtype=np.int64))


class CEMPolicy(ScoredEFT):
    """The train_cem stage's weights (``<model_dir>/theta.json``) in :class:`ScoredEFT`."""

    name = "cem"
    role, trained_by = "learned", "train_cem"  # kinds.base.declaration

    def __init__(self, model_dir: str = "models/cem") -> None:
        super().__init__()
        self.model_dir = model_dir

    def fit(self, train: PodTable) -> None:
        """Load the weights (the model is read here, not at construction, so that the config
        check can build the policy before train_cem has run)."""
        path = Path(self.model_dir) / MODEL_FILE
        if not path.is_file():
            raise HybridschedError(f"cem: {path} not found (run the train_cem stage on this workload)")
        try:
            doc = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:  # a truncated or overwritten file
            raise HybridschedError(f"{path}: not a valid model file ({type(e).__name__} at char "
                                   f"{getattr(e, 'pos', getattr(e, 'start', '?'))}); rerun the train_cem stage") from None
        if not isinstance(doc, dict):
            raise HybridschedError(f"{path}: not a model (a JSON object with kind, node, queue); rerun the train_cem stage")
        if doc.get("kind") != "cluster":
            raise HybridschedError(f"cem: {path} holds weights for kind {doc.get('kind')!r}, not 'cluster' "
                                   f"(run train_cem on this workload)")
        self.set_weights(weights_vector(doc.get("node", {}), doc.get("queue", {}), str(path)))
        super().fit(train)


class EFTQueue(ScoredEFT):
    """eft's node choice with a learned queue key: the three queue weights of the train_late
    stage (``<model_dir>/model.json``, kinds/cluster/late_train.py), node weights 0."""

    name = "eft_queue"
    role, trained_by = "learned", "train_late"  # kinds.base.declaration

    def __init__(self, model_dir: str = "models/late/eft_queue") -> None:
        super().__init__()
        self.model_dir = model_dir

    def fit(self, train: PodTable) -> None:
        """Load the weights (read here, not at construction, so the config check needs no model)."""
        from hybridsched.kinds.cluster.late_model import read_model

        doc, path = read_model(self.model_dir, "eft_queue", "queue")
        self.set_weights(weights_vector({}, doc["queue"], str(path)))
        super().fit(train)


def weights_vector(node: dict[str, float], queue: dict[str, float], where: str) -> np.ndarray:
    """The parameter vector from name -> weight maps; an unknown name is an error naming ``where``."""
    for names, given, what in ((NODE_FEATURES, node, "node"), (QUEUE_FEATURES, queue, "queue")):
        bad = sorted(set(given) - set(names))
        if bad:
            raise HybridschedError(f"{where}: unknown {what} feature(s) {bad} (known: {', '.join(names)})")
    return np.array([float(node.get(n, 0.0)) for n in NODE_FEATURES] + [float(queue.get(n, 0.0)) for n in QUEUE_FEATURES])


def weights_dict(theta: np.ndarray) -> dict[str, dict[str, float]]:
    """``{"node": {...}, "queue": {...}}`` of a parameter vector (rounded for a stable file)."""
    theta = [round(float(v), 6) for v in theta]
    return {"node": dict(zip(NODE_FEATURES, theta[:_NF], strict=True)),
            "queue": dict(zip(QUEUE_FEATURES, theta[_NF:], strict=True))}


@njit(cache=True)
def _choose_scored(i, cand, nc, st, pd):  # pragma: no cover - compiled
    """The lowest ``rel + w . features`` (module docstring), ties best fit; best-fit GPUs.
    ``st``: the loop's state arrays (kernels.py); ``pd`` = (table, FGD's task mix k, p and
    weights, params): ``params[:7]`` are the node weights, ``params[7 + m]`` the speed rank of
    model ``m``."""
    k, p, cpu, gpu_free, cpu_free, has_gpu, gpu_cap, cpu_milli, node_model = (st[0], st[1], st[2], st[3], st[4],
                                                                               st[5], st[6], st[7], st[8])
    table, types_k, types_p, weights, params = pd[0], pd[1], pd[2], pd[3], pd[4]
    M = table.shape[1] - 1
    tmin = np.inf
    for c in range(nc):
        v = table[i, node_model[cand[c]]]
        if v < tmin:
            tmin = v
    lest = table[i, M]
    frag = np.zeros(nc)
    if params[3] != 0.0 and k[i] > 0:  # the fragmentation feature, only when it is weighted
        N = gpu_free.shape[0]
        T = types_k.shape[0]
        cnt = np.zeros((N, T), dtype=np.int64)
        lt = np.zeros((N, T))
        fr = np.zeros(N)
        rows = cand[:nc].copy()
        tcpu = np.zeros(T)
        tallow = np.ones((T, M), dtype=np.bool_)
        _node_stats(rows, gpu_free, cpu_free, node_model, types_k, types_p, tcpu, tallow, weights, cnt, lt, fr)
        d, _ = _fgd_from_stats(rows, gpu_free, cpu_free, node_model, cnt, lt, fr, cpu[i], k[i], p[i],
                               types_k, types_p, tcpu, tallow, weights)
        for c in range(nc):
            frag[c] = d[c] / 1000.0
    best, b1, b2 = 0, np.inf, np.inf
    for c in range(nc):
        nd = cand[c]
        m = node_model[nd]
        rel = table[i, m] / tmin if tmin > 0 else 1.0
        free = 0.0
        cap = 0.0
        for g in range(gpu_free.shape[1]):
            f = gpu_free[nd, g]
            free += f if f > 0 else 0.0
            cap += gpu_cap[nd, g]
        gpu_left = (free - k[i] * p[i]) / GPU_SCALE
        cpu_left = (cpu_free[nd] - cpu[i]) / cpu_milli[nd]
        idle = 1.0 if (free == cap and cpu_free[nd] == cpu_milli[nd]) else 0.0
        cpu_on_gpu = 1.0 if (k[i] == 0 and has_gpu[nd]) else 0.0
        v1 = (rel + params[0] * (rel - 1.0) * lest + params[1] * gpu_left + params[2] * cpu_left
              + params[3] * frag[c] + params[4] * params[7 + m] + params[5] * idle + params[6] * cpu_on_gpu)
        v2 = _left_after(i, nd, st)
        if v1 < b1 or (v1 == b1 and v2 < b2):
            best, b1, b2 = c, v1, v2
    return best, -1
