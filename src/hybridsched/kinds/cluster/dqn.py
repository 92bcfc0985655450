"""``dqn`` on the node cluster: a dueling DQN that picks, per task, which node-scoring rule places it.

Action space (node scoring): each action is one rule that ranks the feasible nodes,

0. ``fastest_model``  - the GPU model with the highest mean speed (EFT's rule), ties best fit;
1. ``slowest_model``  - the slowest model that fits (keeps fast GPUs free for later tasks);
2. ``best_fit``       - least free capacity left (packing);
3. ``least_loaded``   - most free capacity (spreading);
4. ``min_fragmentation`` - FGD's least increase of expected GPU fragmentation.

So every action is always feasible (no masking) and the network stays small.  The queue order
is EFT's (class-mean estimate), so ``dqn`` and ``eft`` differ only in where tasks go.

State (all scaled to about [0, 1]): the pod's features (``runtime_model.pod_features``) and
log class-mean duration; cluster-wide free GPU and CPU share, log queue length and running
count, feasible-node share and the fastest / slowest mean speed among feasible nodes; the free
GPU share of each GPU model.

Reward (JCT split by decision, in the spirit of Decima, Mao et al. SIGCOMM 2019): decision
``k`` places task ``i`` and costs its own run time on the chosen node plus the waiting time
that the queue accrues until decision ``k + 1``:
``r_k = -(run_i + (t_{k+1} - t_k) * queued_k) / time_scale``, clipped to [-10, 0].  Summed over
a run this is minus the total JCT (run + wait), so the agent minimises mean JCT; charging
each run time once, at its own decision, keeps the variance far lower than charging every
running task for every interval.  (The run time is the outcome of the decision, used only as
its reward, never as state.)  ``time_scale`` is the median cost per decision of a calibration
run that always takes action 0.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hybridsched.errors import ModelFileError
from hybridsched.io import atomic_dir, json_text, read_model_meta
from hybridsched.kinds.cluster.trace import PodTable
from hybridsched.rl.qnet import pack_weights, q_values
from hybridsched.kinds.cluster.nodes import CPU_MODEL
from hybridsched.kinds.cluster.state import ClusterState
from hybridsched.kinds.cluster.policies import (
    BestFit,
    EarliestFinishTime,
    FragmentationGradientDescent,
    Greedy,
    NodePolicy,
    _first_min,
)

ACTIONS = ("fastest_model", "slowest_model", "best_fit", "least_loaded", "min_fragmentation")
REWARD_CLIP = 10.0
FORMAT = "hybridsched-node-dqn/1"
MODEL_FILE = "model.pt"
META_FILE = "meta.json"


class _Fastest(NodePolicy):
    def choose(self, i, nodes, state) -> int:
        return _first_min(-self.speed[nodes] if self.inp.k[i] > 0 else np.zeros(len(nodes)),
                          self.left_after(i, nodes, state))


class _Slowest(NodePolicy):
    def choose(self, i, nodes, state) -> int:
        return _first_min(self.speed[nodes] if self.inp.k[i] > 0 else np.zeros(len(nodes)),
                          self.left_after(i, nodes, state))


def action_rules() -> list[NodePolicy]:
    """One policy object per action, in ``ACTIONS`` order."""
    return [_Fastest(), _Slowest(), BestFit(), Greedy(), FragmentationGradientDescent()]


def n_state(n_gpu_models: int) -> int:
    return 10 + 7 + n_gpu_models


class NodeDQN(NodePolicy):
    """Greedy (or epsilon-greedy) in the Q-network's actions; learns when given a learner."""

    name = "dqn"
    role, trained_by = "learned", "train_dqn"  # kinds.base.declaration
    # set by dqn_train while training
    forced_action: int | None = None  # calibration run: always this action
    epsilon_fn: Callable[[int], float] = staticmethod(lambda step: 0.0)
    time_scale: float = 1.0

    def __init__(self, model_dir: str | None = "models/dqn", epsilon: float = 0.0, seed: int = 0) -> None:
        self.model_dir = model_dir
        self.epsilon = float(epsilon)
        self.seed = seed
        self.rules = action_rules()
        self.eft = EarliestFinishTime()
        self.weights: list[np.ndarray] | None = None
        self.gpu_models: tuple[str, ...] | None = None
        self.learner = None  # set by dqn_train.train_node_dqn

    def fit(self, train: PodTable) -> None:
        self.eft.fit(train)
        for r in self.rules:
            r.fit(train)
        if self.model_dir is not None and self.learner is None:
            saved = load_node_dqn(self.model_dir)
            self.weights, self.gpu_models = saved["weights"], tuple(saved["gpu_models"])

    def prepare(self, inp, cluster) -> None:
        from hybridsched.kinds.cluster.runtime_model import pod_features

        super().prepare(inp, cluster)
        self._packed = None  # weights are fixed from here on: packed on first use
        self.eft.prepare(inp, cluster)
        for r in self.rules:
            r.prepare(inp, cluster)
        models = tuple(m for m in cluster.models if m != CPU_MODEL)
        if self.gpu_models is not None and self.gpu_models != models:
            raise RuntimeError(f"dqn model was trained on GPU models {list(self.gpu_models)}, "
                               f"the cluster has {list(models)} (retrain with the train_dqn stage)")
        self.gpu_models = models
        f = pod_features(inp.tasks)
        scale = np.array([12.0, 14.0, 8.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
        self._task_x = np.column_stack([f / scale, np.log1p(self.eft.estimate) / 15.0]).astype(np.float32)
        self._model_of = cluster.node_model
        self._gpu_cap = cluster.gpu_cap.sum(axis=1)
        self._cap_by_model = np.array([self._gpu_cap[cluster.node_model == j].sum()
                                       for j in range(len(models))], dtype=np.float64)
        self._rng = np.random.default_rng(self.seed)
        self._gpu_choice = None
        self._last: tuple[np.ndarray, int, float, float, int] | None = None
        self.n_decisions = 0
        self.costs: list[float] = []
        self.rewards: list[float] = []
        self.action_counts = np.zeros(len(ACTIONS), dtype=np.int64)

    def queue_key(self) -> np.ndarray:
        return self.eft.estimate

    def state_vector(self, i: int, nodes: np.ndarray, state: ClusterState) -> np.ndarray:
        free = np.clip(state.gpu_free, 0, None).sum(axis=1)
        by_model = np.bincount(self._model_of, weights=free, minlength=len(self.gpu_models) + 1)[: len(self.gpu_models)]
        cap = max(self._gpu_cap.sum(), 1.0)
        sp = self.speed[nodes]
        g = np.array([free.sum() / cap, state.cpu_free.sum() / self.cluster.nodes.cpu_milli.sum(),
                      np.log1p(state.n_waiting) / 8.0, np.log1p(state.n_running) / 8.0,
                      len(nodes) / self.cluster.n_nodes, sp.max(), sp.min()])
        return np.concatenate([self._task_x[i], g, by_model / np.maximum(self._cap_by_model, 1.0)]).astype(np.float32)

    def q_values(self, s: np.ndarray) -> np.ndarray:
        if self.learner is not None:
            import torch

            with torch.no_grad():
                return self.learner.q(torch.from_numpy(s[None]))[0].numpy()
        if self._packed is None:  # the shared compiled forward pass (rl/qnet.py)
            self._packed = pack_weights(self.weights)
        return q_values(s, self._packed, self.weights[0].shape[0], len(ACTIONS))

    def choose(self, i, nodes, state) -> int:
        s = self.state_vector(i, nodes, state)
        eps = self.epsilon_fn(self.learner.global_step) if self.learner is not None else self.epsilon
        if self.forced_action is not None:
            a = self.forced_action
        elif eps > 0 and self._rng.random() < eps:
            a = int(self._rng.integers(len(ACTIONS)))
        else:
            a = int(np.argmax(self.q_values(s)))
        self.n_decisions += 1
        self.action_counts[a] += 1
        rule = self.rules[a]
        pos = rule.choose(i, nodes, state)
        self._gpu_choice = rule.gpus(i, int(nodes[pos]), state)
        if self.learner is not None or self.forced_action is not None:
            run = float(self.inp.run_time[i, self.cluster.node_model[nodes[pos]]])
            self._record(s, a, run, state)
        return pos

    def gpus(self, i, node, state):
        return self._gpu_choice

    # --- learning ---------------------------------------------------------------------------
    def _record(self, s: np.ndarray, a: int, run: float, state: ClusterState) -> None:
        """Close the previous decision's transition with the waiting accrued since it."""
        if self._last is not None:
            self._close(s, done=0.0, t=state.t)
        self._last = (s, a, state.t, run, state.n_waiting)

    def _close(self, s_next: np.ndarray, done: float, t: float) -> None:
        s, a, t0, run, queued = self._last
        cost = run + (t - t0) * queued
        self.costs.append(cost)
        if self.learner is not None:
            r = max(-cost / self.time_scale, -REWARD_CLIP)
            self.rewards.append(r)
            self.learner.add(s[None], np.array([a]), np.array([r], dtype=np.float32), s_next[None],
                             np.array([done], dtype=np.float32))

    def finish(self, state: ClusterState) -> None:
        if self._last is not None and (self.learner is not None or self.forced_action is not None):
            self._close(self._last[0], done=1.0, t=state.t)
        self._last = None


def save_node_dqn(model_dir: str | Path, policy: NodeDQN, settings: dict, extra_meta: dict | None = None) -> Path:
    """``model.pt`` (the Q-network's tensors) and ``meta.json``, atomically."""
    import torch

    meta = {"format": FORMAT, "actions": list(ACTIONS), "gpu_models": list(policy.gpu_models),
            "n_state": n_state(len(policy.gpu_models)), "settings": settings, **(extra_meta or {})}
    with atomic_dir(model_dir) as tmp:
        torch.save([torch.from_numpy(np.ascontiguousarray(w)) for w in policy.weights], tmp / MODEL_FILE)
        (tmp / META_FILE).write_text(json_text(meta, str))
    return Path(model_dir)


def load_node_dqn(model_dir: str | Path) -> dict[str, Any]:
    """``{"weights": [numpy arrays], "gpu_models": [...], "meta": {...}}``; ModelFileError if
    missing, corrupt or not a node DQN."""
    import torch

    d = Path(model_dir)
    meta = read_model_meta(d / META_FILE, "the train_dqn stage on a cluster workload")
    if meta.get("format") != FORMAT or meta.get("actions") != list(ACTIONS):
        raise ModelFileError(f"{d / META_FILE}: not a node DQN of actions {list(ACTIONS)} (format "
                             f"{meta.get('format')!r}; retrain with the train_dqn stage)")
    try:
        weights = [w.numpy() for w in torch.load(d / MODEL_FILE, map_location="cpu", weights_only=True)]
    except Exception as e:  # torch raises many types for a damaged file
        raise ModelFileError(f"{d / MODEL_FILE}: unreadable ({type(e).__name__}: {e})") from None
    if len(weights) != 8 or weights[0].shape[1] != meta.get("n_state"):
        raise ModelFileError(f"{d / MODEL_FILE}: tensors do not match n_state {meta.get('n_state')} in {META_FILE}")
    return {"weights": weights, "gpu_models": meta["gpu_models"], "meta": meta}
