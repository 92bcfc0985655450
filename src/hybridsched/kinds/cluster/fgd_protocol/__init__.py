"""The FGD paper's fragmentation experiment (Weng et al., "Beware of Fragmentation", USENIX ATC
2023) on the cluster kind: every policy x every seed of the protocol in ``protocol.py``,
summarised as in ``report.py``.  Entry point: :func:`run_experiment` (the ``fgd_atc23`` stage).

Settings (``conf/fgd/default.yaml``): ``rules`` (``k8s_simulator``: the rules of the paper's own
Go simulator, ``k8s_rules.py``; ``exact``: our exact-score protocol, ``protocol.py`` with the
classes of ``policies.py``), ``pod_list``, ``node_list``, ``seeds``, ``inflation``, ``coverage``,
``zero_cpu_milli``, ``policies`` (name -> ``_target_`` spec; rules ``exact``), ``k8s_policies``
(name -> the Go simulator's plugin; rules ``k8s_simulator``), ``ours`` (rules of ``k8s_rules.OURS``
switched back to ours: the sensitivity study), ``fgd_policy`` and ``packing`` (the headline's
comparison), ``report_x``, ``table_x``, ``headline_from_x``, ``figure_from_x``, ``workers``,
``name`` (output file stem).
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
from hybridsched.kinds.cluster.fgd_protocol import k8s_rules, report
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


# the setting that lists the policies each value of ``rules`` runs
ACTIVE = {"exact": "policies", "k8s_simulator": "k8s_policies"}


@dataclass
class FgdSettings:
    """The experiment's settings (see the module docstring); checked by :meth:`from_dict`."""

    pod_list: str
    node_list: str
    policies: dict[str, dict]
    rules: str = "k8s_simulator"
    k8s_policies: dict[str, str] = field(default_factory=lambda: {
        "random": "RandomScore", "dot_prod": "DotProductScore", "gpu_clustering": "GpuClusteringScore",
        "gpu_packing": "GpuPackingScore", "best_fit": "BestFitScore", "fgd": "FGDScore"})
    ours: list[str] = field(default_factory=list)
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
        s.k8s_policies = {str(k): str(v) for k, v in s.k8s_policies.items()}
        s.ours = [str(v) for v in s.ours]
        if s.rules not in ACTIVE:
            raise HybridschedError(f"fgd.rules: {s.rules!r} must be one of {sorted(ACTIVE)}")
        active = s.active_policies()
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
            (len(active) > 0, ACTIVE[s.rules], active, "non-empty"),
            (s.fgd_policy in active, "fgd_policy", s.fgd_policy, f"one of the policies {sorted(active)}"),
            (len(s.packing) > 0 and set(s.packing) <= set(active), "packing", s.packing,
             f"a non-empty subset of the policies {sorted(active)}"),
            (set(s.k8s_policies.values()) <= set(k8s_rules.PLUGINS), "k8s_policies", sorted(s.k8s_policies.values()),
             f"plugins among {sorted(k8s_rules.PLUGINS)}"),
            (set(s.ours) <= set(k8s_rules.OURS), "ours", s.ours, f"rules among {list(k8s_rules.OURS)}"),
        ]
        for ok, key, value, rule in checks:
            if not ok:
                raise HybridschedError(f"fgd.{key}: {value} must be {rule}")
        return s

    def active_policies(self) -> dict[str, Any]:
        """The policies the chosen rules run: name -> spec (exact) or plugin (k8s_simulator)."""
        return getattr(self, ACTIVE[self.rules])


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


def _job_k8s(plugin: str, name: str, seed: int, pods: PodTable, nodes: Any, typical: k8s_rules.Typical,
             inflation: float, n_buckets: int, ours: tuple[str, ...]) -> dict[str, Any]:
    """One (policy, seed) run under the Go simulator's rules (``k8s_rules``), bucketed as its
    analysis does (R13; ``ours`` may switch single rules back, see ``k8s_rules.OURS``)."""
    t0 = time.perf_counter()
    cap = float(nodes.n_gpu.sum() * MILLI)
    order = k8s_rules.arrival_order(pods, cap, inflation, workload_rng(seed))
    rank = k8s_rules.tie_order(nodes.name, k8s_rules.order_rng(seed))
    curve = k8s_rules.run_seed(plugin, pods, nodes, order, typical, rank, k8s_rules.draw_seed(seed, name), ours)
    return {"policy": name, "seed": seed, "pods": len(order), "failed": int(curve.failed.sum()),
            "failed_gpus": float((pods.num_gpu * pods.gpu_milli)[order][curve.failed].sum() / MILLI),
            "seconds": time.perf_counter() - t0, "buckets": report.bucket_means_rounded(curve, n_buckets)}


def _exact_jobs(s: FgdSettings, pods: PodTable, n_buckets: int) -> tuple[list[tuple], float, dict[str, Any]]:
    """rules ``exact``: our protocol (``protocol.py``) with the classes of ``policies.py``."""
    cluster = gpu_cluster(read_node_list(s.node_list))
    mix = typical_pods(pods.cpu_milli, pods.num_gpu, pods.gpu_milli, pods.gpu_spec, cluster.models, s.coverage)
    jobs = [(_job, (spec, name, seed, pods, cluster, mix, s.inflation, n_buckets))
            for name, spec in s.policies.items() for seed in s.seeds]
    return jobs, float(cluster.gpu_cap.sum() / MILLI), {
        "nodes": cluster.n_nodes, "typical_pods": len(mix),
        "typical_coverage": round(float(mix.count.sum() / mix.total), 4)}


def _k8s_jobs(s: FgdSettings, pods: PodTable, n_buckets: int) -> tuple[list[tuple], float, dict[str, Any]]:
    """rules ``k8s_simulator``: the Go simulator's rules (``k8s_rules.py``)."""
    k8s_rules.check_pods(pods)
    nodes = k8s_rules.gpu_nodes(read_node_list(s.node_list))
    typical = k8s_rules.typical_pods(pods, k8s_rules.models_of(nodes), s.coverage, "typical_weights" in s.ours)
    jobs = [(_job_k8s, (plugin, name, seed, pods, nodes, typical, s.inflation, n_buckets, tuple(s.ours)))
            for name, plugin in s.k8s_policies.items() for seed in s.seeds]
    return jobs, float(nodes.n_gpu.sum()), {"nodes": len(nodes), "typical_pods": len(typical.weight),
                                           "typical_coverage": round(typical.covered, 4), "ours": list(s.ours)}


RULES = {"exact": _exact_jobs, "k8s_simulator": _k8s_jobs}


def _call(fn, args):
    return fn(*args)


def check(settings: dict[str, Any]) -> FgdSettings:
    """What :func:`run_experiment` reads and refuses before its workers start, without running
    them (the pipeline's ``check`` stage): the settings, the pod and node lists, the typical
    pods, and each policy of ``rules: exact`` built once."""
    s = FgdSettings.from_dict(settings)
    pods = read_pod_requests(s.pod_list, s.zero_cpu_milli)
    RULES[s.rules](s, pods, 1)
    if s.rules == "exact":
        for spec in s.policies.values():
            instantiate(spec)
    return s


def run_experiment(settings: dict[str, Any], out_dir: str | Path) -> dict[str, Any]:
    """Run every policy on every seed and write, under ``out_dir`` (the metrics folder):
    ``<name>.json`` (the figures' points at ``report_x``), ``<name>_table.csv`` / ``.md`` (at
    ``table_x``), ``<name>_headline.json`` (FGD vs the best packing policy), and
    ``plots/<name>_{unallocated,frag}.png`` + ``plots/<name>_curves.csv`` (every 1 % bucket).
    Returns the headline and the run counts."""
    s = FgdSettings.from_dict(settings)
    t0 = time.perf_counter()
    pods = read_pod_requests(s.pod_list, s.zero_cpu_milli)
    n_buckets = int(np.floor(s.inflation * 100 + 1e-9)) + 1
    jobs, capacity, about = RULES[s.rules](s, pods, n_buckets)
    if s.workers == 1:
        results = [fn(*args) for fn, args in jobs]
    else:
        with ProcessPoolExecutor(max_workers=s.workers) as ex:
            results = list(ex.map(_call, *zip(*jobs, strict=True)))
    names = list(s.active_policies())
    bands = {name: report.band([r["buckets"] for r in results if r["policy"] == name]) for name in names}
    head = report.headline(bands, s.fgd_policy, s.packing, s.table_x, capacity, s.headline_from_x)
    runs = {name: {"pods_median": float(np.median([r["pods"] for r in results if r["policy"] == name])),
                   "failed_median": float(np.median([r["failed"] for r in results if r["policy"] == name])),
                   "failed_gpus_median": float(np.median([r["failed_gpus"] for r in results if r["policy"] == name])),
                   "seconds_total": round(sum(r["seconds"] for r in results if r["policy"] == name), 2)}
            for name in names}
    summary = {"pod_list": str(s.pod_list), "rules": s.rules, **about, "seeds": s.seeds,
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
