"""Compare policies: per-policy metrics from traces, ratios to the lower bound, plot tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybridsched.kinds.machine.devices import Cluster
from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.metrics import check_trace, summarize

BASELINE = "round_robin"


def compare(traces: dict[str, pd.DataFrame], cluster: Cluster, bound: dict[str, float],
            parents: dict[int, list[int]] | None = None) -> pd.DataFrame:
    """One row per policy: metrics, ratio to the lower bound and speedup over round robin.
    Raises if a trace breaks a physical invariant (the audit is independent of the engine)."""
    rows = []
    for name, tr in traces.items():
        problems = check_trace(tr, cluster, parents)
        if problems:
            raise HybridschedError(f"trace of policy {name!r} is invalid: {'; '.join(problems)}")
        rows.append({"policy": name, **summarize(tr, cluster)})
    df = pd.DataFrame(rows).set_index("policy")
    df["makespan_vs_bound"] = df["makespan"] / bound["makespan"]
    df["mean_latency_vs_bound"] = df["mean_latency"] / bound["mean_latency"]
    if BASELINE in df.index:
        df["speedup_vs_round_robin"] = df.loc[BASELINE, "makespan"] / df["makespan"]
        df["latency_speedup_vs_round_robin"] = df.loc[BASELINE, "mean_latency"] / df["mean_latency"]
    if "oracle" in df.index:
        df["makespan_vs_oracle"] = df["makespan"] / df.loc["oracle", "makespan"]
        df["mean_latency_vs_oracle"] = df["mean_latency"] / df.loc["oracle", "mean_latency"]
    return df


def latency_quantiles(traces: dict[str, pd.DataFrame], points: int = 101) -> pd.DataFrame:
    """Latency at evenly spaced quantiles per policy (the inverse CDF), one column each."""
    q = np.linspace(0, 1, points)
    out = {"quantile": q}
    for name, tr in traces.items():
        out[name] = np.quantile((tr["end"] - tr["arrival"]).to_numpy(), q)
    return pd.DataFrame(out)


def utilisation_table(table: pd.DataFrame, n_gpus: int) -> pd.DataFrame:
    """Long table: one row per (policy, device) with its utilisation."""
    cols = ["cpu_utilisation"] + [f"gpu{g}_utilisation" for g in range(n_gpus)]
    long = table[cols].reset_index().melt(id_vars="policy", var_name="device", value_name="utilisation")
    long["device"] = long["device"].str.replace("_utilisation", "")
    long["policy_device"] = long["policy"] + "/" + long["device"]
    return long


def write_report(out: Path, summary: dict[str, Any], table: pd.DataFrame, traces: dict[str, pd.DataFrame],
                 util: pd.DataFrame) -> list[Path]:
    """Write summary.json, policies.csv, the DVC plot tables and the PNGs under ``out``;
    returns the files worth keeping as run artifacts."""
    from hybridsched.io import write_frame, write_json
    from hybridsched.plots import save_comparison_pngs

    write_json(out / "summary.json", summary)
    write_frame(out / "policies.csv", table.round(6).reset_index())
    write_frame(out / "plots" / "latency_quantiles.csv", latency_quantiles(traces))
    write_frame(out / "plots" / "utilisation.csv", util[["policy_device", "utilisation"]])
    write_frame(out / "plots" / "energy_cost.csv", table[["energy_j", "cost_usd"]].reset_index())
    pngs = save_comparison_pngs(traces, table, util, out / "plots")
    return [out / "summary.json", out / "policies.csv", *pngs]
