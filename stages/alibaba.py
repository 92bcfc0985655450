"""The stages' variants for a node-cluster workload (``workload.kind: alibaba``).

Each existing stage calls the matching function here when ``is_alibaba(cfg)``; the work is
in ``hybridsched.nodesim`` and ``hybridsched.learn``.  They write the same declared outputs as
the synthetic variants (same file names), so dvc.yaml needs no second pipeline.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig

from hybridsched.kinds.machine.devices import Cluster
from hybridsched.errors import HybridschedError
from hybridsched.io import atomic_dir, write_frame, write_json
from hybridsched.kinds.cluster import workload as P
from stages.common import as_dict, multirun_dir, track, write_importance_report


def is_alibaba(cfg: DictConfig) -> bool:
    """The workload runs on the node cluster (``workload.kind: alibaba``)."""
    return P.is_node_workload(as_dict(cfg.workload))


def generate(cfg: DictConfig) -> dict[str, int]:
    """Import the trace: data/workload/{train,test,nodes}.parquet and metrics/import_report.json."""
    report = P.import_workload(as_dict(cfg.workload), cfg.paths.workload_dir)
    write_json(Path(cfg.paths.metrics_dir) / "import_report.json", report)
    dropped = ", ".join(f"{k} {v}" for k, v in report["dropped"].items() if v) or "none"
    print(f"generate: imported {report['rows_kept']} of {report['rows_read']} pods from {report['path']} "
          f"(dropped: {dropped}); {report['nodes']['nodes']} nodes, {report['nodes']['gpus']} GPUs")
    return {"train": report["split"]["train"], "test": report["split"]["test"]}


def validate(cfg: DictConfig) -> dict[str, Any]:
    """The pod-table expectation suite on both splits (see nodesim/validation.py)."""
    from hybridsched.errors import DataValidationError
    from hybridsched.kinds.cluster.validation import validate_pod_files
    from hybridsched.kinds.machine.validation import failure_summary

    wd = Path(cfg.paths.workload_dir)
    report = validate_pod_files({s: wd / f"{s}.parquet" for s in P.SPLITS}, P.read_nodes(wd))
    out = Path(cfg.paths.metrics_dir) / "validation.json"
    write_json(out, report)
    if not report["success"]:
        raise DataValidationError(f"{failure_summary(report)}\n  details: {out}")
    return report


def train_rf(cfg: DictConfig) -> dict:
    """The pod duration RandomForest: models/rf, metrics/train_rf.json, importance csv + png."""
    from hybridsched.kinds.cluster.runtime_model import save_pod_runtime, train_pod_runtime

    rf_cfg = as_dict(cfg.rf)
    train = P.read_split(cfg.paths.workload_dir, "train")
    model, metrics = train_pod_runtime(train, rf_cfg)
    save_pod_runtime(model, rf_cfg["model_dir"], {"workload": cfg.workload.name, "metrics": metrics})
    files = write_importance_report(Path(cfg.paths.metrics_dir), metrics,
                                    "pod duration RandomForest: permutation importance")
    track("train_rf", cfg, metrics, files)
    return metrics


def train_dqn(cfg: DictConfig) -> dict:
    """The node DQN: models/dqn, metrics/train_dqn.json, metrics/plots/train_dqn.csv."""
    from hybridsched.kinds.cluster.dqn_train import save_node_dqn, train_node_dqn

    wd = cfg.paths.workload_dir
    cluster = P.build_cluster(P.read_nodes(wd), as_dict(cfg.nodesim), as_dict(cfg.cluster))
    settings = as_dict(cfg.nodesim.dqn)
    policy, metrics, history = train_node_dqn(P.read_split(wd, "train"), cluster, settings)
    save_node_dqn(cfg.dqn.model_dir, policy, settings, {"workload": cfg.workload.name})
    out = Path(cfg.paths.metrics_dir)
    write_json(out / "train_dqn.json", metrics)
    write_frame(out / "plots" / "train_dqn.csv", pd.DataFrame(history).drop(columns="actions").round(6))
    track("train_dqn", cfg, metrics, [out / "train_dqn.json", out / "plots" / "train_dqn.csv"])
    return metrics


def build_node_policies(cfg: DictConfig) -> dict:
    """Name -> node policy: the ``policy`` group choice if set (multirun), else ``nodesim.policies``."""
    import hydra
    from hydra.core.hydra_config import HydraConfig

    specs = cfg.nodesim.policy
    if cfg.get("policy") is not None:
        names = [HydraConfig.get().runtime.choices.get("policy", "policy")]
    else:
        names = list(cfg.nodesim.policies)
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise HybridschedError(f"nodesim.policies: unknown node policy name(s) {unknown}; known: {sorted(specs)}")
    return {n: hydra.utils.instantiate(specs[n]) for n in names}


def simulate(cfg: DictConfig) -> pd.DataFrame:
    """Traces of every node policy on the test split, and the lower bound; returns the table."""
    from hybridsched.kinds.cluster.bounds import lower_bound
    from hybridsched.kinds.cluster.nodes import run_inputs

    if multirun_dir() is not None:  # the sweep may change the workload: import in memory
        train, test, nodes, _ = P.load_workload(as_dict(cfg.workload))
    else:
        wd = cfg.paths.workload_dir
        train, test, nodes = P.read_split(wd, "train"), P.read_split(wd, "test"), P.read_nodes(wd)
    cluster = P.build_cluster(nodes, as_dict(cfg.nodesim), as_dict(cfg.cluster))
    bound = asdict(lower_bound(run_inputs(test, cluster), cluster))
    traces = P.run_policies(train, test, cluster, build_node_policies(cfg))
    with atomic_dir(cfg.paths.traces_dir) as tmp:
        for name, tr in traces.items():
            write_frame(tmp / f"{name}.parquet", tr)
            print(f"simulate: {name:<16} mean JCT {(tr['end'] - tr['arrival']).mean():10.1f} s")
        write_json(tmp / "lower_bound.json", bound)
    table = P.compare(traces, test, nodes, cluster.power, bound)
    track("simulate", cfg, {"lower_bound": bound, **table[["mean_latency", "p95_latency", "energy_j"]].to_dict(orient="index")})
    return table.assign(workload=cfg.workload.name)


def evaluate(cfg: DictConfig) -> pd.DataFrame:
    """metrics/summary.json, metrics/policies.csv, the plot tables and PNGs."""
    import json

    from hybridsched.evaluation import write_report

    td, wd = Path(cfg.paths.traces_dir), cfg.paths.workload_dir
    traces = {p.stem: pd.read_parquet(p) for p in sorted(td.glob("*.parquet"))}
    if not traces:
        raise HybridschedError(f"{td}: no traces (run the simulate stage first)")
    bound = json.loads((td / "lower_bound.json").read_text())
    test, nodes = P.read_split(wd, "test"), P.read_nodes(wd)
    table = P.compare(traces, test, nodes, Cluster.from_dict(as_dict(cfg.cluster)), bound)
    out = Path(cfg.paths.metrics_dir)
    summary = {"workload": cfg.workload.name, "kind": "alibaba", "n_tasks": len(test), "nodes": nodes.summary(),
               "lower_bound": bound, "policies": table.round(6).to_dict(orient="index")}
    files = write_report(out, summary, table, traces, P.utilisation_long(traces, nodes))
    track("evaluate", cfg, {"lower_bound": bound, **summary["policies"]}, files)
    return table


def tune(cfg: DictConfig) -> dict:
    """No hyper-parameter search on a node workload (yet): writes an empty ``best_params.yaml``
    (so ``use_tuned`` changes nothing), a ``tune.json`` that says so, and placeholder plots."""
    import matplotlib

    from hybridsched.io import write_text
    from hybridsched.plots import save_axes

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reason = f"not run: the tune stage searches single-machine policies; workload kind {cfg.workload.kind!r}"
    write_text(cfg.paths.best_params, f"# Written by the tune stage: {reason}.\n{{}}\n")
    out = Path(cfg.paths.metrics_dir)
    summary = {"skipped": reason, "n_complete": 0, "default": None, "best": None}
    write_json(out / "tune.json", summary)
    Path(cfg.paths.best_params).parent.joinpath("tune").mkdir(parents=True, exist_ok=True)
    for name in ("tune_history.png", "tune_importance.png"):
        _, ax = plt.subplots(figsize=(6, 2))
        ax.axis("off")
        ax.text(0.5, 0.5, f"tune {reason}", ha="center", va="center", wrap=True)
        save_axes(ax, out / "plots" / name)
    return summary
