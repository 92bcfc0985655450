"""Queue orders for the queue mode (``queue_engine.py``): the heuristics and a learned scorer.

Every order returns a score per pending pod at an event (lower starts first; ties arrival order):

* ``fifo``: the arrival time;
* ``sjf``: the estimate (shortest predicted first; with greedy backfilling and eft's node choice
  this is ``eft`` itself, trace for trace);
* ``smallest``: the estimated GPU-seconds (estimate x GPUs; CPU-only pods by their cores / 32)
  first, a small-area-first order;
* ``slowdown``: highest expected slowdown first, ``-(wait + est) / est`` (HRRN, Brinch Hansen
  1971): shortest first, with aging that grows with the wait *relative* to the pod's own
  estimate, so long pods are not starved yet short pods keep priority under a backlog;
* ``learned``: :class:`LearnedOrder`, a linear score whose weights ``queue_train.py`` finds by
  the cross-entropy method on a load mixture of training windows.
"""

from __future__ import annotations

import numpy as np

from hybridsched.errors import HybridschedError
from hybridsched.kinds.cluster.queue_engine import QueueOrder
from hybridsched.kinds.cluster.trace import MILLI

CPU_SCALE = 32_000.0  # milli-CPU: per 32 cores


class ShortestFirst(QueueOrder):
    """Shortest estimated run time first (the static order of eft)."""

    name = "sjf"

    def scores(self, ids, t, state, fit):
        return self.est[ids]


class SmallestFirst(QueueOrder):
    """Smallest estimated area first: estimate x GPUs (CPU-only pods: x cores / 32)."""

    name = "smallest"

    def scores(self, ids, t, state, fit):
        inp = self.inp
        size = np.where(inp.k[ids] > 0, inp.k[ids] * inp.p[ids] / MILLI, inp.cpu[ids] / CPU_SCALE)
        return self.est[ids] * np.maximum(size, 1e-3)


class HighestSlowdown(QueueOrder):
    """Highest response ratio first: ``-(wait + est) / est``."""

    name = "slowdown"

    def scores(self, ids, t, state, fit):
        wait = t - self.inp.arrival[ids]
        return -(wait + self.est[ids]) / self.est[ids]


FEATURES = ("gpus", "cpu", "wait_ratio", "fits_now", "slow_now", "long", "backlog_short", "backlog_wait")
BACKLOG_SCALE = 4.0  # log1p(pods waiting) / 4: about 1 at a backlog of 50 pods


def backlog(state) -> float:
    """The backlog term of the load-adaptive features: ``log1p(pods waiting) / 4``."""
    return float(np.log1p(max(state.n_waiting, 0))) / BACKLOG_SCALE


class LearnedOrder(QueueOrder):
    """``log(est) + w . f`` over per-pod features at the event (lower first); all-zero weights
    are ``sjf``.  The features (:data:`FEATURES`):

    * ``gpus``: ``log(1 + GPUs)`` (GPU share summed over the pod's GPUs);
    * ``cpu``: cores / 32;
    * ``wait_ratio``: ``log(1 + wait / est)``, the waiting so far relative to the estimate (a
      negative weight ages pods, but only as fast as their own estimate, unlike FIFO aging);
    * ``fits_now``: 1 if the pod fits some node now (a negative weight lets startable pods go
      first, so the head reserved by EASY is the first pod that does *not* fit);
    * ``slow_now``: ``log(fastest allowed speed / fastest speed among the nodes it fits now)``
      (0 if it fits nowhere): how much slower than it could be the pod would run if started now;
    * ``long``: ``log(est / 1 h)`` clipped at 0 from below (an extra weight on long pods);
    * ``backlog_short``: ``b * log(est / 1 h)`` with ``b`` = :func:`backlog` (pods waiting at
      this pass): shortest-first grows stronger (> 0) or weaker (< 0) as the queue grows;
    * ``backlog_wait``: ``b * log(1 + wait / est)``: aging that grows with the queue.

    The two backlog terms let one weight vector order differently at light and heavy load.
    """

    name = "learned"

    def __init__(self, weights: dict[str, float] | None = None) -> None:
        self.set_weights(weights_vector(weights or {}, "learned queue order"))

    def set_weights(self, theta: np.ndarray) -> None:
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (len(FEATURES),) or not np.all(np.isfinite(theta)):
            raise HybridschedError(f"learned queue order: weights must be {len(FEATURES)} finite numbers "
                                   f"({', '.join(FEATURES)})")
        self.theta = theta.copy()

    def prepare(self, inp, cluster, est) -> None:
        super().prepare(inp, cluster, est)
        speed = cluster.model_speed()
        node_speed = np.where(inp.k[:, None] > 0, speed[None, cluster.node_model], 1.0)  # (pods, N)
        allowed = inp.allowed[:, cluster.node_model]
        self.node_speed = node_speed
        self.best_speed = np.where(allowed, node_speed, 0.0).max(axis=1)
        size = inp.k * inp.p / MILLI
        self.static = (np.log(self.est) + self.theta[0] * np.log1p(size) + self.theta[1] * inp.cpu / CPU_SCALE
                       + self.theta[5] * np.maximum(np.log(self.est / 3600.0), 0.0))

    def scores(self, ids, t, state, fit):
        w = self.theta
        s = self.static[ids].copy()
        if w[2] != 0.0 or w[7] != 0.0:
            s += (w[2] + w[7] * backlog(state)) * np.log1p((t - self.inp.arrival[ids]) / self.est[ids])
        if w[6] != 0.0:
            s += w[6] * backlog(state) * np.log(self.est[ids] / 3600.0)
        if w[3] != 0.0 or w[4] != 0.0:
            anyfit = fit.any(axis=1)
            s += w[3] * anyfit
            if w[4] != 0.0:
                now = np.where(fit, self.node_speed[ids], 0.0).max(axis=1)
                s += w[4] * np.where(anyfit, np.log(self.best_speed[ids] / np.maximum(now, 1e-9)), 0.0)
        return s


def weights_vector(weights: dict[str, float], where: str) -> np.ndarray:
    """The weight vector (layout :data:`FEATURES`) from a name -> weight map."""
    bad = sorted(set(weights) - set(FEATURES))
    if bad:
        raise HybridschedError(f"{where}: unknown feature(s) {bad} (known: {', '.join(FEATURES)})")
    return np.array([float(weights.get(f, 0.0)) for f in FEATURES])


ORDERS: dict[str, type[QueueOrder]] = {"fifo": QueueOrder, "sjf": ShortestFirst, "smallest": SmallestFirst,
                                       "slowdown": HighestSlowdown, "learned": LearnedOrder}
