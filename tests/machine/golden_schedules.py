"""Fixed machine-kind workloads and a hash of every arrival policy's schedule on them.

``python -m tests.machine.golden_schedules`` prints the hashes as JSON; the reference hashes, from
the reference engine of commit a506693, are stored in
``tests/machine/data/golden_schedules.json``, and ``test_golden_schedules.py`` checks that the
current code gives the same bytes (every column of the trace, compiled loop and Python reference)."""

from __future__ import annotations

import hashlib
import json
import sys

import numpy as np

from hybridsched.devices import Cluster
from hybridsched.kinds.machine.engine import task_matrix
from hybridsched.kinds.machine.policies.classic import Greedy, Random, RoundRobin
from hybridsched.kinds.machine.policies.eft import EarliestFinishTime, Oracle
from hybridsched.kinds.machine.policies.hybrid_ml import HybridML, HybridMLOwnBelief
from hybridsched.kinds.machine.policies.weighted import DMDA, LoadAwareEFT, OracleRankEFT, RankEFT
from hybridsched.kinds.machine.runtime_model import train_runtime_model
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.workload import WorkloadSpec, generate

# (name, cluster, workload spec, tasks, seed): independent arrivals at the default load, a
# DAG workload, and a bursty one with tasks too big for one GPU on a smaller, noisier cluster
WORKLOADS = {
    "independent": (Cluster(), WorkloadSpec(rate=6.0), 4000, 0),
    "dag": (Cluster(), WorkloadSpec(rate=4.0, dag_job_size=12, dag_max_parents=3), 3000, 1),
    "bursty": (Cluster(n_gpus=2, noise_sigma=0.3, gpu_mem_mb=6000.0),
               WorkloadSpec(rate=3.0, burst_amplitude=0.8, burst_period_s=120.0, memory_range=(50.0, 20000.0)),
               3000, 2),
}
_RF = {"model": "random_forest", "seed": 0, "importance_repeats": 1,
       "random_forest": {"n_estimators": 8, "max_depth": 8, "min_samples_leaf": 3, "n_jobs": 1}}


def _model(cluster: Cluster):
    X = task_matrix(generate(WorkloadSpec(rate=6.0), 1500, np.random.default_rng(7)), cluster)
    return train_runtime_model(X, cluster, _RF)[0]


def policies(cluster: Cluster) -> dict:
    """name -> factory of every arrival policy the reference hashes cover (fixed settings)."""
    model = _model(cluster)
    return {
        "round_robin": RoundRobin, "random": lambda: Random(seed=3, gpu_fractions=(0.5, 1.0)), "greedy": Greedy,
        "eft": EarliestFinishTime, "oracle": Oracle,
        "eft_load": lambda: LoadAwareEFT(beta_cpu=18.8, beta_gpu=0.077, backlog_s=11.4),
        "eft_rank": lambda: RankEFT(beta_cpu=14.3, beta_gpu=1.7, backlog_s=7.26, kappa=0.62),
        "oracle_rank": lambda: OracleRankEFT(beta_cpu=14.3, beta_gpu=1.7, backlog_s=7.26, kappa=0.62),
        "dmda": lambda: DMDA(alpha=2.66, beta=2.58, gamma=0.056),
        "hybrid_ml_static": lambda: HybridML(model=model, online=False),
        "hybrid_ml": lambda: HybridML(model=model),
        "hybrid_ml_own": lambda: HybridMLOwnBelief(model=model),
    }


def workload(name: str):
    """(tasks, cluster, realization) of one fixed workload."""
    cluster, spec, n, seed = WORKLOADS[name]
    rng = np.random.default_rng(seed)
    tasks = generate(spec, n, rng)
    return tasks, cluster, cluster.sample_noise(n, rng)


def schedule_hash(trace) -> str:
    """sha256 over every per-task column of a trace, in a fixed order and dtype."""
    h = hashlib.sha256()
    for col in ("task_id", "arrival", "ready", "gpu", "fraction", "cpu_start", "cpu_end", "gpu_start", "gpu_end",
                "gpu_mem_mb", "end", "energy_j"):
        a = getattr(trace, col)
        h.update(col.encode())
        h.update(np.ascontiguousarray(a, dtype=np.int64 if col in ("task_id", "gpu") else np.float64).tobytes())
    return h.hexdigest()


def hashes(name: str, compiled: bool = True) -> dict[str, str]:
    """Schedule hash per policy on workload ``name``."""
    tasks, cluster, real = workload(name)
    return {p: schedule_hash(simulate(tasks, cluster, make(), real, compiled=compiled))
            for p, make in policies(cluster).items()}


if __name__ == "__main__":
    json.dump({w: hashes(w) for w in WORKLOADS}, sys.stdout, indent=1, sort_keys=True)
    print()
