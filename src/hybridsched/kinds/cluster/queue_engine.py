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
    pred = predicted_times(inp, cluster, est) if pred is None else np.asarray(pred, dtype=np.float64)
    order.prepare(inp, cluster, est)
    state = ClusterState(cluster)
    all_nodes = np.arange(cluster.n_nodes)
    model = cluster.node_model
    start, end = np.full(n, np.nan), np.full(n, np.nan)
    pend = np.full(n, np.nan)  # predicted end of a running pod
    node_of = np.full(n, -1, dtype=np.int64)
    gpus_of: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * n
    running: list[set[int]] = [set() for _ in range(cluster.n_nodes)]
    first_res = np.full(n, np.nan)
    n_res = 0
    heap: list[tuple[float, int]] = []
    empty_ok = fits_empty(inp, cluster) if backfill == "easy" else None  # (pods, N): fits the empty node
    queue: list[int] = []  # pending pods, arrival order

    def choose(i: int, cand: np.ndarray) -> tuple[int, np.ndarray]:
        return checked_choice(policy, i, cand, state, inp)

    def commit(i: int, nd: int, gp: np.ndarray) -> None:
        state.take(nd, gp, inp.cpu[i], inp.mem[i], inp.p[i], -1.0)
        state.n_running += 1
        rt = inp.run_time[i, model[nd]]
        start[i], end[i], node_of[i], gpus_of[i] = state.t, state.t + rt, nd, gp
        pend[i] = state.t + pred[i, model[nd]]
        running[nd].add(i)
        heapq.heappush(heap, (state.t + rt, i))
        state.n_waiting -= 1

    def reserve(h: int, t: float) -> tuple[int, int, float, list]:
        """The head's reservation: (head, node, time, projected [cpu, mem, gpu] of that node then)."""
        best: tuple[int, int, float, list] | None = None
        hc, hm, hk, hp = float(inp.cpu[h]), float(inp.mem[h]), int(inp.k[h]), float(inp.p[h])
        for nd in np.flatnonzero(empty_ok[h]).tolist():
            proj: list = [float(state.cpu_free[nd]), float(state.mem_free[nd]), state.gpu_free[nd].tolist()]
            when = t
            for r in sorted(running[nd], key=lambda r: (max(pend[r], t), r)):
                if _head_fits(proj[0], proj[1], proj[2], hc, hm, hk, hp):
                    break
                when = max(float(pend[r]), t)
                proj[0] += inp.cpu[r]
                proj[1] += inp.mem[r]
                for g in gpus_of[r].tolist():
                    proj[2][g] += inp.p[r]
            if best is None or when < best[2]:
                best = (h, nd, when, proj)
        assert best is not None  # the head fits some empty node (checked at the start)
        return best

    def dispatch() -> None:
        nonlocal n_res
        if not queue:
            return
        # the node policy sees the backlog as it stands: pods still waiting, this pod included
        state.n_waiting = len(queue)
        ids = np.array(queue, dtype=np.int64)
        fit = state.fits(inp, ids, all_nodes)
        sc = np.asarray(order.scores(ids, state.t, state, fit), dtype=np.float64)
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
                res = reserve(i, state.t)
                n_res += 1
                if np.isnan(first_res[i]):
                    first_res[i] = res[2]
                continue
            cand = all_nodes[ok]
            nd, gp = choose(i, cand)
            if res is not None and nd == res[1] and state.t + pred[i, model[nd]] > res[2]:
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
                    nd, gp = choose(i, cand)
            commit(i, nd, gp)
            started.append(i)
        for i in started:
            queue.remove(i)

    nxt = 0
    while nxt < n or heap:
        if heap and (nxt >= n or heap[0][0] <= inp.arrival[nxt]):
            t = heap[0][0]
            state.t = t
            while heap and heap[0][0] == t:  # every completion at this instant, then one pass
                _, i = heapq.heappop(heap)
                nd = int(node_of[i])
                state.take(nd, gpus_of[i], inp.cpu[i], inp.mem[i], inp.p[i], +1.0)
                state.n_running -= 1
                running[nd].discard(i)
            dispatch()
        else:
            i = nxt
            nxt += 1
            state.t = inp.arrival[i]
            queue.append(i)
            dispatch()
    policy.finish(state)
    mask = np.array([int(np.sum(1 << g.astype(np.int64))) if len(g) else 0 for g in gpus_of], dtype=np.int64)
    return QueueTrace(NodeTrace(policy.name, inp, start, end, node_of, mask), first_res, n_res)
