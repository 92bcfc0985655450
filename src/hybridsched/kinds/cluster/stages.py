"""The cluster kind's stage functions: pods of a GPU-cluster trace on a sample of its nodes
(see kinds/base.py).  The work is in this package's modules; these functions read the
config, call them and write the stage's declared outputs.

Files (under ``paths.workload_dir``): ``train.parquet`` / ``test.parquet`` (pod tables, the
chronological split) and ``nodes.parquet`` (the sampled node list).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pandas as pd

from hybridsched.errors import HybridschedError
from hybridsched.evaluation import (DISPATCH_FILE, EVALUATE_COLUMNS, compare, dispatch_mode, read_dispatch, with_dispatch,
                                   write_importance_report, write_report)
from hybridsched.io import atomic_dir, without_timings, write_frame, write_json
from hybridsched.kinds.base import Run, instantiate
from hybridsched.kinds.cluster import workload as W
from hybridsched.kinds.cluster.nodes import NodeCluster
from hybridsched.kinds.cluster.trace import NodeTable, PodTable
from hybridsched.devices import Cluster
from hybridsched.not_applicable import empty_plot_dir
from hybridsched.plots import stage_plot_dir


def _node_cluster(run: Run, nodes: NodeTable) -> NodeCluster:
    return W.build_cluster(nodes, run.cfg["nodes"], run.cfg["cluster"])


def _splits(run: Run) -> tuple[PodTable, PodTable, NodeTable]:
    """(train, test, nodes): the generate stage's files, or under multirun (where the sweep may
    change the workload) the trace imported in memory."""
    if run.in_memory:
        train, test, nodes, _ = W.load_workload(run.cfg["workload"])
        return train, test, nodes
    wd = run.workload_dir
    return W.read_split(wd, "train"), W.read_split(wd, "test"), W.read_nodes(wd)


def check_config(run: Run) -> None:
    """Every setting this kind reads, checked before the pipeline runs anything (stage
    ``check``): a bad value or a missing trace file fails here, with one line."""
    from pathlib import Path

    from hybridsched.kinds.cluster.cem_train import ClusterCEMSettings
    from hybridsched.kinds.cluster.late_train import POLICIES
    from hybridsched.kinds.cluster.late_train import settings as late_settings
    from hybridsched.rl.cem import CEMSettings
    from hybridsched.rl.dqn import DQNSettings

    Cluster.from_dict(run.cfg["cluster"])
    w = run.cfg["workload"]
    for setting, path in (("workload.path", w.get("path")), ("workload.nodes.path", (w.get("nodes") or {}).get("path")),
                          ("nodes.gavel_path", run.cfg["nodes"]["gavel_path"])):
        if not path or not Path(path).is_file():
            raise HybridschedError(f"{setting}: file {path!r} not found (the public traces are under paths.traces "
                                   f"or $HYBRIDSCHED_TRACES, see docs/traces.md)")
    DQNSettings.from_dict(run.cfg["nodes"]["dqn"])
    for spec in run.policy_specs().values():
        instantiate(spec)
    CEMSettings.from_dict(run.cfg["cem"])
    ClusterCEMSettings.from_dict(run.cfg["cem"].get("cluster"))
    blocks = (run.cfg.get("train_late") or {}).get("cluster") or {}
    for name in dict.fromkeys([*POLICIES, *blocks]):
        late_settings(name, blocks.get(name))


def profile(run: Run) -> dict[str, Any]:
    """Nothing to measure: the cluster's speeds are the Gavel table's.  Writes the stage's
    outputs saying so."""
    reason = "not run: the cluster kind takes its GPU speeds from the Gavel table (nodes.gavel_path)"
    write_json(run.cfg["cluster"]["profile_path"], {"skipped": reason})
    write_json(run.metrics_dir / "profile.json", {"skipped": reason})
    empty_plot_dir(stage_plot_dir(run.metrics_dir, "profile"))  # nothing measured, nothing to draw
    print(f"profile: {reason}")
    return {"skipped": reason}


def generate(run: Run) -> dict[str, int]:
    """Import the trace: ``train``/``test``/``nodes.parquet`` and metrics/import_report.json."""
    train, test, nodes, report = W.load_workload(run.cfg["workload"])
    with atomic_dir(run.workload_dir) as tmp:
        write_frame(tmp / "train.parquet", train.to_frame())
        write_frame(tmp / "test.parquet", test.to_frame())
        write_frame(tmp / "nodes.parquet", nodes.to_frame())
    write_json(run.metrics_dir / "import_report.json", report)
    dropped = ", ".join(f"{k} {v}" for k, v in report["dropped"].items() if v) or "none"
    print(f"generate: imported {report['rows_kept']} of {report['rows_read']} pods from {report['path']} "
          f"(dropped: {dropped}); {report['nodes']['nodes']} nodes, {report['nodes']['gpus']} GPUs")
    return {"train": len(train), "test": len(test)}


def validate(run: Run) -> dict[str, Any]:
    """The pod-table expectation suite on both splits (see validation.py)."""
    from hybridsched.expectations import check_report
    from hybridsched.kinds.cluster.validation import validate_pod_files

    wd = run.workload_dir
    report = validate_pod_files({s: wd / f"{s}.parquet" for s in W.SPLITS}, W.read_nodes(wd))
    return check_report(report, run.metrics_dir / "validation.json")


def train_rf(run: Run) -> dict:
    """The pod-duration RandomForest: models/rf, metrics/train_rf.json, importance csv + png."""
    from hybridsched.kinds.cluster.runtime_model import save_pod_runtime, train_pod_runtime

    rf_cfg = run.cfg["rf"]
    model, metrics = train_pod_runtime(W.read_split(run.workload_dir, "train"), rf_cfg)
    save_pod_runtime(model, rf_cfg["model_dir"], {"workload": run.cfg["workload"]["name"], "metrics": without_timings(metrics)})
    files = write_importance_report(run.metrics_dir, metrics, "pod duration RandomForest: permutation importance")
    run.track("train_rf", metrics, files)
    print(f"train_rf: pod duration model on {metrics.get('n_train')} pods, held-out R² (log) {metrics.get('r2')}")
    if metrics.get("warning"):
        print(f"train_rf: warning: {metrics['warning']}")
    return metrics


def train_dqn(run: Run) -> dict:
    """The node DQN: models/dqn, metrics/train_dqn.json, metrics/plots/train_dqn.csv."""
    from hybridsched.kinds.cluster.dqn import save_node_dqn
    from hybridsched.kinds.cluster.dqn_train import train_node_dqn

    train, _, nodes = _splits(run)
    settings = run.cfg["nodes"]["dqn"]
    policy, metrics, history = train_node_dqn(train, _node_cluster(run, nodes), settings)
    save_node_dqn(run.cfg["dqn"]["model_dir"], policy, settings, {"workload": run.cfg["workload"]["name"]})
    out = run.metrics_dir
    write_json(out / "train_dqn.json", without_timings(metrics))
    write_frame(out / "plots" / "train_dqn.csv", pd.DataFrame(history).drop(columns=["actions", "wall_s"]).round(6))
    run.track("train_dqn", metrics, [out / "train_dqn.json", out / "plots" / "train_dqn.csv"])
    print(f"train_dqn: {metrics['episodes']} episodes on {metrics['n_train']} pods in {metrics['wall_s']:.1f} s; "
          f"greedy train mean JCT {metrics['train_mean_jct_greedy_dqn']:.1f} s")
    return metrics


def train_cem(run: Run) -> dict:
    """The ``cem`` node scorer (kinds/cluster/cem.py), searched on a mixture of training-split
    scenarios (cem_train.py): models/cem/theta.json, metrics/train_cem.json and its curve."""
    from hybridsched.kinds.cluster.cem import MODEL_FILE
    from hybridsched.kinds.cluster.cem_train import ClusterCEMSettings, train_scorer
    from hybridsched.rl.cem import CEMSettings

    cem_cfg = run.cfg["cem"]
    cem, settings = CEMSettings.from_dict(cem_cfg), ClusterCEMSettings.from_dict(cem_cfg.get("cluster"))
    train, _, nodes = _splits(run)
    theta, history, metrics = train_scorer(train, _node_cluster(run, nodes), cem, settings)
    doc = {"kind": "cluster", "workload": run.cfg["workload"]["name"], **metrics["weights"],
           "train": without_timings(metrics)}
    with atomic_dir(cem_cfg["model_dir"]) as tmp:
        write_json(tmp / MODEL_FILE, doc)
    out = run.metrics_dir
    write_json(out / "train_cem.json", without_timings(metrics))
    curve = pd.DataFrame(history)[["generation", "mean_cost", "elite_cost", "best_cost", "population_cost", "std"]]
    write_frame(out / "plots" / "train_cem.csv", curve.round(6))
    run.track("train_cem", metrics, [out / "train_cem.json", out / "plots" / "train_cem.csv"])
    print(f"train_cem: {cem.generations} generations x {cem.population} on {settings.windows} training scenarios "
          f"in {metrics['wall_s']:.1f} s; cost (mean JCT / eft's) {metrics['first_mean_cost']:.4f} -> "
          f"{metrics['last_mean_cost']:.4f}; picked generation {metrics.get('selected_generation', 'last')}, "
          f"cost on fresh training scenarios {metrics.get('check_cost', float('nan')):.4f}")
    return metrics


def _train_and_nodes(run: Run) -> tuple[PodTable, NodeTable]:
    """The training split and the node list (the test split is not read), as :func:`_splits`."""
    if run.in_memory:
        train, _, nodes = _splits(run)
        return train, nodes
    return W.read_split(run.workload_dir, "train"), W.read_nodes(run.workload_dir)


def policies_read(cfg: dict[str, Any]) -> dict[str, list[str]]:
    """Stage -> the ``policies.cluster`` entries it builds, for the stages that build only some
    (dvc.yaml lists just these as their params: :mod:`hybridsched.stage_params`)."""
    return {"train_late": ["cem", "learned_queue"]}


def train_late(run: Run) -> dict[str, Any]:
    """``eft_queue``'s and ``learned_queue``'s weights (late_train.py, settings
    ``train_late.cluster``), trained on the training split: ``train_late.model_dir/<policy>/
    model.json``, metrics/train_late.json and metrics/plots/train_late.csv (one row per
    generation of each search: cost = the search mean's mean JCT ÷ eft's)."""
    from pathlib import Path

    from hybridsched.kinds.cluster.late_model import MODEL_FILE
    from hybridsched.kinds.cluster.late_train import train_eft_queue, train_learned_queue

    t = run.cfg["train_late"]
    blocks = t.get("cluster") or {}
    specs = run.cfg["policies"]["cluster"]
    train, nodes = _train_and_nodes(run)
    cluster, name = _node_cluster(run, nodes), run.cfg["workload"]["name"]
    jobs = {"eft_queue": lambda: train_eft_queue(train, cluster, blocks.get("eft_queue"), name),
            "learned_queue": lambda: train_learned_queue(
                train, cluster, blocks.get("learned_queue"), name,
                backfill=str(specs["learned_queue"].get("backfill", "greedy")), cem_spec=specs["cem"])}
    metrics: dict[str, Any] = {"policies": {}}
    curves = []
    with atomic_dir(Path(t["model_dir"])) as tmp:
        for policy, job in jobs.items():
            doc, curve = job()
            write_json(tmp / policy / MODEL_FILE, doc)
            tr = doc["train"]
            metrics["policies"][policy] = {k: tr[k] for k in ("first_mean_cost", "last_mean_cost", "selected_generation",
                                                              "selection_cost", "check_cost") if k in tr}
            curves += [{"policy": policy, **row} for row in curve]
            print(f"train_late: {policy}: cost (mean JCT / eft's) {tr['first_mean_cost']:.4f} -> "
                  f"{tr['last_mean_cost']:.4f}; on fresh training windows {tr.get('check_cost', float('nan')):.4f}",
                  flush=True)
    out = run.metrics_dir
    write_json(out / "train_late.json", without_timings(metrics))
    write_frame(out / "plots" / "train_late.csv", pd.DataFrame(curves, columns=["policy", "step", "cost"]).round(6))
    run.track("train_late", {n: v["check_cost"] for n, v in metrics["policies"].items() if "check_cost" in v},
              [out / "train_late.json", out / "plots" / "train_late.csv"])
    return metrics


def tune(run: Run) -> dict:
    """No hyper-parameter search on this kind (yet): an empty ``best_params.yaml`` (so
    ``use_tuned`` changes nothing), a ``tune.json`` that says so, and an empty image folder."""
    from hybridsched.io import write_text

    reason = f"not run: the tune stage searches the machine kind's learned policies; workload kind {run.kind!r}"
    write_text(run.path("best_params"), f"# Written by the tune stage: {reason}.\n{{}}\n")
    summary = {"skipped": reason, "n_complete": 0, "default": None, "best": None}
    write_json(run.metrics_dir / "tune.json", summary)
    run.path("best_params").parent.joinpath("tune").mkdir(parents=True, exist_ok=True)
    empty_plot_dir(stage_plot_dir(run.metrics_dir, "tune"))
    print(f"tune: {reason}")
    return summary


def simulate(run: Run) -> pd.DataFrame:
    """Traces of every chosen node policy on the test split, and the lower bound."""
    from hybridsched.kinds.cluster.bounds import lower_bound
    from hybridsched.kinds.cluster.nodes import run_inputs

    train, test, nodes = _splits(run)
    cluster = _node_cluster(run, nodes)
    bound = asdict(lower_bound(run_inputs(test, cluster), cluster))
    policies = run.build_policies()
    modes = {name: dispatch_mode(p) for name, p in policies.items()}
    traces = W.run_policies(train, test, cluster, policies)
    with atomic_dir(run.traces_dir) as tmp:
        for name, tr in traces.items():
            write_frame(tmp / f"{name}.parquet", tr)
            print(f"simulate: {name:<20} {modes[name]:<8} mean JCT {(tr['end'] - tr['arrival']).mean():10.1f} s")
        write_json(tmp / "lower_bound.json", bound)
        write_json(tmp / DISPATCH_FILE, modes)
    table = _table(traces, test, nodes, cluster.power, bound, modes)
    run.track("simulate", {"lower_bound": bound, **table[["mean_latency", "p95_latency", "energy_j"]].to_dict(orient="index")})
    return table.assign(workload=run.cfg["workload"]["name"])


def _table(traces: dict[str, pd.DataFrame], test: PodTable, nodes: NodeTable, power: Cluster, bound: dict,
           modes: dict[str, str]) -> pd.DataFrame:
    """The shared comparison over this kind's audited per-policy summaries, each policy's
    dispatch mode first."""
    from hybridsched.kinds.cluster.metrics import check_trace, summarize

    summaries = {}
    for name, tr in traces.items():
        problems = check_trace(tr, nodes, test)
        if problems:
            raise HybridschedError(f"trace of policy {name!r} is invalid: {'; '.join(problems)}")
        summaries[name] = summarize(tr, nodes, power)
    return with_dispatch(compare(summaries, bound), modes)


def write_kind_plots(out, traces: dict[str, pd.DataFrame], nodes: NodeTable) -> list:
    """This kind's own plots in ``metrics/plots/kind``: allocated and fragmented GPU share of the
    cluster over time, one panel per policy (lowest mean JCT first); the mean JCT per policy is
    the headline chart (``metrics/plots/headline.png``)."""
    from hybridsched.kinds.cluster.metrics import state_timeline
    from hybridsched.kinds.cluster.trace import MILLI
    from hybridsched.plots import mean_latency_order, save_step_lines

    cap = float(MILLI * nodes.n_gpu.sum())
    states = {name: state_timeline(tr, nodes) for name, tr in traces.items()}
    order = mean_latency_order(traces)  # one panel per policy, the lowest mean JCT first
    kind_dir = out / "plots" / "kind"
    with atomic_dir(kind_dir) as tmp:
        save_step_lines({n: (s[0], s[1] / cap) for n, s in states.items()}, tmp / "gpu_allocated.png",
                        "Allocated GPU share of the cluster", "allocated / capacity", order=order)
        save_step_lines({n: (s[0], s[2] / cap) for n, s in states.items()}, tmp / "gpu_fragmented.png",
                        "Expected fragmented GPU share (FGD's measure)", "fragmented / capacity", order=order)
    return sorted(kind_dir.glob("*.png"))


HEADLINE = {"column": "mean_latency", "label": "mean JCT (s)"}  # the evaluate stage ranks by it


def evaluate(run: Run) -> pd.DataFrame:
    """metrics/summary.json, metrics/policies.csv, the plot tables and PNGs."""
    from hybridsched.evaluation import load_traces

    traces, bound = load_traces(run.traces_dir, order=list(run.cfg["policies"]["cluster"]))
    wd = run.workload_dir
    test, nodes = W.read_split(wd, "test"), W.read_nodes(wd)
    table = _table(traces, test, nodes, Cluster.from_dict(run.cfg["cluster"]), bound, read_dispatch(run.traces_dir))
    summary = {"workload": run.cfg["workload"]["name"], "kind": "cluster", "n_tasks": len(test),
               "nodes": nodes.summary(), "lower_bound": bound, "policies": table.round(6).to_dict(orient="index")}
    files = write_report(run.metrics_dir, summary, table, traces, W.utilisation_long(traces, nodes))
    files += write_kind_plots(run.metrics_dir, traces, nodes)
    print(table[[c for c in EVALUATE_COLUMNS if c in table]].round(3).to_string())
    from hybridsched.headline import MainMetric, report  # only evaluate reads it: not a dep of every stage

    head_files, head = report(run, table, MainMetric(**HEADLINE), bound.get("mean_latency"))
    run.track("evaluate", {"lower_bound": bound, **summary["policies"]}, files + head_files, headline=head)
    return table
