"""Figures of a serving comparison: latency CDF and SLO violations per class, percentile bars,
wait histograms, SLO attainment vs load, and the profile's latency curves."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hybridsched.plots import _pyplot, _save, policy_colours


def save_pngs(traces: dict[str, pd.DataFrame], table: pd.DataFrame, sweep: pd.DataFrame | None,
              classes: tuple[str, ...], out: Path) -> list[Path]:
    """Write the evaluate stage's PNGs under ``out``; returns their paths.  Each policy has its
    colour of :func:`policy_colours` over the traces' policies in every chart."""
    plt = _pyplot()
    colours = policy_colours(list(traces) + (list(sweep["policy"].unique()) if sweep is not None else []))
    paths = []
    fig, axes = plt.subplots(1, len(classes), figsize=(5 * len(classes), 4), squeeze=False)
    for ax, c in zip(axes[0], classes, strict=True):
        for name, tr in traces.items():
            lat = np.sort(tr.loc[(tr["cls"] == c) & ~tr["dropped"], "latency"].to_numpy() * 1e3)
            if len(lat):
                ax.plot(lat, np.arange(1, len(lat) + 1) / len(lat), label=name, color=colours[name])
        ax.set(xscale="log", xlabel="end-to-end latency (ms, log)", ylabel="fraction served", title=f"{c}: latency CDF")
    axes[0][0].legend(fontsize=8)
    paths.append(_save(fig, out / "latency_cdf.png"))

    cols = [f"{c}.violation_rate" for c in classes if f"{c}.violation_rate" in table]
    fig, ax = plt.subplots(figsize=(7, 4))
    table[cols].rename(columns=lambda k: k.split(".")[0]).plot.bar(ax=ax)
    ax.set(ylabel="SLO violation rate (drops included)", title="SLO violations per class", ylim=(0, 1))
    paths.append(_save(fig, out / "slo_violations.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    table[["p50_ms", "p95_ms", "p99_ms"]].plot.bar(ax=ax, logy=True)
    ax.set(ylabel="latency (ms, log)", title="Latency percentiles per policy")
    paths.append(_save(fig, out / "percentiles.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, tr in traces.items():
        w = tr.loc[~tr["dropped"], "wait"].to_numpy() * 1e3
        ax.hist(w, bins=50, histtype="step", label=name, color=colours[name])
    ax.set(xlabel="wait (ms)", ylabel="requests", yscale="log", title="Wait time histogram")
    ax.legend(fontsize=8)
    paths.append(_save(fig, out / "wait_hist.png"))

    if sweep is not None and len(sweep):
        fig, ax = plt.subplots(figsize=(7, 4))
        for name, g in sweep.groupby("policy"):
            ax.plot(g["rate"], g["slo_attainment"], marker="o", label=name, color=colours[name])
        ax.set(xlabel="offered load (requests/s)", ylabel="SLO attainment", title="SLO attainment vs load", ylim=(0, 1.02))
        ax.legend(fontsize=8)
        paths.append(_save(fig, out / "attainment_vs_load.png"))
    return paths


def save_profile_png(table: pd.DataFrame, path: Path) -> Path:
    """Latency vs batch per (model, backend); fitted points hollow."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (m, b), g in table.groupby(["model", "backend"]):
        g = g.sort_values("batch")
        line, = ax.plot(g["batch"], g["latency_ms"], label=f"{m}/{b}")
        fit = g["fitted"].astype(bool)
        ax.scatter(g.loc[~fit, "batch"], g.loc[~fit, "latency_ms"], color=line.get_color())
        ax.scatter(g.loc[fit, "batch"], g.loc[fit, "latency_ms"], facecolors="none", edgecolors=line.get_color())
    ax.set(xscale="log", yscale="log", xlabel="batch size", ylabel="latency (ms)",
           title="Inference latency (filled: measured, hollow: fitted)")
    ax.legend(fontsize=8)
    return _save(fig, path)
