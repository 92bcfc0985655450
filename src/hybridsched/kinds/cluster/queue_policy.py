"""The queue mode's learned policy as one weight vector: the learned queue order
(``queue_order.LearnedOrder``) *and* a learned node choice, trained together by
``queue_train.py``.

Node choice: ``cem``'s linear node score (``cem.ScoredEFT``, its :data:`~cem.NODE_FEATURES`)
with its weights faded by the backlog,

    rel_c + (1 + other pods waiting) ** (-fade) * sum_j w_j * f_j(c)      (lowest wins; ties best fit)

so the node preferences (spreading, model rank, fragmentation ...) can count at light load and
give way to eft's pure earliest-finish choice under a backlog, where a pod started on a
slower model or a spread-out node costs the queue behind it.  All-zero node weights are eft's
node choice whatever ``fade`` is (tested), so the all-zero vector of :data:`JOINT_FEATURES`
(order and node) is eft itself in the queue mode with greedy backfilling, trace for trace.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from hybridsched.errors import HybridschedError
from hybridsched.kinds.cluster.cem import _NF, NODE_FEATURES, ScoredEFT
from hybridsched.kinds.cluster.queue_order import FEATURES, LearnedOrder

NODE_KEYS = tuple(f"node_{f}" for f in NODE_FEATURES)
JOINT_FEATURES = FEATURES + NODE_KEYS + ("node_fade",)  # the joint vector's layout


class BacklogScoredEFT(ScoredEFT):
    """``ScoredEFT``'s node score with its node weights times ``(1 + others) ** -fade``,
    ``others`` = the pods waiting besides this one (the queue engine keeps ``state.n_waiting``
    current during a pass, the pod being placed included).  No queue key: the queue mode's
    order decides the order."""

    name = "learned_node"

    def __init__(self, node: dict[str, float] | None = None, fade: float = 0.0) -> None:
        super().__init__(node=node)
        self.fade = float(fade)
        if not np.isfinite(self.fade):
            raise HybridschedError(f"learned node choice: fade must be a finite number, got {fade!r}")

    def choose(self, i, nodes, state) -> int:
        scale = float(max(state.n_waiting, 1)) ** -self.fade if self.fade else 1.0  # (1 + others) ** -fade
        self.params[:_NF] = self.theta[:_NF] * scale
        return super().choose(i, nodes, state)


def split(theta: np.ndarray) -> tuple[LearnedOrder, BacklogScoredEFT]:
    """The order and the (unfitted) node policy of a joint vector (layout :data:`JOINT_FEATURES`)."""
    theta = np.asarray(theta, dtype=np.float64)
    if theta.shape != (len(JOINT_FEATURES),) or not np.all(np.isfinite(theta)):
        raise HybridschedError(f"learned queue policy: weights must be {len(JOINT_FEATURES)} finite numbers "
                               f"({', '.join(JOINT_FEATURES)})")
    order = LearnedOrder()
    order.set_weights(theta[:len(FEATURES)])
    node = theta[len(FEATURES):len(FEATURES) + len(NODE_KEYS)]
    pol = BacklogScoredEFT(dict(zip(NODE_FEATURES, node.tolist(), strict=True)), float(theta[-1]))
    return order, pol


def joint_vector(weights: dict[str, float], where: str) -> np.ndarray:
    """The joint vector from a name -> weight map (missing: 0); an unknown name names ``where``."""
    bad = sorted(set(weights) - set(JOINT_FEATURES))
    if bad:
        raise HybridschedError(f"{where}: unknown weight(s) {bad} (known: {', '.join(JOINT_FEATURES)})")
    return np.array([float(weights.get(f, 0.0)) for f in JOINT_FEATURES])


class LearnedQueuePolicy(BacklogScoredEFT):
    """The learned queue policy as a pipeline policy (``conf/policies/cluster/learned_queue.yaml``):
    the joint weights of :data:`JOINT_FEATURES` (missing: 0), from the train_late stage's
    ``<model_dir>/model.json`` (read when fitted, so the config check needs no model) or given
    as ``weights``, run in the queue mode with ``backfill`` (``queue_engine.simulate_queue``)
    instead of the default engine: ``workload.run_policies`` calls :meth:`run_queue` for a
    policy that has it.  All-zero weights with greedy backfilling are ``eft``, trace for trace
    (tested)."""

    name = "learned_queue"
    role, trained_by = "learned", "train_late"  # kinds.base.declaration
    dispatch: ClassVar[str] = "queue"  # its own queue engine (evaluation.dispatch_mode)

    def __init__(self, weights: dict[str, float] | None = None, backfill: str = "greedy",
                 model_dir: str | None = None) -> None:
        from hybridsched.kinds.cluster.queue_engine import BACKFILL

        if weights is not None and model_dir is not None:
            raise HybridschedError("learned_queue: give weights or model_dir, not both")
        super().__init__()
        self._set_joint(joint_vector(dict(weights or {}), "policies.cluster.learned_queue.weights"))
        if backfill not in BACKFILL:
            raise HybridschedError(f"learned_queue: backfill must be one of {', '.join(BACKFILL)}, got {backfill!r}")
        self.backfill = backfill
        self.model_dir = model_dir

    def _set_joint(self, theta: np.ndarray) -> None:
        order, pol = split(theta)
        self.set_weights(pol.theta)
        self.fade = pol.fade
        self.order = order

    def fit(self, train) -> None:
        """The model's weights (with ``model_dir``), then eft's fit on the training split."""
        if self.model_dir is not None:
            from hybridsched.kinds.cluster.late_model import read_model

            doc, path = read_model(self.model_dir, "learned_queue", "weights")
            self._set_joint(joint_vector(doc["weights"], str(path)))
        super().fit(train)

    def run_queue(self, inp, cluster):
        """This policy's run on ``inp`` (fitted already): the queue mode's trace."""
        from hybridsched.kinds.cluster.queue_engine import simulate_queue

        return simulate_queue(inp, cluster, self, self.order, self.backfill).trace
