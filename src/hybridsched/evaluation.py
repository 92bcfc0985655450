"""Compare policies, for every kind: one table with the same derived columns, plot tables, reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybridsched.errors import HybridschedError


# the columns the evaluate stage prints (each kind's table has those its metrics allow)
EVALUATE_COLUMNS = ("dispatch", "makespan", "mean_latency", "p95_latency", "energy_j", "makespan_vs_bound", "mean_latency_vs_bound")


DISPATCH_FILE = "dispatch.json"  # policy -> dispatch mode, beside a kind's traces


def dispatch_mode(policy: Any) -> str:
    """How a policy is simulated, as its class declares (``dispatch``): ``arrival`` (placed when
    it arrives, FIFO queues; the default), or a kind's other modes (the machine's ``ordered``
    and ``late``, the cluster's ``queue``)."""
    return getattr(policy, "dispatch", "arrival")


def read_dispatch(traces_dir: Path) -> dict[str, str]:
    """Policy -> dispatch mode as the simulate stage wrote it beside the traces ({} if absent)."""
    import json

    f = traces_dir / DISPATCH_FILE
    return json.loads(f.read_text()) if f.is_file() else {}


def with_dispatch(table: pd.DataFrame, modes: dict[str, str]) -> pd.DataFrame:
    """``table`` with each policy's dispatch mode as its first column."""
    table.insert(0, "dispatch", [modes.get(n, "arrival") for n in table.index])
    return table


def compare(summaries: dict[str, dict[str, float]], bound: dict[str, float], baseline: str = "round_robin",
            oracle: str = "oracle") -> pd.DataFrame:
    """One row per policy (index ``policy``) for every kind: the kind's audited summary metrics,
    then the same derived columns everywhere: ``<m>_vs_bound`` for each metric the bound
    covers, the speed-up over ``baseline`` (makespan and mean latency) and ``<m>_vs_oracle``
    (columns about a policy that did not run are left out)."""
    df = pd.DataFrame.from_dict(summaries, orient="index")
    df.index.name = "policy"
    for m in ("makespan", "mean_latency", *(k for k in bound if k not in ("makespan", "mean_latency"))):
        if m in df and isinstance(bound.get(m), float | int) and bound[m]:
            df[f"{m}_vs_bound"] = df[m] / bound[m]
    if baseline in df.index:
        if "makespan" in df:
            df[f"speedup_vs_{baseline}"] = df.loc[baseline, "makespan"] / df["makespan"]
        df[f"latency_speedup_vs_{baseline}"] = df.loc[baseline, "mean_latency"] / df["mean_latency"]
    if oracle in df.index:
        for m in ("makespan", "mean_latency"):
            if m in df:
                df[f"{m}_vs_{oracle}"] = df[m] / df.loc[oracle, m]
    return df


def load_traces(traces_dir: Path, order: list[str] | tuple[str, ...] = ()) -> tuple[dict[str, pd.DataFrame], dict[str, float]]:
    """Every ``<policy>.parquet`` trace in the folder (in ``order``, then any others by name)
    and the folder's ``lower_bound.json``."""
    import json

    rank = {n: k for k, n in enumerate(order)}
    files = sorted(traces_dir.glob("*.parquet"), key=lambda p: (rank.get(p.stem, len(rank)), p.stem))
    if not files:
        raise HybridschedError(f"{traces_dir}: no traces (run the simulate stage first)")
    return {p.stem: pd.read_parquet(p) for p in files}, json.loads((traces_dir / "lower_bound.json").read_text())


def latency_quantiles(traces: dict[str, pd.DataFrame], points: int = 101) -> pd.DataFrame:
    """Latency at evenly spaced quantiles per policy (the inverse CDF) in long format: one row
    per (policy, quantile), so the DVC plot takes its lines from the data, whatever the policies."""
    q = np.linspace(0, 1, points)
    frames = [pd.DataFrame({"policy": name, "quantile": q, "latency": np.quantile((tr["end"] - tr["arrival"]).to_numpy(), q)})
              for name, tr in traces.items()]
    return pd.concat(frames, ignore_index=True)


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
    from hybridsched.io import staged_files, write_frame, write_json
    from hybridsched.plots import save_comparison_pngs

    with staged_files(out) as tmp:  # all of the report, or none of it
        write_json(tmp / "summary.json", summary)
        write_frame(tmp / "policies.csv", table.round(6).reset_index())
        write_frame(tmp / "plots" / "latency_quantiles.csv", latency_quantiles(traces))
        write_frame(tmp / "plots" / "utilisation.csv", util[["policy_device", "utilisation"]])
        write_frame(tmp / "plots" / "energy_cost.csv", table[["energy_j", "cost_usd"]].reset_index())
        pngs = [out / p.relative_to(tmp) for p in save_comparison_pngs(traces, table, util, tmp / "plots")]
    return [out / "summary.json", out / "policies.csv", *pngs]


def write_importance_report(out: Path, metrics: dict, title: str) -> list[Path]:
    """metrics/train_rf.json, and the feature importances as a DVC plot csv and a PNG."""
    from hybridsched.io import write_frame, write_json
    from hybridsched.plots import save_importance_png

    from hybridsched.io import without_timings

    imp = metrics["importance"]
    write_json(out / "train_rf.json", without_timings(metrics))
    write_frame(out / "plots" / "rf_importance.csv", pd.DataFrame({"feature": list(imp), "importance": list(imp.values())}))
    return [out / "train_rf.json", save_importance_png(imp, out / "plots" / "rf_importance.png", title=title)]
