"""Late dispatch against placement at arrival: the issue-22 table per scenario.

Per scenario (default, shifted, bursty, dag, rate 8 and the held-out draws of
``scenarios.heldout_workloads``): the LP bound, every arrival-mode heuristic and every
late-mode heuristic with the weights in their YAMLs (tuned on the default workload's
training split; ``eft_late_plain`` is ``eft_late`` untuned, all weights 0, as ``eft`` is to
eft_rank), and the learned ``cem`` (arrival, ``--cem-model``) and ``cem_late`` (late,
``--cem-late-model``) unchanged on every scenario.  Same tasks and noise as
``benchmarks.quality_eval`` (test split, noise seed ``sim.seed``; held-out draw k: tasks and
noise from seed k).

    python -m benchmarks.late_eval --out /tmp/late --lp-rho 1             # ~25 min on a loaded 2-core box (LP)
    python -m benchmarks.late_eval --out /tmp/late --no-lp --heldout 0 --workloads default
    python -m benchmarks.late_eval --tune 20 --out /tmp/late_tune      # tune the late heuristics (default train split)
    python -m benchmarks.late_eval --validate models/cem_late,/tmp/other --out /tmp/v   # models on the validation draws

The LP bound of each scenario is cached in ``<out>/<scenario>_bound.json`` (same tasks, noise
and grid give the same bound), so re-running with another model only simulates.  Writes
``<out>/<scenario>.csv`` and ``<out>/late.md``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.quality_eval import WORKLOADS, compose, heldout_spec
from hybridsched.io import write_frame, write_json, write_text
from hybridsched.kinds.base import instantiate
from hybridsched.kinds.machine.bounds import lower_bound
from hybridsched.kinds.machine.bounds_lp import LPSettings
from hybridsched.devices import cluster_from_config
from hybridsched.kinds.machine.scenarios import heldout_workloads
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.workload import generate, generate_splits

ARRIVAL = ("eft", "eft_load", "eft_rank", "dmda")
LATE = ("spt_late", "wspt_late", "eft_late", "heft_late", "eft_late_plain")


def policies(cfg: dict[str, Any], cem_model: str, cem_late_model: str) -> dict[str, Any]:
    """Name -> factory; the learned ones only where their model file exists."""
    specs = cfg["policies"]["machine"]
    out = {n: (lambda n=n: instantiate(specs[n])) for n in (*ARRIVAL, *LATE) if n in specs}
    # the untuned late list scheduler by earliest finish: late mode's counterpart of plain eft
    out["eft_late_plain"] = lambda: instantiate({"_target_": specs["eft_late"]["_target_"]})
    if (Path(cem_model) / "model.json").is_file():
        out["cem"] = lambda: instantiate({**specs["cem"], "model_dir": cem_model})
    if (Path(cem_late_model) / "model.json").is_file() and "cem_late" in specs:
        out["cem_late"] = lambda: instantiate({**specs["cem_late"], "model_dir": cem_late_model})
    return out


def bound_of(tasks, cluster, real, lp: LPSettings | None, cache: Path) -> dict[str, float]:
    """The lower bounds (cached by scenario and LP grid)."""
    key = {"n": len(tasks), "lp": None if lp is None else asdict(lp)}
    if cache.is_file():
        b = json.loads(cache.read_text())
        if b.get("key") == key:
            return b
    b = {**asdict(lower_bound(tasks, cluster, real, lp)), "key": key}
    write_json(cache, b)
    return b


def evaluate(name: str, tasks, cluster, seed: int, pols: dict[str, Any], lp, out: Path) -> pd.DataFrame:
    real = cluster.sample_noise(len(tasks), np.random.default_rng(seed))
    t0 = time.perf_counter()
    b = bound_of(tasks, cluster, real, lp, out / f"{name}_bound.json")
    rows = []
    for pname, make in pols.items():
        policy = make()
        tr = simulate(tasks, cluster, policy, real)
        lat = tr.end - tr.arrival
        rows.append({"scenario": name, "policy": pname, "dispatch": getattr(policy, "dispatch", "arrival"),
                     "mean_latency": float(lat.mean()), "p99_latency": float(np.percentile(lat, 99))})
    df = pd.DataFrame(rows).assign(bound_lp=b["mean_latency_lp"], bound=b["mean_latency"])
    write_frame(out / f"{name}.csv", df)
    print(f"{name}: {time.perf_counter() - t0:.0f} s (LP {b['mean_latency_lp']:.4g} s)")
    print(df[["policy", "mean_latency", "p99_latency"]].round(4).to_string(index=False))
    return df


def summary(frames: list[pd.DataFrame]) -> str:
    """One row per scenario: LP bound, best heuristic per mode, learned per mode and the ratios."""
    rows = []
    for df in frames:
        m = df.set_index("policy")["mean_latency"]
        arr = m[[p for p in ARRIVAL if p in m]]
        late = m[[p for p in LATE if p in m]]
        b = float(df["bound"].iloc[0])
        row = {"scenario": df["scenario"].iloc[0], "LP bound": b,
               "best arrival heuristic": f"{arr.min():.4g} ({arr.idxmin()})",
               "best late heuristic": f"{late.min():.4g} ({late.idxmin()})",
               "late ÷ arrival (best heuristics)": round(late.min() / arr.min(), 3)}
        if "cem" in m:
            row["cem (arrival)"] = f"{m['cem']:.4g} ({m['cem'] / arr.min():.3f}×)"
        if "cem_late" in m:
            row["cem_late (late)"] = f"{m['cem_late']:.4g} ({m['cem_late'] / late.min():.3f}×)"
        best = m.min()
        row["best policy × LP"] = f"{best / b:.2f} ({m.idxmin()})"
        rows.append(row)
    return markdown(pd.DataFrame(rows))


def markdown(df: pd.DataFrame) -> str:
    """A plain markdown table (no tabulate: its version check fails in some environments)."""
    fmt = [lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)]
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(fmt[0](v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def tune_late(trials: int, out: Path) -> dict[str, Any]:
    """Tune each late heuristic with the project's Optuna study on the default workload's
    training split (as the arrival heuristics' YAML weights were); writes ``<out>/tuned_late.json``."""
    from hybridsched.kinds.machine.tuning import TuneSettings, run_study

    cfg = compose([])
    cluster = cluster_from_config(cfg["cluster"])
    train, _ = generate_splits(cfg["workload"], cpu_gflops=cluster.cpu_gflops)
    work = Path(tempfile.mkdtemp(prefix="late-tune-"))
    tuned = {}
    for name in LATE:
        s = TuneSettings.from_dict({**cfg["tune"], "target": name, "n_trials": trials, "n_jobs": 1,
                                    "storage": str(work / f"{name}.journal")})
        r = run_study(s, cfg, train, cluster)
        tuned[name] = {"params": r["best_params"], "default": r["default"], "best": r["best"]}
        print(name, r["default"], "->", r["best"], r["best_params"])
    write_json(out / "tuned_late.json", tuned)
    return tuned


def validate_models(dirs: list[str]) -> dict[str, Any]:
    """cem_late models on the validation stream's draws of ``cem.machine`` (``[cem.seed, 2, 0]``:
    never training, selection or evaluation), as mean latency / untuned eft_late's per draw."""
    from hybridsched.kinds.machine.cem_train import _VALID_STREAM, MachineCEMSettings, draw_set
    from hybridsched.kinds.machine.policies.late import EFTLate
    from hybridsched.kinds.machine.policies.late_scorer import CEMLate

    cfg = compose([])
    cluster = cluster_from_config(cfg["cluster"])
    s = MachineCEMSettings.from_dict(cfg["cem"]["machine"])
    draws = draw_set(int(cfg["cem"]["seed"]), _VALID_STREAM, 0, s, cluster, s.validation_scenarios)
    ratios: dict[str, list[float]] = {d: [] for d in dirs}
    for _, tasks, real in draws:
        tr = simulate(tasks, cluster, EFTLate(), real)
        ref = float(np.mean(tr.end - tr.arrival))
        for d in dirs:
            tr = simulate(tasks, cluster, CEMLate(model_dir=d), real)
            ratios[d].append(float(np.mean(tr.end - tr.arrival)) / ref)
    out = {d: {"mean": float(np.mean(r)), "per_draw": np.round(r, 3).tolist()} for d, r in ratios.items()}
    for d, r in out.items():
        print(f"{d}: {r['mean']:.4f} {r['per_draw']}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--heldout", type=int, default=5)
    ap.add_argument("--heldout-tasks", type=int, default=3000)
    ap.add_argument("--no-lp", action="store_true")
    ap.add_argument("--lp-rho", type=float, default=1.0)
    ap.add_argument("--cem-model", default="models/cem")
    ap.add_argument("--cem-late-model", default="models/cem_late")
    ap.add_argument("--tune", type=int, default=0, metavar="TRIALS", help="only tune the late heuristics")
    ap.add_argument("--validate", default=None, metavar="DIRS",
                    help="only score these cem_late model dirs (comma-separated) on the validation draws")
    ap.add_argument("--out", default="metrics/late")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.tune:
        tune_late(args.tune, out)
        return
    if args.validate:
        write_json(out / "validate_late.json", validate_models(args.validate.split(",")))
        return
    lp = None if args.no_lp else LPSettings(rho=args.lp_rho)
    frames = []
    for wname in [w for w in args.workloads.split(",") if w]:
        cfg = compose(WORKLOADS[wname])
        cluster = cluster_from_config(cfg["cluster"])
        _, test = generate_splits(cfg["workload"], cpu_gflops=cluster.cpu_gflops)
        frames.append(evaluate(wname, test, cluster, int(cfg["sim"]["seed"]),
                               policies(cfg, args.cem_model, args.cem_late_model), lp, out))
    if args.heldout:
        cfg = compose([])
        cluster = cluster_from_config(cfg["cluster"])
        pols = policies(cfg, args.cem_model, args.cem_late_model)
        for k, w in enumerate(heldout_workloads(args.heldout, cluster)):
            tasks = generate(heldout_spec(w), args.heldout_tasks, np.random.default_rng(k), cpu_gflops=cluster.cpu_gflops)
            frames.append(evaluate(w["name"], tasks, cluster, k, pols, lp, out))
    write_text(out / "late.md", summary(frames))
    print(summary(frames))


if __name__ == "__main__":
    main()
