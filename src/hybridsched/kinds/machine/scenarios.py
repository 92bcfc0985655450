"""Scenarios beyond the configured workloads: held-out random draws, and a load sweep.

*Offered load* is the arrival rate times the mean least device-seconds a task needs
(``min(C, (1 - m) C + m (G + L))``, its work under the most work-efficient split),
divided by the number of devices: the share of the machine a perfectly packed schedule
would keep busy. ``rate_for_load`` inverts it for a workload's task mix.

Held-out draws (:data:`HELDOUT_RANGES`) come from their own seed, which no training or
tuning run uses, so a policy evaluated there has never seen that workload.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.bound_memo import memo_lower_bound
from hybridsched.kinds.machine.bounds_lp import LPSettings
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.metrics import summarize
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.workload import WorkloadSpec, generate, spec_from_config

# The documented range of held-out workloads (docs/machine.md, "Held-out draws"). Pairs are uniform ranges;
# "log" ranges are log-uniform.
HELDOUT_RANGES: dict[str, Any] = {
    "load": (0.4, 0.95),             # offered load; the rate follows from the drawn task mix
    "intensity_low": (0.0, 0.6),     # intensity_range = [low, low + width], capped at 1
    "intensity_width": (0.2, 1.0),
    "memory_low_mb": ("log", 50.0, 4000.0),  # memory_range = [low, low * ratio]
    "memory_ratio": ("log", 2.0, 20.0),
    "size_high": ("log", 50.0, 800.0),       # size_range = [1, high] GFLOP
    "burst_amplitude": (0.0, 0.8),
}
HELDOUT_SEED = 20_251_114  # never used by generate, tune or train


def _draw(rng: np.random.Generator, r: tuple) -> float:
    if r[0] == "log":
        return float(np.exp(rng.uniform(np.log(r[1]), np.log(r[2]))))
    return float(rng.uniform(r[0], r[1]))


def heldout_workloads(n_draws: int, cluster: Cluster, seed: int = HELDOUT_SEED) -> list[dict[str, Any]]:
    """``n_draws`` workload configs (WorkloadSpec keys plus ``name`` and ``offered_load``)."""
    if n_draws < 1:
        raise HybridschedError(f"heldout.n_draws must be >= 1, got {n_draws}")
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_draws):
        p = {name: _draw(rng, r) for name, r in HELDOUT_RANGES.items()}
        lo = p["intensity_low"]
        spec = {"intensity_range": (lo, min(1.0, lo + p["intensity_width"])),
                "memory_range": (p["memory_low_mb"], min(p["memory_low_mb"] * p["memory_ratio"], cluster.max_task_memory_mb)),
                "size_range": (1.0, p["size_high"]), "burst_amplitude": p["burst_amplitude"], "burst_period_s": 300.0}
        rate = rate_for_load(WorkloadSpec(**spec), cluster, p["load"])
        out.append({"name": f"heldout{k}", "offered_load": p["load"], "rate": rate, **spec})
    return out


def mean_work(spec: WorkloadSpec, cluster: Cluster, n: int = 20_000, seed: int = 12345) -> float:
    """Mean least device-seconds per task of ``spec``'s task mix (a large seeded sample)."""
    t = generate(spec, n, np.random.default_rng(seed), cpu_gflops=cluster.cpu_gflops)
    cpu = cluster.cpu_seconds(t.size)
    gpu = cluster.gpu_seconds(t.size, t.intensity, t.memory_mb) + cluster.launch_s
    m = cluster.max_fraction(t.memory_mb)
    return float(np.mean(np.minimum(cpu, (1.0 - m) * cpu + m * gpu)))


def rate_for_load(spec: WorkloadSpec, cluster: Cluster, load: float) -> float:
    """The arrival rate (tasks/s) at which ``spec``'s task mix offers ``load`` of the machine."""
    if not load > 0:
        raise HybridschedError(f"offered load must be > 0, got {load}")
    return load * cluster.n_devices / mean_work(spec, cluster)


@dataclass(frozen=True)
class SweepSettings:
    """The ``load_sweep`` config block."""

    loads: tuple[float, ...] = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1)
    n_tasks: int = 1500
    seed: int = 0
    lp: bool = True

    def __post_init__(self) -> None:
        if not self.loads or min(self.loads) <= 0:
            raise HybridschedError(f"load_sweep.loads must be a non-empty list of values > 0, got {list(self.loads)}")
        if self.n_tasks < 2:
            raise HybridschedError(f"load_sweep.n_tasks must be >= 2, got {self.n_tasks}")


def evaluate_workload(tasks, cluster: Cluster, policies: dict[str, Any], seed: int,
                      lp: bool | LPSettings = True, bound_cache: str | Path | None = None) -> pd.DataFrame:
    """One row per policy (mean, P95, P99 latency, energy) plus the bounds, on one workload.

    ``lp``: False skips the LP bound, True solves it on the default grid, an ``LPSettings`` on that
    grid; ``bound_cache``: the LP bound memo's folder (``paths.bound_cache``; None: none)."""
    real = cluster.sample_noise(len(tasks), np.random.default_rng(seed))
    lb = memo_lower_bound(tasks, cluster, real, lp if isinstance(lp, LPSettings) else (LPSettings() if lp else None),
                          bound_cache)
    rows = []
    for name, make in policies.items():
        m = summarize(simulate(tasks, cluster, make(), real).to_frame(), cluster)
        rows.append({"policy": name, "mean_latency": m["mean_latency"], "p95_latency": m["p95_latency"],
                     "p99_latency": m["p99_latency"], "energy_j": m["energy_j"]})
    df = pd.DataFrame(rows)
    return df.assign(bound_solo=lb.mean_latency_solo, bound_lp=lb.mean_latency_lp, bound=lb.mean_latency,
                     vs_bound=df["mean_latency"] / lb.mean_latency, lp_solve_s=lb.lp_solve_s)


def load_sweep(workload: dict[str, Any], cluster: Cluster, policies: dict[str, Callable[[], Any]],
               settings: SweepSettings, bound_cache: str | Path | None = None) -> pd.DataFrame:
    """Mean and P99 latency of every policy against offered load, with the bounds.

    ``workload`` is a workload config (its test split's task mix is used, its rate replaced);
    ``policies`` maps names to factories, so each run gets a fresh policy; ``bound_cache``: the
    LP bound memo's folder (None: none)."""
    spec = spec_from_config(workload, "test")
    frames = []
    for load in settings.loads:
        rate = rate_for_load(spec, cluster, load)
        s = WorkloadSpec(**{**{k: getattr(spec, k) for k in spec.__dataclass_fields__}, "rate": rate})
        tasks = generate(s, settings.n_tasks, np.random.default_rng(settings.seed), cpu_gflops=cluster.cpu_gflops)
        frames.append(evaluate_workload(tasks, cluster, policies, settings.seed, settings.lp, bound_cache)
                      .assign(offered_load=load, rate=rate))
    return pd.concat(frames, ignore_index=True)


def write_sweep(table: pd.DataFrame, out: Path, title: str) -> list[Path]:
    """``load_sweep.csv``, ``load_sweep.md`` and ``load_sweep.png`` (mean and P99 vs load) under ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hybridsched.io import atomic_path, write_frame, write_text

    out.mkdir(parents=True, exist_ok=True)
    csv, md, png = out / "load_sweep.csv", out / "load_sweep.md", out / "load_sweep.png"
    write_frame(csv, table)
    wide = table.pivot_table(index="policy", columns="offered_load", values="mean_latency")
    bounds = table.groupby("offered_load")[["bound_solo", "bound_lp"]].first().T
    body = pd.concat([wide, bounds.rename(index={"bound_solo": "bound (solo)", "bound_lp": "bound (LP)"})])
    write_text(md, f"Mean latency (s) by offered load: {title}\n\n" + body.to_markdown(floatfmt=".3g") + "\n")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, col in zip(axes, ("mean_latency", "p99_latency")):
        for name, g in table.groupby("policy"):
            ax.plot(g["offered_load"], g[col], marker="o", label=name)
        if col == "mean_latency":
            b = table.groupby("offered_load")[["bound_solo", "bound_lp"]].first()
            ax.plot(b.index, b["bound_lp"], "k--", label="bound (LP)")
            ax.plot(b.index, b["bound_solo"], "k:", label="bound (solo)")
        ax.set_yscale("log")
        ax.set_xlabel("offered load")
        ax.set_ylabel(f"{col.replace('_', ' ')} (s)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(png) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return [csv, md, png]


def policy_factories(cfg: dict[str, Any], names: list[str] | None) -> dict[str, Callable[[], Any]]:
    """Name -> factory of a fresh policy, from ``policies.machine.<name>`` (all of
    ``sim.policies.machine`` if None)."""
    from hybridsched.kinds.base import instantiate

    specs = cfg["policies"]["machine"]
    names = list(names or cfg["sim"]["policies"]["machine"] or specs)
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise HybridschedError(f"load_sweep.policies: unknown policy name(s) {unknown}; known: {sorted(specs)}")

    def factory(name: str) -> Callable[[], Any]:
        def make() -> Any:
            policy = instantiate(specs[name])
            policy.name = name
            return policy
        return make

    return {n: factory(n) for n in names}
