"""DVC stage: run every configured policy on the test workload; write per-task traces."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from hybridsched.bounds import lower_bound
from hybridsched.cluster import cluster_from_config
from hybridsched.errors import HybridschedError
from hybridsched.io import atomic_dir, write_frame, write_json
from hybridsched.sim import simulate
from hybridsched.workload import read_tasks
from stages.common import as_dict, run_stage


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


def simulate_policies(cfg: DictConfig, out_dir: Path | None = None) -> Path:
    """Write ``<policy>.parquet`` traces and ``lower_bound.json`` into one folder, atomically."""
    cluster = cluster_from_config(as_dict(cfg.cluster))
    tasks = read_tasks(Path(cfg.paths.workload_dir) / "test.parquet", max_memory_mb=cluster.max_task_memory_mb)
    policies = build_policies(cfg)
    realization = cluster.sample_noise(len(tasks), np.random.default_rng(int(cfg.sim.seed)))
    out_dir = Path(out_dir or cfg.paths.traces_dir)
    with atomic_dir(out_dir) as tmp:
        for name, policy in policies.items():
            trace = simulate(tasks, cluster, policy, realization, compiled=bool(cfg.sim.compiled))
            write_frame(tmp / f"{name}.parquet", trace.to_frame())
            print(f"simulate: {name:<14} makespan {np.nanmax(trace.end) - tasks.arrival[0]:10.1f} s")
        write_json(tmp / "lower_bound.json", asdict(lower_bound(tasks, cluster, realization)))
    return out_dir


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_stage(simulate_policies, cfg)


if __name__ == "__main__":
    main()
