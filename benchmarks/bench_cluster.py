"""Node-cluster simulator speed: pods/s per policy at 10^4, 10^5, 10^6 pods, peak memory, linearity.

Run: `python -m benchmarks.bench_cluster [--sizes 10000 100000 1000000] [--max-seconds 120] [--smoke]
[OVERRIDE ...]`.  Workload: the pod and node lists and time compression of ``workload=alibaba_gpu_2023``
(conf/, composed by Hydra: ``paths.traces`` and $HYBRIDSCHED_TRACES apply), resampled: pods drawn with replacement (each pod's fields
together, so their joint distribution is the trace's) with arrivals from the trace's own
inter-arrival gaps, onto nodes drawn with replacement from the trace's node list, as many per
pod as the configured run has (16 nodes for the trace's pods).  A policy whose projected time
at the next size exceeds --max-seconds is skipped there and reported as not measured.
Targets (2 cores): >= 200,000 pods/s for the FIFO policies (round_robin, random, greedy,
best_fit) and >= 50,000 pods/s for fgd, eft and oracle at 10^6 pods (wall time); time per pod flat in the pod
count (the µs/pod ratio of the largest to the smallest size is printed, near-linear <= 1.5x).
CPU seconds are reported too (`cpu_pods_per_s`): on a shared machine wall time counts other jobs.
"""

from __future__ import annotations

import argparse
import time
import numpy as np

from benchmarks.common import measure, parse, project_path, report, settings
from hybridsched.kinds.cluster import policies as P
from hybridsched.kinds.cluster.engine import simulate
from hybridsched.kinds.cluster.nodes import NodeCluster, fits_some_node, run_inputs
from hybridsched.kinds.cluster.speeds import speed_table
from hybridsched.kinds.cluster.trace import PodTable
from hybridsched.kinds.cluster.trace import NodeTable, read_node_list, read_pod_trace
from hybridsched.devices import Cluster

TARGET_FIFO = 200_000
TARGET_FGD = 50_000
FIFO = ("round_robin", "random", "greedy", "best_fit")
SLOW = ("fgd", "eft", "oracle")  # the 50,000 pods/s target
BASE_NODES = 16  # conf/workload/alibaba_gpu_2023.yaml: nodes.sample.n_nodes for the whole pod list


def resample(pods: PodTable, nodes: NodeTable, n: int, seed: int) -> tuple[PodTable, NodeTable]:
    """``n`` pods and a proportional node count, drawn from the trace's own distributions."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(pods), n, replace=True))
    out = pods.subset(rows)
    gaps = np.diff(pods.arrival, prepend=pods.arrival[0])
    out.arrival = np.cumsum(rng.choice(gaps, n, replace=True))
    out.task_id = np.arange(n, dtype=np.int64)
    n_nodes = max(BASE_NODES, int(round(BASE_NODES * n / len(pods))))
    sample = nodes.subset(rng.choice(len(nodes), n_nodes, replace=True))
    sample.name = np.array([f"{s}#{j}" for j, s in enumerate(sample.name)], dtype=object)
    keep = fits_some_node(out, sample)
    return out.subset(np.flatnonzero(keep)), sample


def _projected_seconds(runs: list[tuple[int, float]], n: int) -> float:
    """Time at ``n`` pods extrapolated from the measured runs with their own growth exponent
    (at least linear: the node count grows with the pod count, so the cost is superlinear)."""
    if not runs:
        return 0.0
    (n1, t1), (n2, t2) = (runs[-2] if len(runs) > 1 else runs[-1]), runs[-1]
    e = max(1.0, float(np.log(t2 / t1) / np.log(n2 / n1))) if n2 > n1 else 1.0
    return t2 * (n / n2) ** e


def _growth(rows: list[dict], small: int, big: int) -> dict[str, float | None]:
    """Per policy, wall µs per pod at the largest size over that at the smallest (None: not measured)."""
    us = {(r["policy"], r["pods"] >= 0.9 * big): r["us_per_pod"] for r in rows
          if r["pods"] >= 0.9 * big or r["pods"] <= 1.1 * small}
    names = dict.fromkeys(r["policy"] for r in rows)
    return {p: (us[(p, True)] / us[(p, False)] if us.get((p, True)) and us.get((p, False)) else None)
            for p in names}


def policies() -> dict[str, P.NodePolicy]:
    return {"round_robin": P.RoundRobin(), "random": P.Random(0), "greedy": P.Greedy(), "best_fit": P.BestFit(),
            "fgd": P.FragmentationGradientDescent(), "eft": P.EarliestFinishTime(), "oracle": P.Oracle()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--max-seconds", type=float, default=120.0, help="skip a run projected to take longer")
    ap.add_argument("--policies", nargs="+", default=list(policies()))
    args = parse(ap)
    cfg = settings(["workload=alibaba_gpu_2023", *args.overrides])
    w, gavel = cfg["workload"], project_path(cfg["nodes"]["gavel_path"])
    if args.smoke:
        args.sizes, args.policies = [500, 1000], ["greedy", "fgd"]
    pods, _ = read_pod_trace(project_path(w["path"]), float(w["time_compression"]))
    all_nodes = read_node_list(project_path(w["nodes"]["path"]))
    rows, seen = [], {}  # policy -> [(pods, seconds), ...] measured so far
    warm, warm_nodes = resample(pods, all_nodes, 300, seed=1)
    warm_cluster = NodeCluster.build(warm_nodes, speed_table(gavel,
                                                              sorted({str(m) for m in warm_nodes.model if m}), "G2"))
    for name, pol in policies().items():  # compile each timed policy's loop outside the timings
        if name not in args.policies:
            continue
        pol.fit(pods)
        simulate(run_inputs(warm, warm_cluster), warm_cluster, pol)
    for n in args.sizes:
        test, nodes = resample(pods, all_nodes, n, seed=0)
        models = sorted({str(m) for m in nodes.model if m != ""})
        cluster = NodeCluster.build(nodes, speed_table(gavel, models, "G2"),
                                    Cluster())
        inp = run_inputs(test, cluster)
        for name, pol in policies().items():
            if name not in args.policies:
                continue
            guess = _projected_seconds(seen.get(name, []), len(test))
            if guess > args.max_seconds:
                rows.append({"policy": name, "pods": len(test), "nodes": len(nodes), "seconds": None,
                             "pods_per_s": None, "us_per_pod": None, "cpu_pods_per_s": None, "peak_mb": None,
                             "note": f"skipped: projected {guess:.0f} s"})
                print(rows[-1], flush=True)
                continue
            pol.name = name
            pol.fit(pods)
            c0 = time.process_time()  # CPU seconds too: on a shared machine wall time counts the others' work
            dt, peak = measure(lambda pol=pol: simulate(inp, cluster, pol))
            cpu = time.process_time() - c0
            seen.setdefault(name, []).append((len(test), dt))
            rows.append({"policy": name, "pods": len(test), "nodes": len(nodes), "seconds": round(dt, 3),
                         "pods_per_s": round(len(test) / dt), "us_per_pod": round(dt / len(test) * 1e6, 2),
                         "cpu_pods_per_s": round(len(test) / cpu), "peak_mb": round(peak, 1), "note": ""})
            print(rows[-1], flush=True)
    big, small = max(args.sizes), min(args.sizes)
    at_big = {r["policy"]: r["pods_per_s"] for r in rows if r["pods"] >= 0.9 * big}
    fifo_ok = all((at_big.get(p) or 0) >= TARGET_FIFO for p in FIFO if p in args.policies)
    fgd_ok = all((at_big.get(p) or 0) >= TARGET_FGD for p in SLOW if p in args.policies)
    growth = _growth(rows, small, big)
    report("bench_cluster", rows, {"target_fifo_pods_per_s": TARGET_FIFO, "target_fgd_pods_per_s": TARGET_FGD,
                                   "fifo_target_met": fifo_ok, "fgd_target_met": fgd_ok,
                                   "us_per_pod_ratio_largest_vs_smallest": growth})
    for name, ratio in growth.items():
        verdict = "not measured" if ratio is None else f"{ratio:.2f}x ({'near-linear' if ratio <= 1.5 else 'NOT linear'})"
        print(f"{name}: us/pod at {big:,} vs {small:,} pods: {verdict}")
    fifo = ", ".join(f"{p} {at_big.get(p) or 'not measured'}" for p in FIFO if p in args.policies)
    slow = ", ".join(f"{p} {at_big.get(p) or 'not measured'}" for p in SLOW if p in args.policies)
    print(f"FIFO target (>= {TARGET_FIFO:,} pods/s at {big:,}): {'met' if fifo_ok else 'MISSED'} ({fifo}); "
          f"fgd/eft/oracle target (>= {TARGET_FGD:,} pods/s): {'met' if fgd_ok else 'MISSED'} ({slow})")


if __name__ == "__main__":
    main()
