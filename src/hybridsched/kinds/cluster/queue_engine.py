"""Queue mode for the node cluster: pending pods wait in one central queue, and at every event
(an arrival, or the completions of one instant) the *queue order* decides which pending pod
starts next; a node policy (``policies.py``, ``cem.py``) still picks the node among those where
the pod fits now.  The default engine (``engine.py``) orders its queue by a static per-pod key
and starts every queued pod that fits (greedy backfilling, no reservation); here the order is
recomputed at each event from the state (a :class:`QueueOrder`, e.g. time waited relative to
the estimate), and three backfilling rules are available:

* ``greedy``: every pod that fits starts, in queue order (the default engine's rule; with a
  static order this *is* the default engine, trace for trace: tested);
* ``none``: strict order: the pass stops at the first pod that does not fit;
* ``easy``: EASY backfilling (Lifka 1995; Mu'alem & Feitelson 2001) with predicted durations.
  The first pod in queue order that fits nowhere now is the *head*; it gets a reservation
  ``(n*, t*)``: for each node it may use, the running pods' predicted ends (start + predicted
  run time on that node, an overdue pod taken as ending now) are released in order into a
  projected free state, and ``t_n`` is the first predicted end at which the head fits there;
  ``(t*, n*)`` is the smallest ``(t_n, n)``.  Every later pod in queue order may start now
  (backfill) on any node where it fits, except that on ``n*`` it must either be predicted to end
  by ``t*`` or leave the head still fitting in ``n*``'s projected state at ``t*`` (its CPU,
  memory and its actual GPUs taken out of that state).  So, with exact predictions, no backfilled
  pod delays the head past ``t*`` (a hypothesis test checks: with a static order and exact
  predictions each pod starts no later than its first reservation).  Only the head is reserved.

The predicted run times (``pred``, shape (pods, models)) come from the caller: the node policy's
class-mean estimate divided by the model's mean speed, as eft predicts, or the true run times
(the tests' exact predictor).  Plain Python and numpy: one vectorised fit test over the queue
per event; no compiled path.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from hybridsched.errors import HybridschedError
from hybridsched.kinds.cluster.engine import NodeTrace, checked_choice
from hybridsched.kinds.cluster.nodes import NodeCluster, RunInputs, fits_any_node, fits_empty
from hybridsched.kinds.cluster.state import ClusterState

BACKFILL = ("easy", "greedy", "none")


class QueueOrder:
    """Order of the pending pods at an event: lower score starts first (ties: arrival order)."""

    name = "fifo"

    def prepare(self, inp: RunInputs, cluster: NodeCluster, est: np.ndarray) -> None:
        """``est``: per-pod estimated run time on the reference GPU (the node policy's)."""
        self.inp, self.cluster, self.est = inp, cluster, np.maximum(np.asarray(est, dtype=np.float64), 1.0)

    def scores(self, ids: np.ndarray, t: float, state: ClusterState, fit: np.ndarray) -> np.ndarray:
        """Score of each pending pod ``ids`` at time ``t``; ``fit`` = (len(ids), N) fits-now matrix."""
        return self.inp.arrival[ids]


@dataclass
class QueueTrace:
    """A queue-mode run: the usual trace plus each pod's first EASY reservation (NaN: none)."""

    trace: NodeTrace
    first_reservation: np.ndarray
    reservations: int


def predicted_times(inp: RunInputs, cluster: NodeCluster, est: np.ndarray) -> np.ndarray:
    """(pods, models) predicted run times: ``est / mean model speed`` (eft's prediction; CPU-only
    pods run ``est`` anywhere)."""
    speed = cluster.model_speed()
    gpu = inp.k > 0
    return np.where(gpu[:, None], np.asarray(est, dtype=np.float64)[:, None] / speed[None, :],
                    np.asarray(est, dtype=np.float64)[:, None])


def _head_fits(cpu: float, mem: float, gpu: list[float], hc: float, hm: float, hk: int, hp: float) -> bool:
    """Does a pod (hc, hm, hk GPUs of hp milli) fit free CPU ``cpu``, memory ``mem``, GPUs ``gpu``?"""
    if hc > cpu or hm > mem:
        return False
    return hk == 0 or sum(1 for g in gpu if g >= hp) >= hk


def simulate_queue(inp: RunInputs, cluster: NodeCluster, policy, order: QueueOrder, backfill: str = "easy",
                   pred: np.ndarray | None = None) -> QueueTrace:
    """Run ``policy`` (node choice) with ``order`` (queue order) and the ``backfill`` rule.

    ``pred``: predicted run times (pods, models); default :func:`predicted_times` of the
    policy's ``estimate`` (an :class:`~policies.EstimatePolicy`)."""
    run = QueueRun(inp, cluster, policy, order, backfill, pred)
    for _ in run.events():
        run.dispatch()
    return run.result()


class QueueRun:
    """One queue-mode run, stepped from outside: :meth:`events` advances the clock event by
    event (an arrival, or the completions of one instant) and yields before each event's pass;
    the driver then runs the pass: :meth:`dispatch` (the order with the backfill rule, what
    :func:`simulate_queue` does), or pod by pod with :meth:`start_pod` (the Gymnasium env,
    ``cluster/env.py``).  ``area`` is the integral of the pods in the system (arrived, not ended)
    over time so far."""

    def __init__(self, inp: RunInputs, cluster: NodeCluster, policy, order: QueueOrder | None,
                 backfill: str = "easy", pred: np.ndarray | None = None) -> None:
        if backfill not in BACKFILL:
            raise HybridschedError(f"queue mode: backfill must be one of {', '.join(BACKFILL)}, got {backfill!r}")
        n = len(inp)
        fits_any = fits_any_node(inp, cluster)
        if not fits_any.all():
            bad = int(np.flatnonzero(~fits_any)[0])
            raise HybridschedError(f"task {inp.tasks.name[bad]!r} fits no node of the cluster even when it is empty")
        policy.prepare(inp, cluster)
        est = getattr(policy, "estimate", None)
        if est is None:
            raise HybridschedError(f"queue mode needs a policy with a duration estimate (eft, cem, hybrid_ml), "
                                   f"got {policy.name!r}")
        self.inp, self.cluster, self.policy, self.order, self.backfill = inp, cluster, policy, order, backfill
        self.est = est
        self.pred = predicted_times(inp, cluster, est) if pred is None else np.asarray(pred, dtype=np.float64)
        if order is not None:
            order.prepare(inp, cluster, est)
        self.state = ClusterState(cluster)
        self.all_nodes = np.arange(cluster.n_nodes)
        self.model = cluster.node_model
        self.start, self.end = np.full(n, np.nan), np.full(n, np.nan)
        self.pend = np.full(n, np.nan)  # predicted end of a running pod
        self.node_of = np.full(n, -1, dtype=np.int64)
        self.gpus_of: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * n
        self.running: list[set[int]] = [set() for _ in range(cluster.n_nodes)]
        self.first_res = np.full(n, np.nan)
        self.n_res = 0
        self.heap: list[tuple[float, int]] = []
        self.empty_ok = fits_empty(inp, cluster) if backfill == "easy" else None  # (pods, N): fits the empty node
        self.queue: list[int] = []  # pending pods, arrival order
        self.arrived = 0
        self.ended = 0
        self.area = 0.0

    def _clock(self, t: float) -> None:
        """Advance the clock to ``t``, adding the pods in the system meanwhile to ``area``."""
        self.area += (self.arrived - self.ended) * (t - self.state.t)
        self.state.t = t

    def events(self) -> Iterator[None]:
        """Advance event by event; yields once per event, before its pass (the state at ``t``)."""
        inp, state, heap = self.inp, self.state, self.heap
        n = len(inp)
        while self.arrived < n or heap:
            if heap and (self.arrived >= n or heap[0][0] <= inp.arrival[self.arrived]):
                t = heap[0][0]
                self._clock(t)
                while heap and heap[0][0] == t:  # every completion at this instant, then one pass
                    _, i = heapq.heappop(heap)
                    nd = int(self.node_of[i])
                    state.take(nd, self.gpus_of[i], inp.cpu[i], inp.mem[i], inp.p[i], +1.0)
                    state.n_running -= 1
                    self.running[nd].discard(i)
                    self.ended += 1
            else:
                i = self.arrived
                self._clock(inp.arrival[i])
                self.arrived += 1
                self.queue.append(i)
            yield

    def choose(self, i: int, cand: np.ndarray) -> tuple[int, np.ndarray]:
        """The node policy's node and GPUs for pod ``i`` among the nodes ``cand``."""
        return checked_choice(self.policy, i, cand, self.state, self.inp)

    def commit(self, i: int, nd: int, gp: np.ndarray) -> None:
        """Start pod ``i`` now on node ``nd``, GPUs ``gp`` (it stays in ``queue``: the caller's)."""
        inp, state = self.inp, self.state
        state.take(nd, gp, inp.cpu[i], inp.mem[i], inp.p[i], -1.0)
        state.n_running += 1
        rt = inp.run_time[i, self.model[nd]]
        self.start[i], self.end[i], self.node_of[i], self.gpus_of[i] = state.t, state.t + rt, nd, gp
        self.pend[i] = state.t + self.pred[i, self.model[nd]]
        self.running[nd].add(i)
        heapq.heappush(self.heap, (state.t + rt, i))
        state.n_waiting -= 1

    def begin_pass(self) -> None:
        """A pass starts: the node policy sees the backlog as it stands (pods still waiting)."""
        self.state.n_waiting = len(self.queue)

    def start_pod(self, i: int) -> None:
        """Start pending pod ``i`` (it fits some node now) where the node policy places it."""
        ok = self.state.fits_one(self.inp, i)
        nd, gp = self.choose(i, self.all_nodes[ok])
        self.commit(i, nd, gp)
        self.queue.remove(i)

    def reserve(self, h: int, t: float) -> tuple[int, int, float, list]:
        """The head's reservation: (head, node, time, projected [cpu, mem, gpu] of that node then)."""
        inp, state, pend = self.inp, self.state, self.pend
        best: tuple[int, int, float, list] | None = None
        hc, hm, hk, hp = float(inp.cpu[h]), float(inp.mem[h]), int(inp.k[h]), float(inp.p[h])
        assert self.empty_ok is not None
        for nd in np.flatnonzero(self.empty_ok[h]).tolist():
            proj: list = [float(state.cpu_free[nd]), float(state.mem_free[nd]), state.gpu_free[nd].tolist()]
            when = t
            for r in sorted(self.running[nd], key=lambda r: (max(pend[r], t), r)):
                if _head_fits(proj[0], proj[1], proj[2], hc, hm, hk, hp):
                    break
                when = max(float(pend[r]), t)
                proj[0] += inp.cpu[r]
                proj[1] += inp.mem[r]
                for g in self.gpus_of[r].tolist():
                    proj[2][g] += inp.p[r]
            if best is None or when < best[2]:
                best = (h, nd, when, proj)
        assert best is not None  # the head fits some empty node (checked at the start)
        return best

    def dispatch(self) -> None:
        """One pass of the queue order with the backfill rule (module docstring)."""
        inp, state, queue, backfill, model = self.inp, self.state, self.queue, self.backfill, self.model
        if not queue:
            return
        assert self.order is not None
        self.begin_pass()
        ids = np.array(queue, dtype=np.int64)
        fit = state.fits(inp, ids, self.all_nodes)
        sc = np.asarray(self.order.scores(ids, state.t, state, fit), dtype=np.float64)
        rank = np.lexsort((ids, sc))
        anyfit = fit.any(axis=1)
        res: tuple[int, int, float, list] | None = None
        started: list[int] = []
        for j in rank:
            i = int(ids[j])
            # resources only shrink during a pass, so a pod that fit nowhere at its start still does not
            ok = state.fits_one(inp, i) if anyfit[j] else None
            if ok is None or not ok.any():
                if res is not None or backfill == "greedy":
                    continue
                if backfill == "none":
                    break
                res = self.reserve(i, state.t)
                self.n_res += 1
                if np.isnan(self.first_res[i]):
                    self.first_res[i] = res[2]
                continue
            cand = self.all_nodes[ok]
            nd, gp = self.choose(i, cand)
            if res is not None and nd == res[1] and state.t + self.pred[i, model[nd]] > res[2]:
                h, rn, _, proj = res
                g2 = list(proj[2])
                for g in gp.tolist():
                    g2[g] -= inp.p[i]
                if _head_fits(proj[0] - inp.cpu[i], proj[1] - inp.mem[i], g2, inp.cpu[h], inp.mem[h],
                              int(inp.k[h]), inp.p[h]):
                    proj[0] -= inp.cpu[i]  # it stays past t* but leaves the head room: book it
                    proj[1] -= inp.mem[i]
                    proj[2] = g2
                else:
                    cand = cand[cand != rn]  # it would delay the head there: only the other nodes
                    if not len(cand):
                        continue
                    nd, gp = self.choose(i, cand)
            self.commit(i, nd, gp)
            started.append(i)
        for i in started:
            queue.remove(i)

    def trace(self) -> NodeTrace:
        """The schedule so far (pods not started: NaN start and end, node -1)."""
        mask = np.array([int(np.sum(1 << g.astype(np.int64))) if len(g) else 0 for g in self.gpus_of],
                        dtype=np.int64)
        return NodeTrace(self.policy.name, self.inp, self.start.copy(), self.end.copy(), self.node_of.copy(), mask)

    def result(self) -> QueueTrace:
        """The finished run (the node policy's ``finish`` called): its trace and reservations."""
        self.policy.finish(self.state)
        mask = np.array([int(np.sum(1 << g.astype(np.int64))) if len(g) else 0 for g in self.gpus_of],
                        dtype=np.int64)
        return QueueTrace(NodeTrace(self.policy.name, self.inp, self.start, self.end, self.node_of, mask),
                          self.first_res, self.n_res)
