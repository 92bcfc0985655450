"""Fixed node-cluster workloads and a hash of every compiled policy's schedule on them.

``python -m tests.cluster.golden_schedules`` prints the hashes as JSON; the reference hashes, from
the plain scans over every node (commit fbbdd13, no per-class feasibility index), are stored in
``tests/cluster/data/golden_schedules.json``, and ``test_golden_schedules.py`` checks that the
current code gives the same bytes."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from hybridsched.kinds.cluster import policies as P
from hybridsched.kinds.cluster.engine import simulate
from hybridsched.kinds.cluster.nodes import NodeCluster, fits_some_node, run_inputs
from hybridsched.kinds.cluster.speeds import speed_table
from hybridsched.kinds.cluster.trace import read_node_list, read_pod_trace

TRACES = Path("/work/shared/traces")
if not TRACES.is_dir():
    TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
ALIBABA = TRACES / "alibaba-gpu-v2023"
GAVEL = TRACES / "gavel" / "simulation_throughputs.json"

# (name, pods, node factor): node factor scales the bench's 16 nodes per 8,152 pods; 0.35 is a
# loaded cluster where the queue matters, 1.0 the bench's lightly loaded one, 25 a wide one (~300 nodes)
WORKLOADS = (("light", 6000, 1.0), ("loaded", 6000, 0.35), ("wide", 6000, 25.0))
POLICIES = {"first_fit": P.NodePolicy, "round_robin": P.RoundRobin, "random": lambda: P.Random(0),
            "greedy": P.Greedy, "best_fit": P.BestFit, "fgd": P.FragmentationGradientDescent,
            "fgd_typical": lambda: P.FragmentationGradientDescent(0.95),
            "eft": P.EarliestFinishTime, "oracle": P.Oracle}


def _resample(pods, nodes, n: int, n_base_nodes: int, seed: int):
    """``benchmarks.bench_cluster.resample`` as of fbbdd13, copied so that the fixed workloads do
    not move when the benchmark does: ``n`` pods drawn with replacement, arrivals from the
    trace's gaps, ``n_base_nodes`` nodes per 8,152 pods."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(pods), n, replace=True))
    out = pods.subset(rows)
    gaps = np.diff(pods.arrival, prepend=pods.arrival[0])
    out.arrival = np.cumsum(rng.choice(gaps, n, replace=True))
    out.task_id = np.arange(n, dtype=np.int64)
    n_nodes = max(n_base_nodes, int(round(n_base_nodes * n / len(pods))))
    sample = nodes.subset(rng.choice(len(nodes), n_nodes, replace=True))
    sample.name = np.array([f"{s}#{j}" for j, s in enumerate(sample.name)], dtype=object)
    keep = fits_some_node(out, sample)
    return out.subset(np.flatnonzero(keep)), sample


def workload(n: int, node_factor: float, seed: int = 0):
    """``n`` pods resampled from the Alibaba trace, as benchmarks.bench_cluster does, on
    ``node_factor`` times its node count (16 nodes per 8,152 pods)."""
    pods, _ = read_pod_trace(ALIBABA / "openb_pod_list_default.csv", 3.0)
    nodes = read_node_list(ALIBABA / "openb_node_list_all_node.csv")
    test, sample = _resample(pods, nodes, n, max(4, int(round(16 * node_factor))), seed)
    models = sorted({str(m) for m in sample.model if m != ""})
    cluster = NodeCluster.build(sample, speed_table(GAVEL, models, "G2"))
    return pods, test, cluster


def schedule_hash(trace) -> str:
    """sha256 of the schedule's bytes: start, end, node and GPU mask per task."""
    h = hashlib.sha256()
    for a in (trace.start, trace.end, trace.node, trace.gpu_mask):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def workload_hash(inp, cluster) -> str:
    """sha256 of what the schedule depends on (so a mismatch tells a changed workload from a
    changed schedule)."""
    h = hashlib.sha256()
    for a in (inp.arrival, inp.cpu, inp.mem, inp.k, inp.p, inp.allowed, inp.run_time, cluster.node_model,
              cluster.gpu_cap, cluster.nodes.cpu_milli, cluster.nodes.memory_mib):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def hashes() -> dict[str, dict[str, str]]:
    out = {}
    for wname, n, factor in WORKLOADS:
        train, test, cluster = workload(n, factor)
        inp = run_inputs(test, cluster)
        out[wname] = {"_workload": workload_hash(inp, cluster)}
        for pname, make in POLICIES.items():
            pol = make()
            pol.name = pname
            pol.fit(train)
            out[wname][pname] = schedule_hash(simulate(inp, cluster, pol))
    return out


if __name__ == "__main__":
    json.dump(hashes(), sys.stdout, indent=1, sort_keys=True)
    print()
