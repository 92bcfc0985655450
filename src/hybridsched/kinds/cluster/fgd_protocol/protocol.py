"""One run of the FGD paper's fragmentation protocol (Weng et al., ATC 2023, as its public Go
simulator ``hkust-adsl/kubernetes-scheduler-simulator`` runs it).

* Cluster: the GPU nodes of the node list (CPU-only nodes are not part of it).
* Workload: every row of the pod list (phase and times ignored), shuffled with the run's seed,
  then inflated: uniformly drawn copies are appended until the requested GPU reaches
  ``inflation`` x the cluster's GPU capacity.  Pods arrive one by one and never leave; a pod
  that fits no node fails (it is not queued) and the run goes on.
* Feasibility (``engine.ClusterState.fits``): free CPU and memory, GPU model allowed by
  ``gpu_spec``, ``num_gpu`` GPUs each with ``gpu_milli`` free; CPU 0 counts as 100 milli
  (``trace.read_pod_requests``).
* Placement: the policy's ``score`` over the feasible nodes (the same code as the time-driven
  runs, ``policies.py``), the lowest score wins, ties drawn uniformly with the run's generator;
  then the policy's GPUs (default: the tightest-fitting GPU, or the lowest-index idle ones).
* Measures after every arriving pod (failed ones included): x = cumulative requested GPU in %
  of capacity, unallocated GPU %, fragmentation % of capacity (typical pods, see
  ``fragmentation.typical_pods``) and fragmentation / idle GPU milli in %.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from hybridsched.errors import HybridschedError
from hybridsched.kinds.cluster.engine import ClusterState, best_fit_gpus
from hybridsched.kinds.cluster.fragmentation import FragCache, TaskMix
from hybridsched.kinds.cluster.nodes import NodeCluster, placement_inputs
from hybridsched.kinds.cluster.policies import NodePolicy
from hybridsched.kinds.cluster.trace import NodeTable, PodTable


def gpu_cluster(nodes: NodeTable) -> NodeCluster:
    """The placement-only cluster of the nodes with GPUs (no speeds: pods never finish)."""
    gpu_nodes = nodes.subset(np.flatnonzero(nodes.n_gpu > 0))
    if not len(gpu_nodes):
        raise HybridschedError("fgd: the node list has no GPU nodes")
    return NodeCluster.build(gpu_nodes, None)


def arrival_order(pods: PodTable, capacity_milli: float, inflation: float, rng: np.random.Generator) -> np.ndarray:
    """Rows of ``pods`` in arrival order: a seeded shuffle of every pod, then uniformly drawn
    copies appended until the requested GPU milli reaches ``inflation * capacity_milli`` (the
    last copy crosses it; with ``inflation`` at or below the list's own demand, no copies)."""
    demand = pods.num_gpu * pods.gpu_milli
    if not demand.sum() > 0:
        raise HybridschedError("fgd: the pod list requests no GPU, it cannot be inflated to a GPU target")
    order = rng.permutation(len(pods))
    target = inflation * capacity_milli
    total = float(demand.sum())
    copies: list[np.ndarray] = []
    while total < target:
        draw = rng.integers(len(pods), size=256)  # in blocks; cut at the first copy that reaches the target
        reach = total + np.cumsum(demand[draw])
        stop = int(np.searchsorted(reach, target, side="left"))
        take = draw[: stop + 1]
        copies.append(take)
        total = float(reach[min(stop, len(draw) - 1)])
    return np.concatenate([order, *copies]) if copies else order


@dataclass
class Curve:
    """Per arriving pod: x (% of capacity requested so far), the measures after it, and
    whether it failed."""

    x: np.ndarray
    unallocated_gpu_pct: np.ndarray
    frag_pct: np.ndarray
    frag_ratio_pct: np.ndarray
    failed: np.ndarray  # bool
    node: np.ndarray  # node of each pod, -1 = failed
    gpu_mask: np.ndarray  # bit g set = GPU g of its node holds the pod


def run_seed(policy: NodePolicy, pods: PodTable, cluster: NodeCluster, order: np.ndarray, mix: TaskMix,
             rng: np.random.Generator) -> Curve:
    """Place ``pods`` in ``order`` with ``policy`` (bound here; ``fit`` is the caller's) on an
    empty ``cluster``; fragmentation is measured with ``mix``."""
    seq = pods.subset(order)
    inp = placement_inputs(seq, cluster)
    policy.bind(inp, cluster, rng)
    state = ClusterState(cluster)
    model = cluster.node_model
    all_nodes = np.arange(cluster.n_nodes)
    measure = FragCache(mix, cluster.n_nodes)  # per-node fragmentation, refreshed where a pod lands
    measure.refresh(all_nodes, state.gpu_free, state.cpu_free, model, state.version)
    frag = float(measure.frag.sum())
    cap = float(cluster.gpu_cap.sum())
    n = len(seq)
    out = {k: np.empty(n) for k in ("x", "unalloc", "frag", "ratio")}
    failed = np.zeros(n, dtype=bool)
    node_of = np.full(n, -1, dtype=np.int64)
    mask = np.zeros(n, dtype=np.int64)
    demand = inp.k * inp.p
    requested = np.cumsum(demand)
    allocated = 0.0
    for i in range(n):
        ok = state.fits_one(inp, i)
        if ok.any():
            nodes = all_nodes[ok]
            score = policy.score(i, nodes, state)
            best = np.flatnonzero(score == score.min())
            nd = int(nodes[best[int(rng.integers(len(best)))] if len(best) > 1 else best[0]])
            gp = policy.gpus(i, nd, state)
            gp = best_fit_gpus(state, nd, int(inp.k[i]), inp.p[i]) if gp is None else np.asarray(gp, np.int64)
            if len(gp) != inp.k[i] or np.any(state.gpu_free[nd, gp] < inp.p[i]):
                raise HybridschedError(f"policy {policy.name!r} chose GPUs {gp.tolist()} of node {nd} that cannot "
                                       f"hold pod {seq.name[i]!r}")
            state.take(nd, gp, inp.cpu[i], inp.mem[i], inp.p[i], -1.0)
            node_of[i], mask[i] = nd, int(np.sum(1 << gp))
            allocated += demand[i]
            before = measure.frag[nd]
            measure.refresh(all_nodes[nd:nd + 1], state.gpu_free, state.cpu_free, model, state.version)
            frag += measure.frag[nd] - before
        else:
            failed[i] = True
        idle = cap - allocated
        f = frag / mix.total
        out["x"][i] = requested[i] / cap * 100.0
        out["unalloc"][i] = idle / cap * 100.0
        out["frag"][i] = f / cap * 100.0
        out["ratio"][i] = f / idle * 100.0 if idle > 0 else 0.0
    return Curve(out["x"], out["unalloc"], out["frag"], out["ratio"], failed, node_of, mask)


def run_rng(seed: int, policy_name: str) -> np.random.Generator:
    """The tie-breaking generator of (seed, policy): independent of which other policies run."""
    return np.random.default_rng([int(seed), zlib.crc32(policy_name.encode())])


def workload_rng(seed: int) -> np.random.Generator:
    """The generator of a seed's shuffle and inflation (shared by every policy: paired runs)."""
    return np.random.default_rng([int(seed), 0x5EED])
