"""The rollout dispatcher ``rollout_late`` (``policies/late_rollout.py``) over a late list
heuristic, for choosing its settings and comparing it with the scenarios stage's table.

``--candidates`` and ``--shares`` take lists (every pair is run); ``--base`` is any late
heuristic of ``conf/policies/machine/``.  ``--split train`` runs on the named workloads'
training splits (how the YAML's 8 candidates and 20 shares over ``heft_late`` were chosen);
``--split test`` on their test splits and ``--heldout K`` held-out draws, the scenarios of the
stage, and then each row is set against ``--table`` (the stage's ``table.csv``): the LP bound,
the best late heuristic and the best learned late policy.

Run: ``python -m studies.late_rollout --out /tmp/late_rollout`` (``[--workloads default,...]
[--split test|train] [--heldout K] [--candidates M,...] [--shares S,...] [--base NAME] [-- hydra
overrides]``).  Writes ``<out>/rollout.csv`` and ``.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from studies.late_eval import HELDOUT, HELDOUT_TASKS, scenarios
from studies.quality_eval import WORKLOADS, compose
from hybridsched.devices import cluster_from_config
from hybridsched.io import write_frame, write_text
from hybridsched.kinds.base import instantiate
from hybridsched.kinds.machine.policies.late_rollout import RolloutLate
from hybridsched.kinds.machine.scenarios_late import config_roster
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.workload import generate_splits


def training_splits(names: list[str], overrides: list[str]) -> list[tuple[str, Any, Any, int, dict[str, Any]]]:
    """The named workloads' training splits, as ``late_eval.scenarios`` gives their test splits."""
    out = []
    for name in names:
        cfg = compose([*WORKLOADS[name], *overrides])
        cluster = cluster_from_config(cfg["cluster"])
        train, _ = generate_splits(cfg["workload"], cpu_gflops=cluster.cpu_gflops)
        out.append((f"{name} (train)", train, cluster, int(cfg["sim"]["seed"]), cfg))
    return out


def list_late(cfg: dict[str, Any]) -> tuple[str, ...]:
    """The bases: the late list heuristics (every late heuristic but the rollout)."""
    return tuple(p for p in config_roster(cfg).late if p != RolloutLate.name)


def against_table(df: pd.DataFrame, table: pd.DataFrame, path: Path, cfg: dict[str, Any]) -> pd.DataFrame:
    """Per row, the scenario's LP bound, its best late list heuristic, best learned late policy
    and best other policy in the scenarios stage's ``table``, and the rollout against them.  The base's figure must be the
    table's (the same tasks, noise and weights), or the table is from another commit."""
    list_heuristics, learned_late = list_late(cfg), config_roster(cfg).learned_late
    rows = []
    for r in df.to_dict("records"):
        t = table[table["scenario"] == r["scenario"]]
        if t.empty:
            rows.append(r)
            continue
        own = t.loc[t["policy"] == r["base"], "mean_latency"]
        if own.empty or not np.isclose(float(own.iloc[0]), r["base_mean_latency"], rtol=1e-4, atol=0):
            raise SystemExit(f"{path}: {r['base']} on {r['scenario']} has {own.tolist()}, this run "
                             f"{r['base_mean_latency']}; rerun the scenarios stage on this commit")
        late = t[(t["dispatch"] == "late") & t["policy"].isin(list_heuristics)].sort_values("mean_latency", kind="stable").iloc[0]
        learned = t[(t["dispatch"] == "late") & t["policy"].isin(learned_late)].sort_values("mean_latency", kind="stable").iloc[0]
        best = t[t["policy"] != RolloutLate.name].sort_values("mean_latency", kind="stable").iloc[0]  # every other policy
        bound = float(t["bound"].iloc[0])
        rows.append({**r, "bound": round(bound, 5), "rollout_x_bound": round(r["rollout_mean_latency"] / bound, 3),
                     "best_late_heuristic": f"{late['policy']} {late['mean_latency']:.4g}",
                     "rollout_vs_best_late_heuristic": round(r["rollout_mean_latency"] / late["mean_latency"], 3),
                     "best_learned_late": f"{learned['policy']} {learned['mean_latency']:.4g}",
                     "learned_vs_best_late_heuristic": round(learned["mean_latency"] / late["mean_latency"], 3),
                     "learned_vs_bar_with_rollout": round(
                         learned["mean_latency"] / min(late["mean_latency"], r["rollout_mean_latency"]), 3),
                     "best_policy": f"{best['policy']} {best['mean_latency']:.4g}",
                     "rollout_vs_best_policy": round(r["rollout_mean_latency"] / best["mean_latency"], 3)})
    return pd.DataFrame(rows)


def main() -> None:
    base_cfg = compose([])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="default", help="comma-separated workload names (their test splits)")
    ap.add_argument("--split", default="test", choices=("test", "train"),
                    help="the workloads' test splits (the report's scenarios) or their training splits (to choose M, S)")
    ap.add_argument("--heldout", type=int, default=0, help="also the first K held-out draws (with --split test)")
    ap.add_argument("--heldout-tasks", type=int, default=HELDOUT_TASKS)
    ap.add_argument("--base", default="heft_late", choices=list_late(base_cfg))
    ap.add_argument("--candidates", default="4", help="comma-separated values of M to run")
    ap.add_argument("--shares", default="2", help="comma-separated values of S to run")
    ap.add_argument("--table", default="metrics/scenarios/table.csv",
                    help="the scenarios stage's table: per test scenario, its LP bound and every policy's figure to "
                         "compare with (skipped when the file is missing)")
    ap.add_argument("--out", default="/tmp/late_rollout")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, after --")
    args = ap.parse_args()
    ms = [int(x) for x in args.candidates.split(",")]
    ss = [int(x) for x in args.shares.split(",")]
    names = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in names if w not in WORKLOADS]
    if min(ms) < 1 or min(ss) < 0 or not 0 <= args.heldout <= len(HELDOUT) or unknown:
        ap.error(f"--candidates >= 1, --shares >= 0, --heldout in [0, {len(HELDOUT)}], --workloads in {list(WORKLOADS)}; "
                 f"got {ms}, {ss}, {args.heldout}, {unknown or names}")
    rows = []
    for name, tasks, cluster, seed, cfg in (scenarios(names, args.heldout, args.heldout_tasks, args.overrides)
                                            if args.split == "test" else training_splits(names, args.overrides)):
        real = cluster.sample_noise(len(tasks), np.random.default_rng(seed))
        base = instantiate(cfg["policies"]["machine"][args.base])
        b = simulate(tasks, cluster, base, real)
        base_mean = float(np.mean(b.end - b.arrival))
        for m in ms:
            for s in ss:
                tr = simulate(tasks, cluster, RolloutLate(base, m, s), real)
                mean = float(np.mean(tr.end - tr.arrival))
                rows.append({"scenario": name, "base": args.base, "candidates": m, "shares": s,
                             "base_mean_latency": round(base_mean, 5), "rollout_mean_latency": round(mean, 5),
                             "ratio": round(mean / base_mean, 4)})
                print(f"{name}: {args.base} {base_mean:.4f} s, rollout M={m} S={s} {mean:.4f} s ({mean / base_mean:.3f}x)",
                      flush=True)
    out = Path(args.out)
    df = pd.DataFrame(rows)
    table = Path(args.table)
    if args.split == "test" and table.is_file():
        df = against_table(df, pd.read_csv(table), table, base_cfg)
    write_frame(out / "rollout.csv", df)
    write_text(out / "rollout.md", df.to_markdown(index=False) + "\n")


if __name__ == "__main__":
    main()
