"""Metrics of a node-cluster run, computed from its per-task trace and the node table alone.

* JCT (job completion time) = end - arrival, named ``*_latency`` as in the single-machine
  metrics (same quantity): mean, P50, P95, P99; queueing delay ``wait`` = start - arrival.
* Time averages over the **arrival window** [first arrival, last arrival] (while work keeps
  coming; the drain after it reflects the longest tasks, not the scheduler):
  - ``gpu_utilisation``: allocated GPU capacity / total GPU capacity;
  - ``frag_gpu_share``: FGD's expected fragmentation (Weng et al., ATC 2023): free GPU milli
    that the workload's GPU task mix cannot use, over total capacity
    (``fragmentation.node_fragmentation``, mix = the run's own GPU tasks);
  - ``stranded_gpu_share``: free GPU capacity while at least one GPU task waits (after every
    event no waiting task fits anywhere, so all of it is unusable to the queue right then).
* ``energy_j``: each task's busy energy plus every GPU's and node CPU's idle power over the
  makespan; ``cost_usd`` at the cluster's price.

:func:`check_trace` audits the physical rules independently of the engine.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybridsched.kinds.cluster.trace import GPU_SPEC_SEP, MILLI, NodeTable, PodTable
from hybridsched.devices import Cluster
from hybridsched.kinds.cluster.fragmentation import node_fragmentation, task_mix


def gpu_list(s: str) -> list[int]:
    """``"0;3"`` -> ``[0, 3]``."""
    return [int(g) for g in str(s).split(";") if g != ""]


def _gpu_events(trace: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, GPU) it holds: node, gpu, start, end, milli."""
    rows = [(n, g, s, e, m) for n, gs, s, e, m in zip(trace["node"], trace["gpus"], trace["start"], trace["end"],
                                                      trace["gpu_milli"], strict=True) for g in gpu_list(gs)]
    return pd.DataFrame(rows, columns=["node", "gpu", "start", "end", "milli"])


def state_timeline(trace: pd.DataFrame, nodes: NodeTable) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Piecewise-constant cluster state from the trace: event times ``t`` (k+1), and on each of the
    k intervals the allocated GPU milli, the expected fragmented milli and whether a GPU task waits."""
    g = max(int(nodes.n_gpu.max()), 1)
    free = np.where(np.arange(g)[None, :] < nodes.n_gpu[:, None], float(MILLI), -1.0)
    ev = _gpu_events(trace)
    types, pop = task_mix(trace["num_gpu"].to_numpy(), trace["gpu_milli"].to_numpy())
    # GPU allocation changes and queue changes (a GPU task starts waiting / stops waiting)
    wait = trace[(trace["num_gpu"] > 0) & (trace["start"] > trace["arrival"])]
    times = np.unique(np.concatenate([ev["start"], ev["end"], wait["arrival"], wait["start"],
                                      [trace["arrival"].min(), trace["end"].max()]]))
    k = len(times) - 1
    alloc = np.zeros(k)
    frag = np.zeros(k)
    waiting = np.zeros(k, dtype=bool)
    changes = pd.concat([ev.assign(t=ev["start"], d=-ev["milli"]), ev.assign(t=ev["end"], d=ev["milli"])])
    changes = changes.sort_values("t", kind="stable")
    ct, cn, cg, cd = (changes[c].to_numpy() for c in ("t", "node", "gpu", "d"))
    node_frag = node_fragmentation(free, types, pop) if len(types) else np.zeros(len(nodes))
    total_cap = float(MILLI * nodes.n_gpu.sum())
    ptr = 0
    q_in = np.searchsorted(np.sort(wait["arrival"].to_numpy()), times[:-1], side="right")
    q_out = np.searchsorted(np.sort(wait["start"].to_numpy()), times[:-1], side="right")
    for j in range(k):
        touched = set()
        while ptr < len(ct) and ct[ptr] <= times[j]:
            free[cn[ptr], cg[ptr]] += cd[ptr]
            touched.add(int(cn[ptr]))
            ptr += 1
        if touched and len(types):
            idx = np.fromiter(touched, dtype=np.int64)
            node_frag[idx] = node_fragmentation(free[idx], types, pop)
        alloc[j] = total_cap - np.clip(free, 0, None).sum()
        frag[j] = node_frag.sum()
        waiting[j] = q_in[j] > q_out[j]
    return times, alloc, frag, waiting


def summarize(trace: pd.DataFrame, nodes: NodeTable, power: Cluster) -> dict[str, float]:
    """Scalar metrics of one policy's trace."""
    jct = (trace["end"] - trace["arrival"]).to_numpy()
    wait = trace["wait"].to_numpy()
    t0, t_last, t_end = float(trace["arrival"].min()), float(trace["arrival"].max()), float(trace["end"].max())
    span = t_end - t0
    times, alloc, frag, waiting = state_timeline(trace, nodes)
    cap = float(MILLI * nodes.n_gpu.sum())
    free = cap - alloc
    # time averages over the arrival window [t0, t_last] (the whole run if all arrive at once)
    lo, hi = (t0, t_last) if t_last > t0 else (t0, t_end)
    dt = np.clip(np.minimum(times[1:], hi) - np.maximum(times[:-1], lo), 0, None)
    win = max(dt.sum(), 1e-12)
    idle_w = power.gpu_idle_w * nodes.n_gpu.sum() + power.cpu_idle_w * len(nodes)
    energy = float(trace["energy_j"].sum() + idle_w * span)
    return {
        "n_tasks": float(len(trace)),
        "makespan": span,
        "mean_latency": float(jct.mean()),
        "p50_latency": float(np.percentile(jct, 50)),
        "p95_latency": float(np.percentile(jct, 95)),
        "p99_latency": float(np.percentile(jct, 99)),
        "mean_wait": float(wait.mean()),
        "p95_wait": float(np.percentile(wait, 95)),
        "max_wait": float(wait.max()),
        "mean_slowdown": float(np.mean(jct / np.maximum(trace["run_time"].to_numpy(), 1e-9))),
        "gpu_utilisation": float((alloc * dt).sum() / (cap * win)),
        "frag_gpu_share": float((frag * dt).sum() / (cap * win)),
        "stranded_gpu_share": float((free * waiting * dt).sum() / (cap * win)),
        "energy_j": energy,
        "cost_usd": power.joules_to_dollars(energy),
    }


def utilisation_by_model(trace: pd.DataFrame, nodes: NodeTable) -> dict[str, float]:
    """Allocated GPU-seconds over capacity-seconds per GPU model, over the makespan."""
    span = float(trace["end"].max() - trace["arrival"].min())
    gpu_s = (trace["num_gpu"] * trace["gpu_milli"] / MILLI * trace["run_time"]).groupby(trace["model"]).sum()
    caps = pd.Series(nodes.n_gpu, index=nodes.model).groupby(level=0).sum()
    return {str(m): float(gpu_s.get(m, 0.0) / (c * span)) for m, c in caps.items() if m and c > 0}


def check_trace(trace: pd.DataFrame, nodes: NodeTable, tasks: PodTable) -> list[str]:
    """Problems found by reading the trace alone (empty = every rule holds): each task once and
    finished, start >= arrival, right GPU count on an existing GPU of an allowed model, and at
    every instant per node CPU and memory, and per GPU milli, within capacity."""
    problems: list[str] = []
    eps = 1e-6
    if len(trace) != len(tasks) or set(trace["task_id"]) != set(tasks.task_id.tolist()):
        problems.append("tasks lost or added")
    if trace["task_id"].duplicated().any():
        problems.append("a task appears more than once")
    if trace[["start", "end"]].isna().any().any() or (trace["node"] < 0).any():
        problems.append("a task never ran")
        return problems
    if (trace["start"] < trace["arrival"] - eps).any():
        problems.append("a task started before it arrived")
    if (trace["end"] <= trace["start"]).any():
        problems.append("a task has no positive run time")
    n_gpu = nodes.n_gpu[trace["node"].to_numpy()]
    lists = [gpu_list(s) for s in trace["gpus"]]
    if any(len(gl) != k or len(set(gl)) != k for gl, k in zip(lists, trace["num_gpu"], strict=True)):
        problems.append("a task holds the wrong number of GPUs")
    if any(any(g >= cap or g < 0 for g in gl) for gl, cap in zip(lists, n_gpu, strict=True)):
        problems.append("a task holds a GPU its node does not have")
    spec = dict(zip(tasks.task_id.tolist(), tasks.gpu_spec.tolist(), strict=True))
    model = nodes.model[trace["node"].to_numpy()]
    for tid, m in zip(trace["task_id"], model, strict=True):
        s = spec.get(tid, "")
        if s and m not in s.split(GPU_SPEC_SEP):
            problems.append(f"task {tid} runs on model {m!r} outside its gpu_spec {s!r}")
            break
    for col, cap, what in (("cpu_milli", nodes.cpu_milli, "CPU"), ("memory_mib", nodes.memory_mib, "memory")):
        peak = _peak_load(trace["node"].to_numpy(), trace["start"].to_numpy(), trace["end"].to_numpy(),
                          trace[col].to_numpy(dtype=np.float64))
        if any(peak.get(n, 0.0) > cap[n] + eps for n in peak):
            problems.append(f"a node's {what} over capacity")
    ev = _gpu_events(trace)
    if len(ev):
        peak = _peak_load(ev["node"].to_numpy() * 64 + ev["gpu"].to_numpy(), ev["start"].to_numpy(),
                          ev["end"].to_numpy(), ev["milli"].to_numpy(dtype=np.float64))
        if any(v > MILLI + eps for v in peak.values()):
            problems.append("a GPU shared beyond 1000 milli")
    return problems


def _peak_load(key: np.ndarray, start: np.ndarray, end: np.ndarray, amount: np.ndarray) -> dict[int, float]:
    """Per key, the largest total ``amount`` held at one instant (releases before starts at a tie)."""
    out: dict[int, float] = {}
    df = pd.DataFrame({"k": np.concatenate([key, key]), "t": np.concatenate([start, end]),
                       "d": np.concatenate([amount, -amount]), "o": np.r_[np.ones(len(key)), np.zeros(len(key))]})
    for k, g in df.sort_values(["k", "t", "o"], kind="stable").groupby("k"):
        out[int(k)] = float(np.cumsum(g["d"].to_numpy()).max())
    return out
