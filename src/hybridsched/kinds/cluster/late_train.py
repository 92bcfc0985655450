"""The cluster kind's part of the ``train_late`` stage: the weights of ``eft_queue`` and of
``learned_queue``, each searched by the cross-entropy method on windows of the training split
only (the test split is never read), each into ``<train_late.model_dir>/<policy>/model.json``
(late_model.py reads them).

* ``eft_queue``: ``train_cem``'s search restricted to the three queue weights
  (``cem_train.train_scorer`` with ``search: queue``) on a mixture of scaled training windows.
* ``learned_queue``: the joint queue-mode policy (``queue_train.train_queue_model``): the
  learned order and the backlog fade, from ``cem``'s trained node weights (``node_start: cem``,
  the train_cem stage's model), on a load mixture of training windows, with the policy's own
  backfilling rule.

Settings: ``train_late.cluster.<policy>``: the search's keys (``rl.cem.CEMSettings``) and the
mixture's (:data:`MIXTURE_KEYS`); a key left out takes the settings class's default.
"""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Any

import numpy as np

from hybridsched.errors import HybridschedError, check_known_keys
from hybridsched.kinds.cluster.nodes import NodeCluster
from hybridsched.kinds.cluster.trace import PodTable
from hybridsched.rl.cem import CEMSettings

POLICIES = ("eft_queue", "learned_queue")
CEM_KEYS = tuple(f.name for f in fields(CEMSettings))
# each trainer's mixture keys (the rest of its settings class is fixed by the policy it trains)
MIXTURE_KEYS = {
    "eft_queue": ("windows", "min_pods", "max_pods", "min_rate", "max_rate", "eval_windows"),
    "learned_queue": ("windows", "min_pods", "max_pods", "base_rate", "min_load", "max_load", "eval_windows",
                      "strata", "select", "node_search", "calibrate", "wait_share", "min_fade", "node_start"),
}
NODE_STARTS = ("cem", "eft")


def _setting_error(e: HybridschedError, block: str) -> HybridschedError:
    """A settings class's out-of-range line as the ``train_late.cluster`` key it came from."""
    msg = str(e)
    m = re.match(r"(?:cem\.cluster\.|cem\.)(\w+): (.*)$", msg) or re.match(r"queue training: (\w+) = (.*)$", msg)
    return HybridschedError(f"{block}.{m.group(1)}: {m.group(2)}" if m else f"{block}: {msg}")


def settings(policy: str, block: dict[str, Any] | None) -> tuple[CEMSettings, Any, str]:
    """``(search, mixture, node_start)`` of ``train_late.cluster.<policy>``; an unknown key or a
    value out of range is one line naming the setting."""
    from hybridsched.kinds.cluster.cem_train import ClusterCEMSettings
    from hybridsched.kinds.cluster.queue_train import QueueTrainSettings

    where = f"train_late.cluster.{policy}"
    if policy not in POLICIES:
        raise HybridschedError(f"train_late.cluster: no trainer for {policy!r}; known: {', '.join(POLICIES)}")
    d = dict(block or {})
    check_known_keys(d, {*CEM_KEYS, *MIXTURE_KEYS[policy]}, where)
    node_start = str(d.pop("node_start", "cem"))
    if node_start not in NODE_STARTS:
        raise HybridschedError(f"{where}.node_start: must be one of {', '.join(NODE_STARTS)}, got {node_start!r}")
    search = {k: d.pop(k) for k in CEM_KEYS if k in d}
    try:
        cem = CEMSettings(**search)
        if policy == "eft_queue":
            mixture: Any = ClusterCEMSettings(**d, search="queue")
        else:
            mixture = QueueTrainSettings(**d, joint=True)
    except HybridschedError as e:
        raise _setting_error(e, where) from None
    return cem, mixture, node_start


def train_eft_queue(train: PodTable, cluster: NodeCluster, block: dict[str, Any] | None,
                    workload: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(model document, curve)``: the three queue weights searched from eft's (all 0); the
    curve has one row per generation (``step``, ``cost`` = the search mean's mean JCT ÷ eft's)."""
    from hybridsched.io import without_timings
    from hybridsched.kinds.cluster.cem_train import train_scorer

    cem, mixture, _ = settings("eft_queue", block)
    _, history, metrics = train_scorer(train, cluster, cem, mixture)
    doc = {"kind": "cluster", "policy": "eft_queue", "workload": workload, "queue": metrics["weights"]["queue"],
           "train": without_timings(metrics)}
    return doc, [{"step": h["generation"], "cost": h["mean_cost"]} for h in history]


def train_learned_queue(train: PodTable, cluster: NodeCluster, block: dict[str, Any] | None, workload: str, *,
                        backfill: str, cem_spec: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(model document, curve)``: the joint queue-mode weights trained with ``backfill`` (the
    policy's rule), from ``cem``'s node weights (``cem_spec``, the ``cem`` policy's config) or
    from eft's (``node_start: eft``); the curve as :func:`train_eft_queue`'s."""
    from dataclasses import replace

    from hybridsched.kinds.cluster.queue_policy import NODE_KEYS
    from hybridsched.kinds.cluster.queue_train import cem_node_weights, train_queue_model

    cem, mixture, node_start = settings("learned_queue", block)
    try:
        mixture = replace(mixture, backfill=backfill)
    except HybridschedError:
        raise HybridschedError(f"policies.cluster.learned_queue.backfill: {backfill!r} is not a backfilling rule") from None
    start = cem_node_weights(cem_spec, train) if node_start == "cem" else np.zeros(len(NODE_KEYS))
    doc = train_queue_model(train, cluster, None, cem, mixture, node_start_name=node_start, node_start=start)
    return ({"kind": "cluster", "policy": "learned_queue", "workload": workload, **doc},
            [{"step": h["generation"], "cost": h["mean_cost"]} for h in doc["history"]])
