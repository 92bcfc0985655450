"""How the machine kind's LP lower bound moves with its grid and its piece cuts, on one scenario.

Every grid gives a valid bound (docs/machine.md, "Lower bound"); a finer one, or more piece cuts, is
tighter and slower. This solves the scenario's LP at each ``RHO:CUTS`` of ``--grids`` (the
dyadic cover's ``rho`` and ``LPSettings.piece_cuts``, base width ``delta`` as configured) and,
with ``--policies``, runs those policies on the same tasks and noise, so the table shows each
policy × each bound: how much of a policy's gap to the bound is the bound's own slack.

Run: ``python -m studies.lp_grid --out /tmp/lp_grid`` (the default workload's test split;
``[--workload NAME|heldoutK] [--heldout-tasks N] [--grids RHO:CUTS ...] [--policies NAME ...]
[-- hydra overrides]``). Writes ``<out>/lp_grid.json`` and ``<out>/lp_grid.md`` (no timings,
so a rerun writes the same files; the solve times are printed).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from studies.late_eval import HELDOUT, HELDOUT_TASKS, one_scenario
from studies.quality_eval import WORKLOADS
from hybridsched.errors import HybridschedError
from hybridsched.io import write_json, write_text
from hybridsched.kinds.base import instantiate
from hybridsched.kinds.machine.bounds import lower_bound
from hybridsched.kinds.machine.bounds_lp import LPSettings
from hybridsched.kinds.machine.sim import simulate

GRIDS = ("1:0", "1:2", "2:2", "4:0", "4:2")


def parse_grid(text: str) -> tuple[float, int]:
    """``RHO:CUTS`` -> (rho, piece_cuts); one line naming the value otherwise."""
    try:
        rho, cuts = text.split(":")
        grid = (float(rho), int(cuts))
        LPSettings(rho=grid[0], piece_cuts=grid[1])
    except ValueError:
        raise argparse.ArgumentTypeError(f"--grids takes RHO:CUTS (e.g. 4:2), got {text!r}") from None
    except HybridschedError as e:  # LPSettings' own one-line check
        raise argparse.ArgumentTypeError(f"--grids {text!r}: {e}") from None
    return grid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="default", choices=[*WORKLOADS, *HELDOUT],
                    help="a workload's test split, or held-out draw k of the scenario table")
    ap.add_argument("--heldout-tasks", type=int, default=HELDOUT_TASKS, help="tasks of a held-out draw (the table's size)")
    ap.add_argument("--grids", nargs="+", type=parse_grid, default=[parse_grid(g) for g in GRIDS], metavar="RHO:CUTS")
    ap.add_argument("--policies", nargs="*", default=["heft_late", "pg_late"], metavar="NAME",
                    help="machine policies (conf/policies/machine) run on the same tasks and noise")
    ap.add_argument("--out", default="/tmp/lp_grid")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, after --")
    args = ap.parse_args()
    if args.heldout_tasks < 1:
        ap.error(f"--heldout-tasks must be >= 1, got {args.heldout_tasks}")
    name, tasks, cluster, noise_seed, cfg = one_scenario(args.workload, args.heldout_tasks, args.overrides)
    specs = cfg["policies"]["machine"]
    unknown = [p for p in args.policies if p not in specs]
    if unknown:
        ap.error(f"--policies: no machine policy {', '.join(unknown)} in conf/policies/machine")
    real = cluster.sample_noise(len(tasks), np.random.default_rng(noise_seed))
    means = {}
    for p in args.policies:
        tr = simulate(tasks, cluster, instantiate(specs[p]), real)
        means[p] = float(np.mean(tr.end - tr.arrival))
    lp_cfg = cfg["sim"]["bound_lp"]
    rows = []
    for rho, cuts in args.grids:
        t0 = time.perf_counter()
        lp = LPSettings(delta=lp_cfg.get("delta"), rho=rho, max_levels=int(lp_cfg["max_levels"]), piece_cuts=cuts,
                        max_variables=None)
        lb = lower_bound(tasks, cluster, real, lp)
        seconds = time.perf_counter() - t0
        rows.append({"rho": rho, "piece_cuts": cuts, "bound_lp": lb.mean_latency_lp, "bound_solo": lb.mean_latency_solo,
                     **{f"{p}_x_bound": m / lb.mean_latency for p, m in means.items()}})
        print(f"{name}: rho {rho:g}, {cuts} piece cuts: LP {lb.mean_latency_lp:.4f} s ({seconds:.0f} s)", flush=True)
    out = Path(args.out)
    write_json(out / "lp_grid.json", {"scenario": name, "tasks": len(tasks), "noise_seed": noise_seed,
                                      "delta": lp_cfg.get("delta"), "policies": means, "grids": rows})
    head = ["rho", "piece cuts", "LP bound (s)", *(f"{p} × bound" for p in means)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for r in rows:
        lines.append(f"| {r['rho']:g} | {r['piece_cuts']} | {r['bound_lp']:.4f} | "
                     + " | ".join(f"{r[f'{p}_x_bound']:.3f}" for p in means) + " |")
    policies = ", ".join(f"{p} {m:.4f} s" for p, m in means.items())
    write_text(out / "lp_grid.md", f"{name} ({len(tasks)} tasks, noise seed {noise_seed}; {policies}; "
                                   f"solo bound {rows[0]['bound_solo']:.4f} s)\n\n" + "\n".join(lines) + "\n")
    print((out / "lp_grid.md").read_text())


if __name__ == "__main__":
    main()
