"""Event-driven simulation of pods on a node cluster (the single-machine engine is sim/engine.py).

A task arrives, and if it fits on some node now the policy picks one of the feasible nodes
(and, within it, the GPUs); otherwise it waits in the queue.  The queue is ordered by the
policy's ``queue_key`` (arrival order by default) and is work-conserving with backfilling,
as a Kubernetes scheduler is: whenever resources are released, queued tasks are tried in
order and every one that fits starts (a later small task may start before an earlier big
one that does not fit).

Invariant that keeps the loop small: after every event no queued task fits anywhere.  So a
completion can only make queued tasks fit on the node(s) it released, and only those nodes
are checked (one vectorised fit test over the queue per released node set).

State is arrays: free CPU and memory per node, free milli per (node, GPU) with -1 for a GPU
slot the node does not have.  Run times come from :class:`RunInputs` (trace duration scaled
by the speed of the chosen node's GPU model for the task's job type).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import pandas as pd

from hybridsched.errors import HybridschedError
from hybridsched.kinds.cluster.nodes import NodeCluster, RunInputs, fits_any_node
from hybridsched.kinds.cluster.state import ClusterState, best_fit_gpus

TRACE_COLUMNS = ("task_id", "name", "policy", "arrival", "start", "end", "wait", "run_time", "node", "node_name",
                 "model", "gpus", "num_gpu", "gpu_milli", "cpu_milli", "memory_mib", "qos", "energy_j")


@dataclass
class NodeTrace:
    """Per-task outcome of one run, in task (arrival) order."""

    policy: str
    inputs: RunInputs
    start: np.ndarray
    end: np.ndarray
    node: np.ndarray
    gpu_mask: np.ndarray  # bit g set = GPU g of the node holds the task

    def to_frame(self, cluster: NodeCluster) -> pd.DataFrame:
        t = self.inputs.tasks
        run = self.end - self.start
        model = np.array(cluster.models, dtype=object)[cluster.node_model[self.node]]
        share = self.inputs.cpu / cluster.nodes.cpu_milli[self.node]
        pw = cluster.power
        energy = run * (t.num_gpu * t.gpu_milli / 1000.0 * (pw.gpu_busy_w - pw.gpu_idle_w)
                        + share * (pw.cpu_busy_w - pw.cpu_idle_w))
        gpus = [";".join(str(g) for g in range(64) if (int(m) >> g) & 1) for m in self.gpu_mask]
        return pd.DataFrame({
            "task_id": t.task_id, "name": t.name, "policy": self.policy, "arrival": t.arrival,
            "start": self.start, "end": self.end, "wait": self.start - t.arrival, "run_time": run,
            "node": self.node, "node_name": cluster.nodes.name[self.node], "model": model, "gpus": gpus,
            "num_gpu": t.num_gpu, "gpu_milli": t.gpu_milli, "cpu_milli": t.cpu_milli, "memory_mib": t.memory_mib,
            "qos": t.qos, "energy_j": energy,
        })


def checked_choice(policy, i: int, cand: np.ndarray, state: ClusterState, inp: RunInputs) -> tuple[int, np.ndarray]:
    """The node and GPUs ``policy`` picks for pod ``i`` among the feasible nodes ``cand``
    (best-fit GPUs when it leaves them to the engine); one line naming the policy if the
    choice cannot hold the pod."""
    pos = int(policy.choose(i, cand, state))
    if not 0 <= pos < len(cand):
        raise HybridschedError(f"policy {policy.name!r} chose position {pos} of {len(cand)} feasible nodes")
    nd = int(cand[pos])
    gp = policy.gpus(i, nd, state)
    gp = best_fit_gpus(state, nd, int(inp.k[i]), inp.p[i]) if gp is None else np.asarray(gp, dtype=np.int64)
    if len(gp) != inp.k[i] or len(set(gp.tolist())) != len(gp) or np.any(state.gpu_free[nd, gp] < inp.p[i]):
        raise HybridschedError(f"policy {policy.name!r} chose GPUs {gp.tolist()} of node {nd} that cannot hold "
                               f"task {inp.tasks.name[i]!r}")
    return nd, gp


def simulate(inp: RunInputs, cluster: NodeCluster, policy, max_events: int | None = None,
             compiled: bool = True) -> NodeTrace:
    """Run ``policy`` (see ``policies.py``) on the tasks; every task must fit some node of
    an empty cluster (``fits_any_node``), else it could wait forever and this raises.

    With ``compiled`` (and no ``max_events``), a policy whose ``kernel()`` gives a compiled choice
    (``policies.NodePolicy.kernel``) runs in the compiled loop of ``kernels.py``, with the same trace;
    any other policy, or ``compiled=False``, runs the Python loop below."""
    n = len(inp)
    fits_any = fits_any_node(inp, cluster)
    if not fits_any.all():
        bad = int(np.flatnonzero(~fits_any)[0])
        raise HybridschedError(f"task {inp.tasks.name[bad]!r} fits no node of the cluster even when it is empty "
                               f"(the cluster kind drops them at import: fits_no_sampled_node)")
    if n and not np.isfinite(inp.tasks.duration).all():
        raise HybridschedError("some tasks have no duration (an untimed pod list: set workload.untimed_duration_s)")
    policy.prepare(inp, cluster)
    key = policy.queue_key()
    key = inp.arrival if key is None else np.asarray(key, dtype=np.float64)
    if compiled and max_events is None:
        from hybridsched.kinds.cluster.kernel_choice import kernel_for

        fast = kernel_for(policy)
        if fast is not None:
            return _simulate_compiled(inp, cluster, policy, key, fast)
    state = ClusterState(cluster)
    all_nodes = np.arange(cluster.n_nodes)
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    node_of = np.full(n, -1, dtype=np.int64)
    gpus_of: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * n
    heap: list[tuple[float, int]] = []
    q_ids = np.zeros(0, dtype=np.int64)
    q_keys = np.zeros(0)

    def place(i: int, cand: np.ndarray) -> None:
        nd, gp = checked_choice(policy, i, cand, state, inp)
        state.take(nd, gp, inp.cpu[i], inp.mem[i], inp.p[i], -1.0)
        state.n_running += 1
        rt = inp.run_time[i, cluster.node_model[nd]]
        start[i], end[i], node_of[i], gpus_of[i] = state.t, state.t + rt, nd, gp
        heapq.heappush(heap, (state.t + rt, i))

    def drain(released: np.ndarray) -> None:
        nonlocal q_ids, q_keys
        s = 0
        while s < len(q_ids):
            ok = state.fits(inp, q_ids[s:], released)
            hit = np.flatnonzero(ok.any(axis=1))
            if not len(hit):
                return
            j = s + int(hit[0])
            i = int(q_ids[j])
            q_ids, q_keys = np.delete(q_ids, j), np.delete(q_keys, j)
            state.n_waiting -= 1
            place(i, released[ok[hit[0]]])
            s = j  # earlier tasks fit nowhere and resources only shrank

    nxt = 0
    events = 0
    while nxt < n or heap:
        events += 1
        if max_events is not None and events > max_events:
            raise HybridschedError(f"simulation exceeded {max_events} events")
        if heap and (nxt >= n or heap[0][0] <= inp.arrival[nxt]):
            t = heap[0][0]
            state.t = t
            released = []
            while heap and heap[0][0] == t:  # every completion at this instant, then one queue pass
                _, i = heapq.heappop(heap)
                state.take(int(node_of[i]), gpus_of[i], inp.cpu[i], inp.mem[i], inp.p[i], +1.0)
                state.n_running -= 1
                released.append(int(node_of[i]))
            if len(q_ids):
                drain(np.unique(released))
        else:
            i = nxt
            nxt += 1
            state.t = inp.arrival[i]
            ok = state.fits_one(inp, i)
            if ok.any():
                place(i, all_nodes[ok])
            else:
                pos = int(np.searchsorted(q_keys, key[i], side="right"))
                q_ids, q_keys = np.insert(q_ids, pos, i), np.insert(q_keys, pos, key[i])
                state.n_waiting += 1
    policy.finish(state)
    mask = np.array([int(np.sum(1 << g.astype(np.int64))) if len(g) else 0 for g in gpus_of], dtype=np.int64)
    return NodeTrace(policy.name, inp, start, end, node_of, mask)


def _simulate_compiled(inp: RunInputs, cluster: NodeCluster, policy, key: np.ndarray, fast: tuple) -> NodeTrace:
    """The run in ``kernels.run_loop`` (bound to the choice, ``bound_loops.bind``); the final state goes
    to ``policy.finish`` as usual."""
    from hybridsched.bound_loops import bind
    from hybridsched.kinds.cluster.kernels import demand_classes, run_loop

    n = len(inp)
    state = ClusterState(cluster)
    start, end = np.full(n, np.nan), np.full(n, np.nan)
    node_of = np.full(n, -1, dtype=np.int64)
    mask = np.zeros(n, dtype=np.int64)
    allowed = np.ascontiguousarray(inp.allowed)
    if allowed.shape[1] > 62:
        raise HybridschedError(f"the compiled cluster loop indexes at most 62 GPU models, got {allowed.shape[1]}")
    demand, n_demand = demand_classes(inp.cpu, inp.mem, inp.k, inp.p, allowed)
    err = bind(run_loop, fast.choose)(fast.mode, fast.data, fast.ints, inp.arrival, inp.cpu, inp.mem, inp.k, inp.p, allowed, cluster.node_model,
                   key, np.ascontiguousarray(inp.run_time), state.cpu_free, state.mem_free, state.gpu_free,
                   cluster.gpu_cap.astype(np.float64), cluster.nodes.cpu_milli.astype(np.float64),
                   (cluster.nodes.n_gpu > 0), state.version, start, end, node_of, mask, demand, n_demand)
    if err:
        i = -1 - int(err)
        raise HybridschedError(f"policy {policy.name!r} made an invalid choice for task {inp.tasks.name[i]!r}")
    state.gpu_sorted = -np.sort(-state.gpu_free, axis=1)
    state.t = float(np.nanmax(end)) if n else 0.0
    policy.finish(state)
    return NodeTrace(policy.name, inp, start, end, node_of, mask)
