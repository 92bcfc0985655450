"""DVC stage: metrics, comparison table and plots from the simulated traces."""

from __future__ import annotations

import json
from pathlib import Path

import hydra
import pandas as pd
from omegaconf import DictConfig

from hybridsched.kinds.machine.devices import cluster_from_config
from hybridsched.errors import HybridschedError
from hybridsched.evaluation import compare, utilisation_table, write_report
from hybridsched.kinds.machine.workload import read_tasks
from stages import alibaba
from stages.common import as_dict, run_stage, track


def load_traces(traces_dir: Path) -> tuple[dict[str, pd.DataFrame], dict[str, float]]:
    """Every ``<policy>.parquet`` trace in the folder, and its lower bound."""
    traces = {p.stem: pd.read_parquet(p) for p in sorted(traces_dir.glob("*.parquet"))}
    if not traces:
        raise HybridschedError(f"{traces_dir}: no traces (run the simulate stage first)")
    return traces, json.loads((traces_dir / "lower_bound.json").read_text())


def evaluate(cfg: DictConfig) -> pd.DataFrame:
    """Write metrics/summary.json, metrics/policies.csv and the plot data and PNGs."""
    if alibaba.is_alibaba(cfg):  # node-cluster metrics of a trace workload
        return alibaba.evaluate(cfg)
    cluster = cluster_from_config(as_dict(cfg.cluster))
    traces, bound = load_traces(Path(cfg.paths.traces_dir))
    order = {n: k for k, n in enumerate(cfg.sim.policies)}  # the configured order, then any others
    traces = dict(sorted(traces.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))
    tasks = read_tasks(Path(cfg.paths.workload_dir) / "test.parquet")
    parents = {int(tasks.task_id[i]): tasks.task_id[tasks.parents(i)].tolist() for i in range(len(tasks)) if len(tasks.parents(i))}
    table = compare(traces, cluster, bound, parents)
    out = Path(cfg.paths.metrics_dir)
    summary = {"workload": cfg.workload.name, "n_tasks": len(tasks), "lower_bound": bound,
               "policies": table.round(6).to_dict(orient="index")}
    files = write_report(out, summary, table, traces, utilisation_table(table, cluster.n_gpus))
    track("evaluate", cfg, {"lower_bound": bound, **summary["policies"]}, files)
    return table


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    table = run_stage(evaluate, cfg, outputs=["metrics_dir"])
    cols = ["makespan", "mean_latency", "p95_latency", "energy_j", "makespan_vs_bound"]
    print(table[cols].round(3).to_string())


if __name__ == "__main__":
    main()
