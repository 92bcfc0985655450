"""DVC stage: run every configured policy on the test workload; write per-task traces."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from hybridsched.kinds.machine.bounds import lower_bound
from hybridsched.kinds.machine.devices import cluster_from_config
from hybridsched.errors import HybridschedError
from hybridsched.evaluation import compare
from hybridsched.io import atomic_dir, write_frame, write_json
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.workload import TaskTable, generate_splits, read_tasks
from stages import alibaba
from stages.common import as_dict, multirun_dir, run_stage, track


def build_policies(cfg: DictConfig) -> dict:
    """Name -> Policy: the single ``policy`` group choice if set, else every name in ``sim.policies``."""
    if cfg.get("policy") is not None:
        chosen = {HydraConfig.get().runtime.choices.get("policy", "policy"): cfg.policy}
    else:
        known = sorted(cfg.policies)
        unknown = [n for n in cfg.sim.policies if n not in cfg.policies]
        if unknown:
            raise HybridschedError(f"sim.policies: unknown policy name(s) {unknown}; known: {known}")
        chosen = {n: cfg.policies[n] for n in cfg.sim.policies}
    policies = {}
    for name, node in chosen.items():
        policy = hydra.utils.instantiate(node)
        policy.name = name
        policies[name] = policy
    return policies


def test_tasks(cfg: DictConfig, max_memory_mb: float) -> TaskTable:
    """The test workload: the generate stage's file, or under multirun (where the sweep may
    change the workload) the same tasks generated in memory from ``cfg.workload``."""
    if multirun_dir() is not None:
        return generate_splits(as_dict(cfg.workload), cpu_gflops=float(cfg.cluster.cpu_gflops))[1]
    return read_tasks(Path(cfg.paths.workload_dir) / "test.parquet", max_memory_mb=max_memory_mb)


def simulate_policies(cfg: DictConfig):  # -> pandas.DataFrame
    """Write ``<policy>.parquet`` traces and ``lower_bound.json`` into ``paths.traces_dir``
    atomically; return the per-policy comparison table."""
    if alibaba.is_alibaba(cfg):  # node cluster and node policies of a trace workload
        return alibaba.simulate(cfg)
    cluster = cluster_from_config(as_dict(cfg.cluster))
    tasks = test_tasks(cfg, cluster.max_task_memory_mb)
    policies = build_policies(cfg)
    realization = cluster.sample_noise(len(tasks), np.random.default_rng(int(cfg.sim.seed)))
    bound = asdict(lower_bound(tasks, cluster, realization))
    traces = {}
    with atomic_dir(cfg.paths.traces_dir) as tmp:
        for name, policy in policies.items():
            traces[name] = simulate(tasks, cluster, policy, realization, compiled=bool(cfg.sim.compiled)).to_frame()
            write_frame(tmp / f"{name}.parquet", traces[name])
            print(f"simulate: {name:<16} makespan {traces[name]['end'].max() - tasks.arrival[0]:10.1f} s")
        write_json(tmp / "lower_bound.json", bound)
    table = compare(traces, cluster, bound)
    headline = table[["makespan", "mean_latency", "p95_latency", "energy_j"]].to_dict(orient="index")
    track("simulate", cfg, {"lower_bound": bound, **headline})
    return table.assign(workload=cfg.workload.name)


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_stage(simulate_policies, cfg, outputs=["traces_dir"])


if __name__ == "__main__":
    main()
