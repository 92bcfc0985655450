"""PNG figures of a policy comparison (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hybridsched.io import atomic_path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_comparison_pngs(traces: dict[str, pd.DataFrame], table: pd.DataFrame, util: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Latency CDF, utilisation per device, and energy/cost bars; returns the written paths."""
    plt = _pyplot()
    paths = []

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, tr in traces.items():
        lat = np.sort((tr["end"] - tr["arrival"]).to_numpy())
        ax.plot(lat, np.arange(1, len(lat) + 1) / len(lat), label=name)
    ax.set(xscale="log", xlabel="latency (s, log)", ylabel="fraction of tasks", title="Latency CDF per policy")
    ax.legend()
    paths.append(_save(fig, out_dir / "latency_cdf.png"))

    piv = util.pivot(index="policy", columns="device", values="utilisation")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    piv.plot.bar(ax=ax)
    ax.set(ylabel="utilisation", title="Device utilisation per policy", ylim=(0, 1))
    paths.append(_save(fig, out_dir / "utilisation.png"))

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    table["energy_j"].plot.bar(ax=axes[0], title="Energy (J)")
    table["cost_usd"].plot.bar(ax=axes[1], title="Cost ($)")
    paths.append(_save(fig, out_dir / "energy_cost.png"))
    return paths


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def save_importance_png(importance: dict[str, float], path: Path, title: str = "Feature importance") -> Path:
    """Horizontal bars of feature importances, largest on top."""
    plt = _pyplot()
    items = sorted(importance.items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(items) + 1.5))
    ax.barh([k for k, _ in items], [v for _, v in items])
    ax.set(xlabel="drop in held-out R² when the feature is shuffled", title=title)
    return _save(fig, Path(path))


def save_axes(ax, path: Path) -> Path:
    """Save the figure of a matplotlib Axes (e.g. from optuna.visualization.matplotlib)."""
    _pyplot()
    fig = ax.figure if hasattr(ax, "figure") else ax[0].figure
    return _save(fig, Path(path))


def save_step_lines(series: dict[str, tuple[np.ndarray, np.ndarray]], path: Path, title: str, ylabel: str) -> Path:
    """One step line per name from (times, values on the intervals between them)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, (t, v) in series.items():
        ax.step(t[:-1] - t[0], v, where="post", label=name, linewidth=0.9)
    ax.set(xlabel="time since first arrival (s)", ylabel=ylabel, title=title)
    ax.legend(fontsize=8)
    return _save(fig, path)


def save_band_lines(series: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], path: Path,
                    xlabel: str, ylabel: str, title: str) -> Path:
    """One median line per name with its shaded band: ``series[name] = (x, median, lo, hi)``."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for name, (x, med, lo, hi) in series.items():
        (line,) = ax.plot(x, med, label=name, lw=1.4)
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, lw=0)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, Path(path))
