"""A cluster of nodes (CPU milli, memory, GPUs of one model each) and the arrays a run needs.

Resources follow the trace: CPU in milli-cores, memory in MiB, GPU capacity in milli-GPUs
(1000 = a whole GPU).  A task with ``num_gpu = k`` and ``gpu_milli = p`` fits node ``n`` when
``n`` has the CPU and memory free, its GPU model is allowed by the task's ``gpu_spec``, and at
least ``k`` of its GPUs each have ``p`` milli free (so a whole-GPU task needs ``k`` idle GPUs and
a GPU-sharing task one GPU with ``p`` free).  Power: each GPU draws ``gpu_idle_w`` plus
``(gpu_busy_w - gpu_idle_w)`` times its allocated share; each node's CPU ``cpu_idle_w`` plus
``(cpu_busy_w - cpu_idle_w)`` times its allocated CPU share (the numbers of ``conf/cluster``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybridsched.kinds.cluster.trace import GPU_SPEC_SEP, MILLI, NodeTable, PodTable
from hybridsched.devices import Cluster
from hybridsched.kinds.cluster.speeds import SpeedTable, job_type_of

CPU_MODEL = ""  # the "model" of nodes without GPUs
POD_CLASSES = ("cpu_only", "gpu_sharing", "whole_gpu")


def pod_class(k: int, p: float) -> int:
    """Index into POD_CLASSES of a pod with ``k`` GPUs of ``p`` milli each."""
    return 0 if k == 0 else (1 if k == 1 and p < MILLI else 2)


@dataclass
class NodeCluster:
    """Static description of the nodes; ``gpu_cap[n, g]`` is 1000 for an existing GPU, 0 else."""

    nodes: NodeTable
    models: tuple[str, ...]  # distinct GPU models, CPU_MODEL last
    node_model: np.ndarray  # (N,) index into models
    gpu_cap: np.ndarray  # (N, G) milli
    speeds: SpeedTable | None  # None: a placement-only cluster (no run times, e.g. fgd_protocol)
    power: Cluster  # its power constants and price (the same config keys as the single machine)

    @classmethod
    def build(cls, nodes: NodeTable, speeds: SpeedTable | None, power: Cluster | None = None) -> NodeCluster:
        gpu_models = sorted({str(m) for m in nodes.model if m != CPU_MODEL})
        models = (*gpu_models, CPU_MODEL)
        node_model = np.array([models.index(str(m)) for m in nodes.model], dtype=np.int64)
        g = max(int(nodes.n_gpu.max()) if len(nodes) else 0, 1)
        gpu_cap = np.where(np.arange(g)[None, :] < nodes.n_gpu[:, None], float(MILLI), 0.0)
        return cls(nodes, models, node_model, gpu_cap, speeds, power or Cluster())

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def total_gpus(self) -> int:
        return int(self.nodes.n_gpu.sum())

    def model_speed(self) -> np.ndarray:
        """Mean speed of each model relative to the reference (CPU_MODEL: 1), by model index."""
        mean = self.speeds.mean_speed()
        return np.array([mean[self.speeds.models.index(m)] if m != CPU_MODEL else 1.0 for m in self.models])


@dataclass
class RunInputs:
    """Per-task arrays of one run, in arrival order (row ``i`` = ``tasks`` row ``i``)."""

    tasks: PodTable
    arrival: np.ndarray
    cpu: np.ndarray
    mem: np.ndarray
    k: np.ndarray  # GPUs needed (int)
    p: np.ndarray  # milli needed on each of them
    allowed: np.ndarray  # (n, n_models) bool: the task's gpu_spec allows the model
    job_type: np.ndarray  # (n,) Gavel job type index
    run_time: np.ndarray  # (n, n_models) true run time on each model (inf where it cannot run)

    def __len__(self) -> int:
        return len(self.arrival)


def run_inputs(tasks: PodTable, cluster: NodeCluster) -> RunInputs:
    """The arrays the engine and the policies read, with true run times per GPU model."""
    n = len(tasks)
    models = cluster.models
    allowed = allowed_models(tasks.gpu_spec, models)
    jt = job_type_of(tasks.name, len(cluster.speeds.job_types))
    run_time = np.full((n, len(models)), np.inf)
    gpu_task = tasks.num_gpu > 0
    for j, m in enumerate(models):
        if m == CPU_MODEL:
            run_time[~gpu_task, j] = tasks.duration[~gpu_task]
        else:
            slow = cluster.speeds.slowdown(jt, cluster.speeds.models.index(m))
            run_time[:, j] = np.where(gpu_task, tasks.duration * slow, tasks.duration)
    return RunInputs(tasks, tasks.arrival.astype(np.float64), tasks.cpu_milli.astype(np.float64),
                     tasks.memory_mib.astype(np.float64), tasks.num_gpu.astype(np.int64),
                     tasks.gpu_milli.astype(np.float64), allowed, jt, run_time)


def allowed_models(gpu_spec: np.ndarray, models: tuple[str, ...]) -> np.ndarray:
    """(n, len(models)) bool: pod ``r``'s ``gpu_spec`` allows model ``j`` (empty spec: every model)."""
    allowed = np.ones((len(gpu_spec), len(models)), dtype=bool)
    for r in np.flatnonzero(gpu_spec != ""):
        want = set(str(gpu_spec[r]).split(GPU_SPEC_SEP))
        allowed[r] = [m in want for m in models]
    return allowed


def placement_inputs(tasks: PodTable, cluster: NodeCluster) -> RunInputs:
    """The arrays placement reads (resources, allowed models) for pods that never finish:
    no job types (0) and no run times (NaN); for the paper's fragmentation protocol."""
    n = len(tasks)
    return RunInputs(tasks, tasks.arrival.astype(np.float64), tasks.cpu_milli.astype(np.float64),
                     tasks.memory_mib.astype(np.float64), tasks.num_gpu.astype(np.int64),
                     tasks.gpu_milli.astype(np.float64), allowed_models(tasks.gpu_spec, cluster.models),
                     np.zeros(n, dtype=np.int64), np.full((n, len(cluster.models)), np.nan))


def fits_empty(inp: RunInputs, cluster: NodeCluster) -> np.ndarray:
    """(n, N) bool: task ``i`` fits node ``n`` of an otherwise empty cluster."""
    nodes = cluster.nodes
    ok = (inp.cpu[:, None] <= nodes.cpu_milli[None, :]) & (inp.mem[:, None] <= nodes.memory_mib[None, :])
    ok &= inp.allowed[:, cluster.node_model]
    ok &= (inp.k[:, None] == 0) | (inp.k[:, None] <= nodes.n_gpu[None, :])
    return ok


def fits_any_node(inp: RunInputs, cluster: NodeCluster) -> np.ndarray:
    """(n,) bool: task ``i`` fits some node of an empty cluster (``fits_empty(...).any(axis=1)``,
    tested against each distinct node shape once, so it costs O(tasks x node shapes))."""
    nodes = cluster.nodes
    shapes = np.unique(np.column_stack([nodes.cpu_milli, nodes.memory_mib, cluster.node_model, nodes.n_gpu]
                                       ).astype(np.float64).reshape(-1, 4), axis=0)
    ok = np.zeros(len(inp), dtype=bool)
    for cpu, mem, model, n_gpu in shapes:
        ok |= ((inp.cpu <= cpu) & (inp.mem <= mem) & inp.allowed[:, int(model)]
               & ((inp.k == 0) | (inp.k <= n_gpu)))
    return ok


def fits_some_node(pods: PodTable, nodes: NodeTable) -> np.ndarray:
    """(n,) bool: the pod fits at least one node of an empty cluster (resources and gpu_spec)."""
    ok = (pods.cpu_milli[:, None] <= nodes.cpu_milli[None, :]) & (pods.memory_mib[:, None] <= nodes.memory_mib[None, :])
    ok &= (pods.num_gpu[:, None] == 0) | (pods.num_gpu[:, None] <= nodes.n_gpu[None, :])
    for r in np.flatnonzero(pods.gpu_spec != ""):
        ok[r] &= np.isin(nodes.model.astype(str), str(pods.gpu_spec[r]).split(GPU_SPEC_SEP))
    return ok.any(axis=1)
