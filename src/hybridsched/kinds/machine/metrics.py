"""Everything computed from a per-task trace: latency, utilisation, balance, energy, cost,
and an independent check of the trace's physical invariants."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybridsched.devices import Cluster

TRACE_COLUMNS = ("task_id", "policy", "arrival", "ready", "gpu", "fraction", "cpu_start", "cpu_end",
                 "gpu_start", "gpu_end", "gpu_mem_mb", "end", "wait", "energy_j")


def device_busy_seconds(trace: pd.DataFrame, n_gpus: int) -> np.ndarray:
    """Busy time per device (index 0 = CPU, 1.. = GPUs)."""
    busy = np.zeros(n_gpus + 1)
    busy[0] = np.nansum(trace["cpu_end"] - trace["cpu_start"])
    ran = trace["gpu_start"].notna()
    gpu_dur = (trace["gpu_end"] - trace["gpu_start"])[ran]
    busy[1:] = np.bincount(trace["gpu"][ran].to_numpy(), weights=gpu_dur.to_numpy(), minlength=n_gpus)[:n_gpus]
    return busy


def summarize(trace: pd.DataFrame, cluster: Cluster) -> dict[str, float]:
    """Scalar metrics of one policy's trace."""
    lat = (trace["end"] - trace["arrival"]).to_numpy()
    means = {"mean_latency": float(lat.mean()), "mean_wait": float(trace["wait"].mean()),
             "mean_fraction": float(trace["fraction"].mean())}
    quantiles = {f"p{q}_latency": float(np.percentile(lat, q)) for q in (50, 95, 99)}
    return finish_summary(len(trace), float(trace["arrival"].min()), float(trace["end"].max()),
                          device_busy_seconds(trace, cluster.n_gpus), float(trace["energy_j"].sum()),
                          means, quantiles, cluster)


def finish_summary(n: int, t0: float, t_end: float, busy: np.ndarray, busy_energy_j: float,
                   means: dict[str, float], quantiles: dict[str, float], cluster: Cluster) -> dict[str, float]:
    """The scalar metrics from run totals (shared by the in-memory and the streaming path):
    task count, first arrival, last end, busy seconds per device, energy of busy devices,
    and the latency means and quantiles already computed."""
    span = t_end - t0
    util = busy / span if span > 0 else np.zeros_like(busy)
    gpu_busy = busy[1:]
    idle_j = float(np.sum(cluster.idle_watts() * np.maximum(span - busy, 0.0)))
    energy = busy_energy_j + idle_j
    out = {
        "makespan": span,
        "mean_latency": means["mean_latency"],
        **{k: quantiles[k] for k in ("p50_latency", "p95_latency", "p99_latency")},
        "mean_wait": means["mean_wait"],
        "cpu_utilisation": float(util[0]),
        "gpu_utilisation": float(util[1:].mean()),
        # 1 = every GPU equally busy; 1/n_gpus = one GPU does all the GPU work
        "gpu_load_balance": float(gpu_busy.mean() / gpu_busy.max()) if gpu_busy.max() > 0 else 1.0,
        "mean_fraction": means["mean_fraction"],
        "energy_j": energy,
        "cost_usd": cluster.joules_to_dollars(energy),
        "throughput_tasks_per_s": n / span if span > 0 else float("nan"),
    }
    for g in range(cluster.n_gpus):
        out[f"gpu{g}_utilisation"] = float(util[g + 1])
    return out


def check_trace(trace: pd.DataFrame, cluster: Cluster, parents: dict[int, list[int]] | None = None) -> list[str]:
    """Problems found in a trace by reading it alone (empty list = all invariants hold)."""
    missing = [c for c in TRACE_COLUMNS if c not in trace.columns]
    if missing:
        return [f"not a trace: missing column(s) {', '.join(missing)}"]
    problems: list[str] = []
    if trace["task_id"].duplicated().any():
        problems.append("a task appears more than once")
    if trace["end"].isna().any():
        problems.append("a task never finished")
    eps = 1e-9
    parts = [("cpu", trace[["cpu_start", "cpu_end"]].dropna().to_numpy(), None)]
    ran = trace[trace["gpu_start"].notna()]
    for g in range(cluster.n_gpus):
        parts.append((f"gpu{g}", ran.loc[ran["gpu"] == g, ["gpu_start", "gpu_end"]].to_numpy(), None))
    for dev, se, _ in parts:
        se = se[np.argsort(se[:, 0], kind="stable")]
        if len(se) > 1 and np.any(se[1:, 0] < se[:-1, 1] - eps):
            problems.append(f"{dev} runs two parts at once")
    if (trace["gpu_mem_mb"] > cluster.gpu_mem_mb + eps).any():
        problems.append("GPU memory over capacity")
    starts = trace[["cpu_start", "gpu_start"]].min(axis=1)
    if (starts < trace["ready"] - eps).any() or (trace["ready"] < trace["arrival"] - eps).any():
        problems.append("a part started before its task was ready")
    if (trace["end"] < trace[["cpu_end", "gpu_end"]].max(axis=1) - eps).any():
        problems.append("a task ended before one of its parts")
    if parents:
        end = dict(zip(trace["task_id"], trace["end"]))
        ready = dict(zip(trace["task_id"], trace["ready"]))
        for c, ps in parents.items():
            if any(ready[c] < end[p] - eps for p in ps):
                problems.append(f"task {c} was ready before a parent ended")
                break
    return problems
