"""From per-pod curves to the paper's figures: 1 % buckets of x, median and 25-75 % band over
seeds, the metrics JSON, the table at chosen x, the headline against packing, and the PNGs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybridsched.kinds.cluster.fgd_protocol.protocol import Curve

MEASURES = ("unallocated_gpu_pct", "frag_pct", "frag_ratio_pct")
STATS = ("median", "q25", "q75")


def bucket_means(curve: Curve, n_buckets: int) -> dict[str, np.ndarray]:
    """Per bucket ``b`` (events with ``b <= x < b + 1``; x past the last bucket counts in it),
    the mean of each measure over its events.  An empty bucket holds the value after the last
    event before it (nothing changed in between)."""
    b = np.clip(np.floor(curve.x).astype(np.int64), 0, n_buckets - 1)
    counts = np.bincount(b, minlength=n_buckets)
    before = np.maximum(np.searchsorted(b, np.arange(n_buckets), side="right") - 1, 0)  # x is non-decreasing
    out = {}
    for m in MEASURES:
        y = getattr(curve, m)
        sums = np.bincount(b, weights=y, minlength=n_buckets)
        out[m] = np.where(counts > 0, sums / np.maximum(counts, 1), y[before])
    return out


def bucket_means_rounded(curve: Curve, n_buckets: int) -> dict[str, np.ndarray]:
    """The Go simulator's analysis (``k8s_rules`` R13): bucket ``b`` holds the events with x
    rounded half to even to ``b`` (x past the last bucket count nowhere); unallocated GPU % is
    rounded to 0.01 per event first.  An empty bucket takes the mean over the events of buckets
    ``b - 1 .. b + 1``; if those are empty too, the state after the last event before it."""
    b = np.rint(curve.x).astype(np.int64)  # numpy rounds half to even, as Python's round
    keep = (b >= 0) & (b < n_buckets)
    bk = b[keep]
    counts = np.bincount(bk, minlength=n_buckets)
    near = counts + np.concatenate([[0], counts[:-1]]) + np.concatenate([counts[1:], [0]])
    before = np.maximum(np.searchsorted(np.maximum.accumulate(b), np.arange(n_buckets), side="right") - 1, 0)
    out = {}
    for m in MEASURES:
        y = getattr(curve, m)
        if m == "unallocated_gpu_pct":
            y = np.round(y, 2)
        sums = np.bincount(bk, weights=y[keep], minlength=n_buckets)
        sums_near = sums + np.concatenate([[0.0], sums[:-1]]) + np.concatenate([sums[1:], [0.0]])
        out[m] = np.where(counts > 0, sums / np.maximum(counts, 1),
                          np.where(near > 0, sums_near / np.maximum(near, 1), y[before]))
    return out


BUCKETS = {"floor": bucket_means, "round": bucket_means_rounded}


def band(per_seed: list[dict[str, np.ndarray]]) -> dict[str, dict[str, np.ndarray]]:
    """Median, 25 % and 75 % (linear interpolation) over seeds of every measure, per bucket."""
    out = {}
    for m in MEASURES:
        a = np.stack([s[m] for s in per_seed])
        q25, med, q75 = np.percentile(a, [25, 50, 75], axis=0)
        out[m] = {"median": med, "q25": q25, "q75": q75}
    return out


def metrics_json(bands: dict[str, dict], xs: list[int]) -> dict[str, Any]:
    """``{policy: {"<x>": {measure: {"median", "q25", "q75"}}}}`` at bucket ``x`` for each x."""
    return {p: {str(x): {m: {s: round(float(b[m][s][x]), 4) for s in STATS} for m in MEASURES} for x in xs}
            for p, b in bands.items()}


def table(bands: dict[str, dict], xs: list[int], capacity_gpus: float) -> pd.DataFrame:
    """One row per (policy, x): every measure's median and band, and unallocated GPUs."""
    rows = []
    for p, b in bands.items():
        for x in xs:
            row: dict[str, Any] = {"policy": p, "x": x}
            for m in MEASURES:
                for s in STATS:
                    row[f"{m}_{s}"] = round(float(b[m][s][x]), 3)
            med = float(b["unallocated_gpu_pct"]["median"][x])
            row["unallocated_gpus_median"] = round(med / 100 * capacity_gpus, 1)
            rows.append(row)
    return pd.DataFrame(rows)


def markdown(tab: pd.DataFrame) -> str:
    """Two policy x x grids: unallocated GPU % and fragmentation %, median [q25, q75]."""
    parts = []
    for m, title in (("unallocated_gpu_pct", "Unallocated GPU (% of capacity)"),
                     ("frag_pct", "GPU fragmentation (% of capacity)")):
        cell = tab.assign(v=[f"{r[m + '_median']:.2f} [{r[m + '_q25']:.2f}, {r[m + '_q75']:.2f}]"
                             for _, r in tab.iterrows()])
        grid = cell.pivot(index="policy", columns="x", values="v").reindex(tab["policy"].unique())
        head = "| policy | " + " | ".join(f"x = {x}" for x in grid.columns) + " |"
        sep = "|---" * (len(grid.columns) + 1) + "|"
        body = [f"| {p} | " + " | ".join(grid.loc[p]) + " |" for p in grid.index]
        parts.append(f"**{title}**, median [25 %, 75 %] over seeds\n\n" + "\n".join([head, sep, *body]))
    return "\n\n".join(parts) + "\n"


def headline(bands: dict[str, dict], fgd: str, packing: list[str], xs: list[int], capacity_gpus: float,
             from_x: int) -> dict[str, Any]:
    """FGD against the best packing policy at each x (median unallocated GPUs): the reduction in
    GPUs and in % of the packing policy's unallocated GPUs, at ``xs`` and its maximum over
    every bucket from ``from_x`` on (the paper: "up to 49 %, 290 more GPUs")."""
    med = {p: bands[p]["unallocated_gpu_pct"]["median"] for p in [fgd, *packing]}
    pack = np.stack([med[p] for p in packing])
    best = pack.min(axis=0)
    best_name = [packing[j] for j in pack.argmin(axis=0)]
    gpus = (best - med[fgd]) / 100 * capacity_gpus
    pct = np.divide(best - med[fgd], best, out=np.zeros_like(best), where=best > 0) * 100

    def at(x: int) -> dict[str, Any]:
        return {"x": int(x), "best_packing": best_name[x],
                "best_packing_unallocated_gpus": round(float(best[x]) / 100 * capacity_gpus, 1),
                "fgd_unallocated_gpus": round(float(med[fgd][x]) / 100 * capacity_gpus, 1),
                "gpus_saved": round(float(gpus[x]), 1), "reduction_pct": round(float(pct[x]), 2)}

    tail = np.arange(from_x, len(best))
    return {"capacity_gpus": capacity_gpus, "fgd": fgd, "packing": packing, "at": [at(x) for x in xs],
            "max_reduction_pct": at(int(tail[np.argmax(pct[tail])])),
            "max_gpus_saved": at(int(tail[np.argmax(gpus[tail])]))}


def save_figures(bands: dict[str, dict], out_dir: Path, name: str, title: str, from_x: int = 0) -> list[Path]:
    """Unallocated GPU % and fragmentation % against x (from ``from_x``): median lines with
    25-75 % bands."""
    from hybridsched.plots import save_band_lines

    paths = []
    for m, ylabel, stem in (("unallocated_gpu_pct", "unallocated GPU (% of capacity)", "unallocated"),
                            ("frag_pct", "GPU fragmentation (% of capacity)", "frag")):
        cut = slice(from_x, None)
        series = {p: (np.arange(len(b[m]["median"]))[cut], b[m]["median"][cut], b[m]["q25"][cut], b[m]["q75"][cut])
                  for p, b in bands.items()}
        paths.append(save_band_lines(series, out_dir / f"{name}_{stem}.png",
                                     xlabel="arrived GPU requests (% of cluster GPU capacity)", ylabel=ylabel,
                                     title=f"{title}: {ylabel.split(' (')[0]}"))
    return paths


def curves_frame(bands: dict[str, dict]) -> pd.DataFrame:
    """Long table of every 1 % bucket (for DVC plots): policy, x, measure stats."""
    rows = []
    for p, b in bands.items():
        for x in range(len(b[MEASURES[0]]["median"])):
            stats = {f"{m}_{s}": round(float(b[m][s][x]), 4) for m in MEASURES for s in STATS}
            rows.append({"policy": p, "x": x, **stats})
    return pd.DataFrame(rows)
