"""The FGD paper's fragmentation experiment (Weng et al., "Beware of Fragmentation", USENIX ATC
2023) on the cluster kind: every policy x every seed of the protocol in ``protocol.py``,
summarised as in ``report.py``.  Entry point: :func:`run_experiment` (the ``fgd_atc23`` stage).

Settings (``conf/fgd/default.yaml``): ``pod_list``, ``node_list``, ``seeds``, ``inflation``,
``coverage``, ``zero_cpu_milli``, ``policies`` (name -> ``_target_`` spec), ``fgd_policy`` and
``packing`` (the headline's comparison), ``report_x``, ``table_x``, ``headline_from_x``, ``figure_from_x``,
``workers``, ``name`` (output file stem).
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hybridsched.errors import HybridschedError
from hybridsched.io import without_timings, write_frame, write_json, write_text
from hybridsched.kinds.base import instantiate
from hybridsched.kinds.cluster.fgd_protocol import report
from hybridsched.kinds.cluster.fgd_protocol.protocol import (
    arrival_order,
    gpu_cluster,
    run_rng,
    run_seed,
    workload_rng,
)
from hybridsched.kinds.cluster.fragmentation import TaskMix, typical_pods
from hybridsched.kinds.cluster.nodes import NodeCluster
from hybridsched.kinds.cluster.trace import MILLI, PodTable, read_node_list, read_pod_requests


@dataclass
class FgdSettings:
    """The experiment's settings (see the module docstring); checked by :meth:`from_dict`."""

    pod_list: str
    node_list: str
    policies: dict[str, dict]
    seeds: list[int] = field(default_factory=lambda: list(range(10)))
    inflation: float = 1.3
    coverage: float = 0.95
    zero_cpu_milli: float = 100.0
    fgd_policy: str = "fgd"
    packing: list[str] = field(default_factory=lambda: ["dot_prod", "gpu_clustering", "gpu_packing", "best_fit"])
    report_x: list[int] = field(default_factory=lambda: list(range(0, 131, 5)))
    table_x: list[int] = field(default_factory=lambda: [80, 90, 95, 100, 110, 120, 130])
    headline_from_x: int = 80
    figure_from_x: int = 60
    workers: int = 2
    name: str = "fgd_atc23"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FgdSettings:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise HybridschedError(f"fgd: unknown setting(s) {unknown}; known: {sorted(known)}")
        missing = [k for k in ("pod_list", "node_list", "policies") if d.get(k) in (None, "", {})]
        if missing:
            raise HybridschedError(f"fgd.{missing[0]}: missing")
        s = cls(**d)
        s.seeds, s.report_x, s.table_x = ([int(v) for v in s.seeds], [int(v) for v in s.report_x],
                                          [int(v) for v in s.table_x])
        s.policies = {str(k): dict(v) for k, v in s.policies.items()}
        last = int(np.floor(s.inflation * 100 + 1e-9))
        xs = [*s.report_x, *s.table_x, s.headline_from_x, s.figure_from_x]
        checks = [
            (len(s.seeds) > 0 and len(set(s.seeds)) == len(s.seeds), "seeds", s.seeds,
             "a non-empty list of distinct seeds"),
            (s.inflation > 0, "inflation", s.inflation, "> 0"),
            (0 < s.coverage <= 1, "coverage", s.coverage, "in (0, 1]"),
            (s.zero_cpu_milli > 0, "zero_cpu_milli", s.zero_cpu_milli, "> 0"),
            (s.workers >= 1, "workers", s.workers, ">= 1"),
            (all(0 <= x <= last for x in xs), "report_x/table_x/headline_from_x/figure_from_x", sorted(set(xs)),
             f"within [0, {last}] (100 x inflation)"),
            (s.fgd_policy in s.policies, "fgd_policy", s.fgd_policy, f"one of the policies {sorted(s.policies)}"),
            (len(s.packing) > 0 and set(s.packing) <= set(s.policies), "packing", s.packing,
             f"a non-empty subset of the policies {sorted(s.policies)}"),
        ]
        for ok, key, value, rule in checks:
            if not ok:
                raise HybridschedError(f"fgd.{key}: {value} must be {rule}")
        return s


def _job(spec: dict, name: str, seed: int, pods: PodTable, cluster: NodeCluster, mix: TaskMix,
         inflation: float, n_buckets: int) -> dict[str, Any]:
    """One (policy, seed) run, bucketed (module level: runs in a worker process)."""
    t0 = time.perf_counter()
    policy = instantiate(spec)
    policy.name = name
    policy.fit(pods)  # the original list: FGD's typical pods
    order = arrival_order(pods, float(cluster.gpu_cap.sum()), inflation, workload_rng(seed))
    curve = run_seed(policy, pods, cluster, order, mix, run_rng(seed, name))
    return {"policy": name, "seed": seed, "pods": len(order), "failed": int(curve.failed.sum()),
            "failed_gpus": float((pods.num_gpu * pods.gpu_milli)[order][curve.failed].sum() / MILLI),
            "seconds": time.perf_counter() - t0, "buckets": report.bucket_means(curve, n_buckets)}


def run_experiment(settings: dict[str, Any], out_dir: str | Path) -> dict[str, Any]:
    """Run every policy on every seed and write, under ``out_dir`` (the metrics folder):
    ``<name>.json`` (the figures' points at ``report_x``), ``<name>_table.csv`` / ``.md`` (at
    ``table_x``), ``<name>_headline.json`` (FGD vs the best packing policy), and
    ``plots/<name>_{unallocated,frag}.png`` + ``plots/<name>_curves.csv`` (every 1 % bucket).
    Returns the headline and the run counts."""
    s = FgdSettings.from_dict(settings)
    t0 = time.perf_counter()
    pods = read_pod_requests(s.pod_list, s.zero_cpu_milli)
    cluster = gpu_cluster(read_node_list(s.node_list))
    mix = typical_pods(pods.cpu_milli, pods.num_gpu, pods.gpu_milli, pods.gpu_spec, cluster.models, s.coverage)
    n_buckets = int(np.floor(s.inflation * 100 + 1e-9)) + 1
    jobs = [(spec, name, seed, pods, cluster, mix, s.inflation, n_buckets)
            for name, spec in s.policies.items() for seed in s.seeds]
    if s.workers == 1:
        results = [_job(*j) for j in jobs]
    else:
        with ProcessPoolExecutor(max_workers=s.workers) as ex:
            results = list(ex.map(_job, *zip(*jobs, strict=True)))
    capacity = float(cluster.gpu_cap.sum() / MILLI)
    bands = {name: report.band([r["buckets"] for r in results if r["policy"] == name]) for name in s.policies}
    head = report.headline(bands, s.fgd_policy, s.packing, s.table_x, capacity, s.headline_from_x)
    runs = {name: {"pods_median": float(np.median([r["pods"] for r in results if r["policy"] == name])),
                   "failed_median": float(np.median([r["failed"] for r in results if r["policy"] == name])),
                   "failed_gpus_median": float(np.median([r["failed_gpus"] for r in results if r["policy"] == name])),
                   "seconds_total": round(sum(r["seconds"] for r in results if r["policy"] == name), 2)}
            for name in s.policies}
    summary = {"pod_list": str(s.pod_list), "nodes": cluster.n_nodes, "typical_pods": len(mix),
               "typical_coverage": round(float(mix.count.sum() / mix.total), 4), "seeds": s.seeds,
               "wall_seconds": round(time.perf_counter() - t0, 1), "workers": s.workers, "runs": runs, **head}
    out = Path(out_dir)
    tab = report.table(bands, s.table_x, capacity)
    write_json(out / f"{s.name}.json", report.metrics_json(bands, s.report_x))
    write_json(out / f"{s.name}_headline.json", without_timings({k: v for k, v in summary.items() if k != "wall_seconds"}))
    write_frame(out / f"{s.name}_table.csv", tab)
    write_text(out / f"{s.name}_table.md", report.markdown(tab))
    write_frame(out / "plots" / f"{s.name}_curves.csv", report.curves_frame(bands))
    report.save_figures(bands, out / "plots", s.name, f"{Path(s.pod_list).name}, {len(s.seeds)} seeds", s.figure_from_x)
    return summary
