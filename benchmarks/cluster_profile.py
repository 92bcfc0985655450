"""Where the node-cluster simulator's time goes per policy at 10^6 pods.

Run: `python -m benchmarks.cluster_profile [--pods 1000000] [--policies ...] [--reps 1]`.  The
workload and cluster are ``bench_cluster``'s (``resample`` of ``workload=alibaba_gpu_2023``).
Per policy, CPU seconds (``time.process_time``, so other jobs on a shared machine count less) of
``simulate`` whole and of its phases, each timed on its own in this one process:

* ``checks``: ``fits_any_node`` and the duration check;
* ``prepare``: ``policy.prepare`` (estimates, FGD's task mix);
* ``kernel data``: ``kernel_for`` (the class index's arrays, FGD's shape table and memo);
* ``demand classes``: ``kernels.demand_classes`` (run once more by ``_simulate_compiled``);
* ``loop``: ``kernels.run_loop`` alone, on fresh state;
* ``first-fit loop``: the same loop with first fit (``NodePolicy``: one node-index descent per
  arrival, no choice), the floor every policy pays for events, queue and node index.

``loop - first-fit loop`` is what the policy's choice costs per pod (for the indexed policies:
the class trees' upkeep and queries).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.bench_cluster import policies, resample
from benchmarks.common import project_path, settings
from hybridsched.devices import Cluster
from hybridsched.kinds.cluster import policies as P
from hybridsched.kinds.cluster.engine import simulate
from hybridsched.kinds.cluster.kernel_choice import kernel_for
from hybridsched.kinds.cluster.kernels import demand_classes, run_loop
from hybridsched.kinds.cluster.nodes import NodeCluster, fits_any_node, run_inputs
from hybridsched.kinds.cluster.speeds import speed_table
from hybridsched.kinds.cluster.state import ClusterState
from hybridsched.kinds.cluster.trace import read_node_list, read_pod_trace


def _cpu(fn, reps: int) -> float:
    """Least CPU seconds of ``reps`` calls."""
    out = []
    for _ in range(reps):
        c0 = time.process_time()
        fn()
        out.append(time.process_time() - c0)
    return min(out)


def _loop(pol, inp, cluster) -> None:
    """``_simulate_compiled``'s call of ``run_loop`` on fresh state (the kernel data built here too:
    the class trees are filled by the run)."""
    pol.prepare(inp, cluster)
    fast = kernel_for(pol)
    key = pol.queue_key()
    key = inp.arrival if key is None else np.asarray(key, dtype=np.float64)
    allowed = np.ascontiguousarray(inp.allowed)
    demand, n_demand = demand_classes(inp.cpu, inp.mem, inp.k, inp.p, allowed)
    state = ClusterState(cluster)
    n = len(inp)
    start, end = np.full(n, np.nan), np.full(n, np.nan)
    node_of, mask = np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    rt = np.ascontiguousarray(inp.run_time)
    gcap, cmil, hg = cluster.gpu_cap.astype(np.float64), cluster.nodes.cpu_milli.astype(np.float64), cluster.nodes.n_gpu > 0
    c0 = time.process_time()
    run_loop(fast.choose, fast.mode, fast.data, fast.ints, inp.arrival, inp.cpu, inp.mem, inp.k, inp.p, allowed,
             cluster.node_model, key, rt, state.cpu_free, state.mem_free, state.gpu_free, gcap, cmil, hg,
             state.version, start, end, node_of, mask, demand, n_demand)
    _loop.seconds = time.process_time() - c0  # type: ignore[attr-defined]


def profile(n: int, names: list[str], reps: int) -> list[dict]:
    cfg = settings(["workload=alibaba_gpu_2023"])
    w, gavel = cfg["workload"], project_path(cfg["nodes"]["gavel_path"])
    pods, _ = read_pod_trace(project_path(w["path"]), float(w["time_compression"]))
    all_nodes = read_node_list(project_path(w["nodes"]["path"]))
    test, nodes = resample(pods, all_nodes, n, seed=0)
    cluster = NodeCluster.build(nodes, speed_table(gavel, sorted({str(m) for m in nodes.model if m != ""}), "G2"),
                                Cluster())
    inp = run_inputs(test, cluster)
    warm, warm_nodes = resample(pods, all_nodes, 300, seed=1)
    warm_cluster = NodeCluster.build(warm_nodes, speed_table(gavel, sorted({str(m) for m in warm_nodes.model if m}),
                                                              "G2"))
    pols = {"first_fit": P.NodePolicy(), **policies()}
    for name, pol in pols.items():  # compile outside the timings
        if name != "first_fit" and name not in names:
            continue
        pol.fit(pods)
        simulate(run_inputs(warm, warm_cluster), warm_cluster, pol)
    allowed = np.ascontiguousarray(inp.allowed)
    ff = pols["first_fit"]

    def first_fit_loop():
        _loop(ff, inp, cluster)
        return _loop.seconds  # type: ignore[attr-defined]

    floor = min(first_fit_loop() for _ in range(reps))
    rows = []
    for name in names:
        pol = pols[name]
        pol.fit(pods)

        def loop_only(pol=pol):
            _loop(pol, inp, cluster)
            return _loop.seconds  # type: ignore[attr-defined]

        whole = _cpu(lambda pol=pol: simulate(inp, cluster, pol), reps)
        checks = _cpu(lambda: (fits_any_node(inp, cluster), np.isfinite(inp.tasks.duration).all()), reps)
        prep = _cpu(lambda pol=pol: pol.prepare(inp, cluster), reps)
        pol.prepare(inp, cluster)
        kdata = _cpu(lambda pol=pol: kernel_for(pol), reps)
        dem = _cpu(lambda: demand_classes(inp.cpu, inp.mem, inp.k, inp.p, allowed), reps)
        loop = min(loop_only() for _ in range(reps))
        us = 1e6 / len(inp)
        rows.append({"policy": name, "pods": len(inp), "nodes": cluster.n_nodes,
                     "simulate_us": round(whole * us, 2), "checks_us": round(checks * us, 2),
                     "prepare_us": round(prep * us, 2), "kernel_data_us": round(kdata * us, 2),
                     "demand_classes_us": round(dem * us, 2), "loop_us": round(loop * us, 2),
                     "first_fit_loop_us": round(floor * us, 2), "choice_us": round((loop - floor) * us, 2),
                     "cpu_pods_per_s": round(len(inp) / whole)})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=1_000_000)
    ap.add_argument("--policies", nargs="+", default=list(policies()))
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args()
    import pandas as pd

    rows = profile(args.pods, args.policies, args.reps)
    print("CPU µs per pod (time.process_time):")
    print(pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    main()
