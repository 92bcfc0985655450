"""Serving metrics per policy and class, and an audit of a trace that is independent of the engine."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from hybridsched.kinds.serving.settings import ServingSettings

EPS = 1e-9


def check_trace(requests: pd.DataFrame, batches: pd.DataFrame, settings: ServingSettings) -> list[str]:
    """Physical and batching invariants; returns the problems found (empty = valid).

    Each request is served once or dropped; a batch holds only compatible requests (one group),
    at most ``max_batch`` samples, arrivals within ``window`` of its first request, starts after
    all of them arrived; batches on a lane never overlap; tokens in use never exceed capacity.
    """
    p: list[str] = []
    bid = requests["batch_id"].to_numpy()
    if (bid == -2).any():
        p.append(f"{int((bid == -2).sum())} request(s) never served nor dropped")
    served = requests[bid >= 0]
    if len(batches) and len(served):
        per = served.groupby("batch_id").agg(n=("request_id", "size"), groups=("group", "nunique"),
                                             samples=("size", "sum"), a_min=("arrival", "min"),
                                             a_max=("arrival", "max"), start=("start", "first"))
        b = batches.set_index("batch_id").loc[per.index]
        if (per["groups"] > 1).any():
            p.append(f"{int((per['groups'] > 1).sum())} batch(es) mix incompatible requests")
        if (b["group"].to_numpy() != served.groupby("batch_id")["group"].first().to_numpy()).any():
            p.append("a batch's group differs from its requests' group")
        if (per["samples"] > settings.max_batch).any():
            p.append(f"batch of {int(per['samples'].max())} samples exceeds max_batch {settings.max_batch}")
        if (per["samples"].to_numpy() != b["samples"].to_numpy()).any():
            p.append("a batch's sample count differs from its requests' sizes")
        if (per["a_max"] - per["a_min"] > settings.window_s + EPS).any():
            p.append(f"a batch spans {float((per['a_max'] - per['a_min']).max())} s of arrivals, > window "
                     f"{settings.window_s} s")
        if (per["start"] < per["a_max"] - EPS).any():
            p.append("a batch starts before one of its requests arrived")
        if len(per) != len(batches):
            p.append(f"{len(batches) - len(per)} empty batch(es)")
    for lane, bl in batches.sort_values(["lane", "start"]).groupby("lane"):
        if (bl["start"].to_numpy()[1:] < bl["end"].to_numpy()[:-1] - EPS).any():
            p.append(f"lane {int(lane)} runs two batches at once")
        if lane < 0 or lane >= settings.lanes:
            p.append(f"lane {int(lane)} does not exist")
    peak = peak_tokens(batches)
    if peak > settings.token_capacity + EPS:
        p.append(f"tokens in use reach {peak}, over capacity {settings.token_capacity:g}")
    if requests["request_id"].duplicated().any():
        p.append("a request appears twice")
    return p


def peak_tokens(batches: pd.DataFrame) -> float:
    """The most tokens held at once (a batch holds its tokens over [start, end))."""
    if not len(batches):
        return 0.0
    t = np.concatenate([batches["start"].to_numpy(), batches["end"].to_numpy()])
    d = np.concatenate([batches["tokens"].to_numpy(), -batches["tokens"].to_numpy()])
    order = np.lexsort((d, t))  # at equal times releases (negative) come first
    return float(np.max(np.cumsum(d[order])))


def jain(x: np.ndarray) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 = equal, 1/n = one gets everything."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    return float(x.sum() ** 2 / (len(x) * (x**2).sum())) if len(x) and (x**2).sum() > 0 else float("nan")


def _block(df: pd.DataFrame, horizon: float) -> dict[str, float]:
    served = df[~df["dropped"]]
    lat = served["latency"].to_numpy()
    q = np.quantile(lat, [0.5, 0.95, 0.99]) if len(lat) else np.full(3, np.nan)
    n = max(len(df), 1)
    return {"n": len(df), "p50_ms": q[0] * 1e3, "p95_ms": q[1] * 1e3, "p99_ms": q[2] * 1e3,
            "mean_latency": float(lat.mean()) if len(lat) else float("nan"),  # s, as on every kind
            "p95_latency": float(q[1]),
            "mean_latency_ms": float(lat.mean() * 1e3) if len(lat) else float("nan"),
            "mean_wait_ms": float(served["wait"].mean() * 1e3) if len(lat) else float("nan"),
            "mean_service_ms": float(served["service"].mean() * 1e3) if len(lat) else float("nan"),
            "slo_attainment": float(df["met_slo"].sum() / n),
            "violation_rate": float(1 - df["met_slo"].sum() / n),
            "drop_rate": float(df["dropped"].sum() / n),
            "goodput_rps": float(df["met_slo"].sum() / horizon),
            "throughput_rps": float(len(served) / horizon),
            "throughput_sps": float(served["size"].sum() / horizon)}


def summarize(requests: pd.DataFrame, batches: pd.DataFrame, settings: ServingSettings) -> dict[str, Any]:
    """Overall and per-class metrics of one policy's trace (flat keys ``<class>.<metric>``)."""
    ends = requests["end"].to_numpy()
    t0 = float(requests["arrival"].min())
    t1 = float(np.nanmax(np.concatenate([ends, requests["drop_time"].to_numpy(), [requests["arrival"].max()]])))
    horizon = max(t1 - t0, EPS)
    out = _block(requests, horizon)
    waits = {}
    attain = []
    for c in settings.classes:
        sub = requests[requests["cls"] == c]
        if not len(sub):
            continue
        blk = _block(sub, horizon)
        waits[c] = blk["mean_wait_ms"]
        attain.append(blk["slo_attainment"])
        out.update({f"{c}.{k}": v for k, v in blk.items()})
    if "interactive" in waits and "batch" in waits and waits["interactive"] > 0:
        out["wait_ratio_batch_vs_interactive"] = waits["batch"] / waits["interactive"]
    out["jain_attainment"] = jain(np.array(attain))
    busy = ((batches["end"] - batches["start"]) * batches["tokens"]).sum() if len(batches) else 0.0
    out["token_utilisation"] = float(busy / (horizon * settings.token_capacity))
    out["lane_utilisation"] = float((batches["end"] - batches["start"]).sum() / (horizon * settings.lanes)) if len(batches) else 0.0
    # energy: each lane draws busy watts while it serves a batch and idle watts otherwise
    lane_busy = float((batches["end"] - batches["start"]).sum()) if len(batches) else 0.0
    out["energy_j"] = lane_busy * settings.busy_w + (horizon * settings.lanes - lane_busy) * settings.idle_w
    out["cost_usd"] = out["energy_j"] / 3.6e6 * settings.price_per_kwh
    out["mean_batch_samples"] = float(batches["samples"].mean()) if len(batches) else 0.0
    out["n_batches"] = len(batches)
    out["horizon_s"] = horizon
    return {k: (float(v) if isinstance(v, float | np.floating) else v) for k, v in out.items()}
