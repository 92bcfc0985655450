"""PNG figures of a policy comparison (matplotlib, no display needed).

The per-policy charts of a comparison take their colours from :func:`policy_colours` over the
same policy names, so a policy keeps one colour across them (and in `dvc plots`); values that span more than a decade go on a log
axis (:func:`spans_decades`); charts with one line per policy draw the best ones in colour and
the rest as thin grey context, so the good policies are not lost among the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybridsched.io import atomic_path

BEST_LINES = 8  # policies drawn in colour on a chart with one line per policy; the rest in grey
OTHER_COLOUR = "#b0b0b0"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def palette() -> list[str]:
    """The policy colours, in order (hex): tab10's, their light tab20 partners, then tab20b and
    tab20c; without the greys, which mark the policies a chart draws only as context.  The
    `dvc plots` templates in .dvc/plots/ hold the same list."""
    plt = _pyplot()
    from matplotlib.colors import to_hex

    t20, t20b, t20c = (list(plt.get_cmap(n).colors) for n in ("tab20", "tab20b", "tab20c"))
    grey = {"#7f7f7f", "#c7c7c7"} | {to_hex(c) for c in t20c[16:]}
    return [h for h in (to_hex(c) for c in t20[::2] + t20[1::2] + t20b + t20c) if h not in grey]


def policy_colours(names: Iterable[str]) -> dict[str, str]:
    """One colour per policy, assigned over the sorted names: the charts of one comparison get
    the same map, so each policy has the same colour in all of them.  54 distinct colours
    (:func:`palette`); more policies than that repeat them."""
    ordered = sorted(set(names))
    colours = palette()
    return {name: colours[k % len(colours)] for k, name in enumerate(ordered)}


def spans_decades(values: Iterable[float], ratio: float = 10.0) -> bool:
    """Whether the positive finite values span more than ``ratio`` (max / min): a log axis then
    keeps the small ones readable next to the large ones."""
    v = np.asarray(list(values), dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    return bool(len(v)) and float(v.max() / v.min()) > ratio


def stage_plot_dir(metrics_dir: Path, stage: str) -> Path:
    """``<metrics_dir>/plots/<stage>/``: the folder (a DVC output) of a stage's images that exist
    only when the stage has something to draw (the profile, tune and scenarios stages); the
    folder stays empty otherwise, so no image stands in for a chart."""
    return Path(metrics_dir) / "plots" / stage


def mean_latency_order(traces: dict[str, pd.DataFrame]) -> list[str]:
    """The policies by mean latency (``end - arrival``) of their traces, best first; ties by name."""
    means = {n: float((tr["end"] - tr["arrival"]).mean()) if len(tr) else np.inf for n, tr in traces.items()}
    return sorted(means, key=lambda n: (np.nan_to_num(means[n], nan=np.inf), n))


def save_comparison_pngs(traces: dict[str, pd.DataFrame], table: pd.DataFrame, util: pd.DataFrame, out_dir: Path,
                         best: int = BEST_LINES) -> list[Path]:
    """Latency CDF (the ``best`` policies by mean latency in colour, the others grey),
    utilisation per policy and device (a heat map), and energy/cost bars; returns the written
    paths.  Every chart orders the policies by mean latency, best first."""
    plt = _pyplot()
    colours = policy_colours(list(traces) + list(table.index) + list(util["policy"].unique()))
    order = mean_latency_order(traces)
    paths = [_save(_latency_cdf(plt, traces, order, colours, best), out_dir / "latency_cdf.png")]
    paths.append(_save(_utilisation_map(plt, util, order), out_dir / "utilisation.png"))
    paths.append(_save(_energy_cost_bars(plt, table, order, colours), out_dir / "energy_cost.png"))
    return paths


def _latency_cdf(plt, traces: dict[str, pd.DataFrame], order: list[str], colours: dict, best: int):
    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    shown = order[:best]
    for name in reversed(order):  # the best drawn last, on top
        lat = np.sort((traces[name]["end"] - traces[name]["arrival"]).to_numpy())
        if not len(lat):
            continue
        y = np.arange(1, len(lat) + 1) / len(lat)
        if name in shown:
            ax.plot(lat, y, color=colours[name], lw=1.6, label=f"{name} ({np.mean(lat):.3g} s)")
        else:
            ax.plot(lat, y, color=OTHER_COLOUR, lw=0.8, zorder=1)
    handles, labels = ax.get_legend_handles_labels()
    rank = {n: k for k, n in enumerate(shown)}
    pairs = sorted(zip(handles, labels, strict=True), key=lambda hl: rank[hl[1].split(" (")[0]])
    handles, labels = [h for h, _ in pairs], [lab for _, lab in pairs]
    rest = len(order) - len(shown)
    if rest > 0:
        handles.append(plt.Line2D([], [], color=OTHER_COLOUR, lw=0.8))
        labels.append(f"{rest} other policies")
    ax.set(xscale="log", xlabel="latency (s, log)", ylabel="fraction of tasks",
           title=f"Latency CDF, the {len(shown)} best policies by mean latency" if rest > 0 else "Latency CDF per policy")
    ax.grid(alpha=0.3, which="both")
    ax.legend(handles, labels, title="policy (mean latency)", fontsize=8, title_fontsize=8,
              loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def _utilisation_map(plt, util: pd.DataFrame, order: list[str]):
    """A policy x device heat map with the value in each cell: one label per policy and per
    device, whatever their number."""
    piv = util.pivot_table(index="policy", columns="device", values="utilisation", aggfunc="mean", sort=False)
    rows = [p for p in order if p in piv.index] + sorted(p for p in piv.index if p not in order)
    piv = piv.loc[rows]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(piv.columns) + 3.2), 0.26 * len(piv) + 1.6))
    im = ax.imshow(piv.to_numpy(dtype=float), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(piv.columns)), [str(c) for c in piv.columns], rotation=30 if len(piv.columns) > 6 else 0,
                  ha="right" if len(piv.columns) > 6 else "center")
    ax.set_yticks(range(len(piv)), list(piv.index))
    for (i, j), v in np.ndenumerate(piv.to_numpy(dtype=float)):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="black" if v > 0.6 else "white")
    fig.colorbar(im, ax=ax, label="utilisation", fraction=0.04)
    ax.set(title="Device utilisation per policy (best mean latency on top)")
    return fig


def _energy_cost_bars(plt, table: pd.DataFrame, order: list[str], colours: dict):
    rows = [p for p in order if p in table.index] + [p for p in table.index if p not in order]
    rows = rows[::-1]  # barh draws bottom-up: the best ends on top
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.26 * len(rows) + 1.6), sharey=True)
    for ax, col, title in zip(axes, ("energy_j", "cost_usd"), ("Energy (J)", "Cost ($)"), strict=True):
        values = table.loc[rows, col].astype(float).to_numpy()
        ax.barh(range(len(rows)), np.nan_to_num(values, nan=0.0), color=[colours[p] for p in rows])
        if spans_decades(values):
            ax.set_xscale("log")
        else:  # few ticks in plain or scientific notation: long tick labels would overlap
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(5))
            ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 4))
        ax.set(title=title + (", log" if spans_decades(values) else ""))
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(rows)), rows)
    fig.suptitle("Energy and cost per policy (best mean latency on top)")
    return fig


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


def save_step_lines(series: dict[str, tuple[np.ndarray, np.ndarray]], path: Path, title: str, ylabel: str,
                    order: Sequence[str] | None = None) -> Path:
    """One small panel per name (shared axes, in ``order``, best first) with its step line from
    (times, values on the intervals between them) in the policy's colour, and the first name's
    line in grey behind the others for comparison."""
    plt = _pyplot()
    names = [n for n in (order or sorted(series)) if n in series] + sorted(n for n in series if n not in (order or ()))
    colours = policy_colours(series)
    ncols = min(3, len(names)) or 1
    nrows = max(1, -(-len(names) // ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 1.9 * nrows + 0.8), sharex=True, sharey=True,
                             squeeze=False)
    ref = names[0] if names else None
    for ax, name in zip(axes.flat, names, strict=False):
        if ref is not None and name != ref:
            t, v = series[ref]
            ax.step(t[:-1] - t[0], v, where="post", color=OTHER_COLOUR, lw=0.8)
        t, v = series[name]
        ax.step(t[:-1] - t[0], v, where="post", color=colours[name], lw=1.0)
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
    for k, ax in enumerate(axes.flat):
        if k >= len(names):
            ax.set_visible(False)
        elif k + ncols >= len(names):  # the lowest panel of its column carries the time axis
            ax.tick_params(labelbottom=True)
            ax.set_xlabel("time since first arrival (s)", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel, fontsize=8)
    fig.suptitle(title + (f" (grey in every panel: {ref})" if len(names) > 1 else ""))
    return _save(fig, Path(path))


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


HATCHES = ("", "//", "..", "xx", "\\\\", "++")  # one per dispatch mode on the headline bars


def save_headline_bars(head: pd.DataFrame, column: str, path: Path, xlabel: str, title: str,
                       bound: float | None = None) -> Path:
    """One horizontal bar per policy of ``head`` (the ranked headline: best on top) in the
    policy's colour (:func:`policy_colours`), hatched by dispatch mode when there are several,
    the best of each mode in bold, the bound as a dashed line; a log axis when the values span
    more than a decade."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    rows = head.iloc[::-1]  # barh draws bottom-up: the best ends on top
    values = rows[column].astype(float).to_numpy()
    modes = list(dict.fromkeys(head["dispatch"]))
    hatch = {m: HATCHES[k % len(HATCHES)] if len(modes) > 1 else "" for k, m in enumerate(modes)}
    colours = policy_colours(head.index.astype(str))
    fig, ax = plt.subplots(figsize=(7.5, 0.28 * len(rows) + 1.6))
    y = np.arange(len(rows))
    ax.barh(y, np.nan_to_num(values, nan=0.0), color=[colours[str(p)] for p in rows.index],
            hatch=[hatch[m] for m in rows["dispatch"]], edgecolor="white", linewidth=0)
    ax.set_yticks(y, list(rows.index))
    for label, best in zip(ax.get_yticklabels(), rows["best"] == "*", strict=True):
        if best:
            label.set_fontweight("bold")
    finite = values[np.isfinite(values) & (values > 0)]
    if spans_decades(values):
        ax.set_xscale("log")
        ax.set_xlim(left=min(finite.min(), bound or np.inf) / 1.5)
    for k, v in enumerate(values):  # the value at the end of its bar: close ones stay readable
        if np.isfinite(v):
            ax.annotate(f"{v:.4g}", (v, k), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
    handles: list[Any] = []
    if len(modes) > 1:
        handles = [Patch(facecolor="#dddddd", edgecolor="black", hatch=hatch[m], label=f"{m} dispatch") for m in modes]
    if bound is not None:
        handles.append(ax.axvline(bound, color="black", linestyle="--", linewidth=1.0, label=f"bound {bound:.4g}"))
    if handles:
        ax.legend(handles=handles, fontsize=8, loc="best")
    ax.set(xlabel=xlabel + (", log" if spans_decades(values) else ""), title=title + " (bold: best of its mode)")
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, Path(path))
