"""Gantt charts of per-task traces of the machine kind: which device ran what, in a window.

The live dashboard draws the last simulated minute per device; :func:`plot_gantt` draws the
same view for a window of each policy's trace (for ``evaluate``): one panel per policy, one
row per device (CPU, GPU 0..), one bar per task part, coloured by task.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd


def parts_in_window(trace: pd.DataFrame, start: float, window_s: float) -> pd.DataFrame:
    """The task parts of one policy's trace overlapping ``[start, start + window_s]``:
    columns device (0 = CPU, 1 + gpu), start, end, task_id."""
    end = start + window_s
    cpu = trace[trace["cpu_start"].notna()]
    gpu = trace[trace["gpu_start"].notna()]
    parts = pd.concat([
        pd.DataFrame({"device": 0, "start": cpu["cpu_start"], "end": cpu["cpu_end"], "task_id": cpu["task_id"]}),
        pd.DataFrame({"device": 1 + gpu["gpu"].astype(int), "start": gpu["gpu_start"], "end": gpu["gpu_end"],
                      "task_id": gpu["task_id"]}),
    ], ignore_index=True)
    return parts[(parts["end"] >= start) & (parts["start"] <= end)].reset_index(drop=True)


def default_start(traces: dict[str, pd.DataFrame]) -> float:
    """A representative window start: the median arrival (past the warm-up, before the drain)."""
    arrivals = np.concatenate([t["arrival"].to_numpy() for t in traces.values()])
    return float(np.median(arrivals)) if len(arrivals) else 0.0


def plot_gantt(traces: dict[str, pd.DataFrame], path: str | Path, window_s: float = 60.0,
               start: float | None = None, n_devices: int | None = None) -> Path:
    """One panel per policy with its devices' parts in the same window; written atomically."""
    from hybridsched.io import atomic_path
    from hybridsched.plots import _pyplot

    plt = _pyplot()

    if not traces:
        raise ValueError("plot_gantt: no traces")
    t0 = default_start(traces) if start is None else float(start)
    if n_devices is None:
        n_devices = 1 + max(int(t["gpu"].max()) + 1 if len(t) else 0 for t in traces.values())
    names = sorted(traces)
    fig, axes = plt.subplots(len(names), 1, figsize=(11, 1.0 + 0.45 * n_devices * len(names)), sharex=True,
                             squeeze=False)
    cmap = plt.get_cmap("tab20")
    for ax, name in zip(axes[:, 0], names):
        p = parts_in_window(traces[name], t0, window_s)
        for d in range(n_devices):
            q = p[p["device"] == d]
            ax.broken_barh(list(zip(q["start"], q["end"] - q["start"])), (d - 0.4, 0.8),
                           facecolors=[cmap(int(i) % 20) for i in q["task_id"]], linewidth=0)
        ax.set_yticks(range(n_devices), ["CPU"] + [f"GPU {g}" for g in range(n_devices - 1)])
        ax.set_ylim(n_devices - 0.5, -0.5)
        ax.set_title(name, fontsize=9, loc="left")
    axes[-1, 0].set_xlim(t0, t0 + window_s)
    axes[-1, 0].set_xlabel("time (s)")
    fig.tight_layout()
    out = Path(path)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=110, format=out.suffix.lstrip(".") or "png")
    plt.close(fig)
    return out
