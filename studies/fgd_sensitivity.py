"""Sensitivity of the FGD paper's comparison to the Go simulator's rules (docs/fgd-atc23.md).

Starting from ``fgd.rules: k8s_simulator`` (``fgd_protocol/k8s_rules.py``), one rule at a time is
switched back to ours (``k8s_rules.OURS``: tie order, integer scores, CPU-only pods in
packing / clustering, GpuClustering's idle-node band, typical-pod weights, CPU-only typical pods
in the measure) and the x bucketing to ours (floor instead of round; reporting only, from the
base runs).  Each variant reruns only the policies the rule touches; the others keep the base
numbers.  Every pod list, 10 seeds, median unallocated GPU % at x = 100 and 130.

Run: ``python -m studies.fgd_sensitivity [--seeds 10] [--workers 2] [--lists default gpushare40 multigpu20]``;
writes ``studies-out/fgd_sensitivity.json`` and ``studies-out/fgd_sensitivity.md`` (git-ignored; ``--out`` to change
the folder).
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import yaml

from hybridsched.kinds.cluster.fgd_protocol import k8s_rules, report
from hybridsched.kinds.cluster.fgd_protocol.protocol import workload_rng
from hybridsched.kinds.cluster.trace import MILLI, read_node_list, read_pod_requests

POLICIES = {"random": "RandomScore", "dot_prod": "DotProductScore", "gpu_clustering": "GpuClusteringScore",
            "gpu_packing": "GpuPackingScore", "best_fit": "BestFitScore", "fgd": "FGDScore"}
# the policies each rule of ours can change (the others keep the base run's numbers)
TOUCHES = {"tie_order": ["dot_prod", "gpu_clustering", "gpu_packing", "best_fit", "fgd"],
           "integer_scores": ["dot_prod", "gpu_clustering", "gpu_packing", "best_fit", "fgd"],
           "cpu_pods": ["gpu_clustering", "gpu_packing"], "idle_node": ["gpu_clustering"],
           "typical_weights": ["fgd"], "cpu_typical": ["fgd"]}
XS = (100, 130)
TRACES = Path("/work/shared/traces/alibaba-gpu-v2023")


_CACHE: dict = {}  # per worker process: the parsed pod and node lists


def _inputs(pod_path: str, node_path: str):
    if (pod_path, node_path) not in _CACHE:
        _CACHE[(pod_path, node_path)] = (read_pod_requests(pod_path), k8s_rules.gpu_nodes(read_node_list(node_path)))
    return _CACHE[(pod_path, node_path)]


def _run(list_name: str, pod_path: str, node_path: str, variant: str, name: str, seed: int) -> dict:
    pods, nodes = _inputs(pod_path, node_path)
    ours = () if variant in ("base",) else (variant,)
    typical = k8s_rules.typical_pods(pods, k8s_rules.models_of(nodes), 0.95, "typical_weights" in ours)
    cap = float(nodes.n_gpu.sum() * MILLI)
    order = k8s_rules.arrival_order(pods, cap, 1.3, workload_rng(seed))
    rank = k8s_rules.tie_order(nodes.name, k8s_rules.order_rng(seed))
    curve = k8s_rules.run_seed(POLICIES[name], pods, nodes, order, typical, rank, k8s_rules.draw_seed(seed, name), ours)
    out = {"list": list_name, "variant": variant, "policy": name, "seed": seed,
           "round": report.bucket_means_rounded(curve, 131)["unallocated_gpu_pct"][list(XS)].tolist()}
    if variant == "base":
        out["floor"] = report.bucket_means(curve, 131)["unallocated_gpu_pct"][list(XS)].tolist()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--lists", nargs="+", default=["default", "gpushare40", "multigpu20"])
    ap.add_argument("--traces", default=str(TRACES))
    ap.add_argument("--out", default="studies-out")
    args = ap.parse_args()
    node_path = str(Path(args.traces) / "openb_node_list_all_node.csv")
    jobs = []
    for lst in args.lists:
        pod_path = str(Path(args.traces) / f"openb_pod_list_{lst}.csv")
        for seed in range(args.seeds):
            jobs += [(lst, pod_path, node_path, "base", p, seed) for p in POLICIES]
            jobs += [(lst, pod_path, node_path, v, p, seed) for v, ps in TOUCHES.items() for p in ps]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as ex:
        results = []
        for r in ex.map(_run, *zip(*jobs, strict=True), chunksize=8):
            results.append(r)
            if len(results) % 50 == 0:
                print(f"fgd_sensitivity: {len(results)}/{len(jobs)} runs, {time.perf_counter() - t0:.0f} s", flush=True)
    wall = time.perf_counter() - t0
    table: dict = {}
    for lst in args.lists:
        base = {p: [r for r in results if r["list"] == lst and r["variant"] == "base" and r["policy"] == p]
                for p in POLICIES}
        rows = {"k8s_simulator": {p: np.median([r["round"] for r in base[p]], axis=0).tolist() for p in POLICIES},
                "x_floor": {p: np.median([r["floor"] for r in base[p]], axis=0).tolist() for p in POLICIES}}
        for v, ps in TOUCHES.items():
            rows[v] = {p: (np.median([r["round"] for r in results if r["list"] == lst and r["variant"] == v
                                      and r["policy"] == p], axis=0).tolist() if p in ps else rows["k8s_simulator"][p])
                       for p in POLICIES}
        table[lst] = {v: {p: {str(x): round(val[i], 2) for i, x in enumerate(XS)} for p, val in row.items()}
                      for v, row in rows.items()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fgd_sensitivity.json").write_text(json.dumps(
        {"seeds": args.seeds, "x": list(XS), "touches": TOUCHES, "table": table}, indent=1) + "\n")
    lines = []
    for lst, rows in table.items():
        lines += [f"**{lst}**: median unallocated GPU % over {args.seeds} seeds, x = 100 / 130", "",
                  "| rules | " + " | ".join(POLICIES) + " |", "|---" * (len(POLICIES) + 1) + "|"]
        for v, row in rows.items():
            lines.append(f"| {v if v != 'k8s_simulator' else '**k8s_simulator**'} | "
                         + " | ".join(f"{row[p]['100']:.2f} / {row[p]['130']:.2f}" for p in POLICIES) + " |")
        lines.append("")
    (out / "fgd_sensitivity.md").write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"fgd_sensitivity: {len(jobs)} runs in {wall:.0f} s on {args.workers} workers")
    print(yaml.safe_dump({"wall_s": round(wall, 1)}))


if __name__ == "__main__":
    main()
