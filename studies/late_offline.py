"""How low can a late-engine schedule go on one scenario, when every outcome is known?  An
offline, clairvoyant search over task orders and splits (against the 1.5× LP target).

The LP bound is below the optimum, and every online policy is above it; this puts a schedule
between them. It is **not a policy**: it knows every arrival and every realised run time in
advance and tries hundreds of thousands of whole runs. What it searches: list scheduling in the
late engine (``late_engine.py``: the same rules, the scenario's own tasks and noise) with one
static key per task and, per task, either a fixed GPU share or the late heuristics' split rule
(``OfflineSchedule``: whenever a device is idle, the waiting task of least key among those whose
split can start now starts, on the CPU or on the GPU believed to free first, as the late
heuristics start theirs). The split rule, queue slack and reserved order are the ``--start``
policy's. The search starts from that policy's own run: the keys are the order in which it
started the tasks, and every task follows the rule. From a learned late policy (``pg_late``,
``dqn_late``, ``cem_late``), which has no such rule, every task starts with the fixed share it
had in the policy's run, and its reserved order is kept. Each step makes one move and reruns the
whole scenario in the compiled engine, keeping the move unless the mean latency rose (seeded:
the same moves and result on rerun):

- with probability ``1 - --split-moves``, one task moves to just before another one at most
  ``--window`` places away in the current order;
- otherwise one task gets a fixed GPU share one step of the fraction grid above or below the
  share it has in the best run so far (within its memory cap).

So ``LP bound <= optimum <= search`` on the scenario, for schedules of the engine's kind
(non-preemptive parts, a split's other part in its device's reserved queue). What knowing the
noise was worth: ``--other-noise K`` reruns the found keys and shares, and the start policy,
under K other noise draws of the same tasks.

Run: ``python -m studies.late_offline --out /tmp/late_offline`` (the default workload's test
split from heft_late's run; ``[--workload NAME|heldoutK] [--heldout-tasks N] [--start POLICY] [--iters N] [--window W]
[--split-moves P] [--seed S] [--other-noise K] [--lp-rho R] [-- hydra overrides]``). Writes ``<out>/offline.json``
(the figures and the search's progress) and ``<out>/offline_schedule.json`` (per task its key
and share).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numba import njit

from studies.late_eval import HELDOUT, HELDOUT_TASKS, one_scenario
from studies.quality_eval import WORKLOADS
from hybridsched.io import write_json
from hybridsched.kinds.base import instantiate
from hybridsched.kinds.machine.bounds_lp import LPSettings
from hybridsched.kinds.machine.engine import GPU_S, MAX_F, task_matrix
from hybridsched.kinds.machine.late_engine import _run_late, run_loop
from hybridsched.kinds.machine.policies.late import (
    _BACKLOG,
    _LAUNCH,
    _N_PARAMS,
    _SLACK,
    N_PDATA,
    LateList,
    least_free_gpu,
    load_scale,
    split_of,
    start_device,
)
from hybridsched.kinds.machine.scenarios_late import bound_of, config_roster
from hybridsched.kinds.machine.sim import simulate

_KEY, _SHARE = N_PDATA, N_PDATA + 1  # pdata columns after the late heuristics' own


@njit
def _offline_pick(t, pool, n_pool, idle, est, qlen, X, ready, pdata, params):  # pragma: no cover - compiled
    """The waiting task of least key whose split can start now; its split is its fixed GPU share,
    or (share < 0) the late heuristics' split rule with the start policy's charge."""
    g = least_free_gpu(est)
    s = load_scale(t, pool, n_pool, est, pdata, params[_BACKLOG])
    best_k, best_d, best_f, best_key = -1, -1, 0.0, np.inf
    for k in range(n_pool):
        i = pool[k]
        f = pdata[i, _SHARE]
        if f < 0.0:
            f, _, _, gb = split_of(i, t, est[0], est[g + 1], X, params, _N_PARAMS, s)
        else:
            gb = params[_LAUNCH] + f * X[i, GPU_S]
        d = start_device(f, g, idle, t, est[0], gb, params[_SLACK])
        if d >= 0 and pdata[i, _KEY] < best_key:
            best_k, best_d, best_f, best_key = k, d, f, pdata[i, _KEY]
    return best_k, best_d, best_f, g


class OfflineSchedule(LateList):
    """List scheduling by a static key per task (lowest first); each task's split is its fixed GPU
    share, or with a negative share the split rule of the late heuristic whose settings it takes."""

    name = "offline_schedule"
    pick_kernel: ClassVar[object] = _offline_pick

    def __init__(self, keys: np.ndarray, shares: np.ndarray, **late: Any) -> None:
        super().__init__(**late)
        self.keys, self.shares = np.asarray(keys, dtype=np.float64), np.asarray(shares, dtype=np.float64)

    def prepare(self, tasks, cluster, X) -> None:
        super().prepare(tasks, cluster, X)
        shares = np.where(self.shares < 0, -1.0, np.minimum(self.shares, X[:, MAX_F]))
        self._pdata = np.column_stack([self._pdata, self.keys, shares])


def start_order(trace) -> np.ndarray:
    """Keys 0 .. n-1 in the order a trace's tasks first started (ties: task order)."""
    first = np.fmin(trace.cpu_start, trace.gpu_start)
    keys = np.empty(len(first))
    keys[np.argsort(first, kind="stable")] = np.arange(len(first), dtype=np.float64)
    return keys


def search(tasks, cluster, reals: list, policy: OfflineSchedule, iters: int, window: int, split_moves: float,
           seed: int, log_every: int = 1000) -> tuple[np.ndarray, np.ndarray, float, list[dict[str, float]]]:
    """Local search over the keys and shares of ``policy`` (module docstring): ``(keys, shares,
    objective, progress)``; the objective is the mean latency averaged over the noise draws
    ``reals``.  Between moves the keys are the ranks 0 .. n-1, so "just before task j" is
    ``rank_j - 0.5``; a share move on a task that follows the rule starts from the share the rule
    gave it in the best run so far (on the first draw)."""
    X = task_matrix(tasks, cluster)
    policy.prepare(tasks, cluster, X)
    pdata, params = policy.kernel_data()
    step = float(policy.grid[1])

    def run() -> tuple[float, np.ndarray]:
        total, first = 0.0, None
        for real in reals:
            done, _, out = run_loop(_run_late, _offline_pick, X, pdata, params, tasks, cluster, real, policy.reserved_order)
            assert done == len(tasks)
            total += float(np.mean(out["end"] - tasks.arrival))
            first = out["frac"] if first is None else first
        return total / len(reals), first

    n = len(tasks)
    order = np.argsort(pdata[:, _KEY], kind="stable")
    pdata[order, _KEY] = np.arange(n, dtype=np.float64)
    rng = np.random.default_rng(seed)
    best, frac = run()
    progress = [{"iter": 0, "mean_latency": best, "improved": 0}]
    improved = 0
    for it in range(1, iters + 1):
        p = int(rng.integers(n))
        i = order[p]
        if rng.random() < split_moves:
            col, old = _SHARE, pdata[i, _SHARE]
            new = float(np.clip(frac[i] + step * (1 if rng.random() < 0.5 else -1), 0.0, X[i, MAX_F]))
        else:
            q = int(np.clip(p + rng.integers(-window, window + 1), 0, n - 1))
            col, old, new = _KEY, float(p), pdata[order[q], _KEY] - 0.5
        if new != old and not (col == _KEY and new == old + 0.5):  # p + 1: "just before the next" is here
            pdata[i, col] = new
            value, f = run()
            if value <= best:  # equal: keep it, so the search can cross flat stretches
                improved += value < best
                best, frac = value, f
                if col == _KEY:
                    order = np.argsort(pdata[:, _KEY], kind="stable")
                    pdata[order, _KEY] = np.arange(n, dtype=np.float64)
            else:
                pdata[i, col] = old
        if it % log_every == 0 or it == iters:
            progress.append({"iter": it, "mean_latency": best, "improved": improved})
    return pdata[:, _KEY].copy(), pdata[:, _SHARE].copy(), best, progress


def main() -> None:
    from studies.quality_eval import compose

    roster = config_roster(compose([]))  # --start: a late heuristic, or a learned late policy (its shares, fixed)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="default", choices=[*WORKLOADS, *HELDOUT],
                    help="a workload's test split, or held-out draw k of the scenario table")
    ap.add_argument("--heldout-tasks", type=int, default=HELDOUT_TASKS, help="tasks of a held-out draw (the table's size)")
    ap.add_argument("--start", default="heft_late", choices=[*roster.late, *roster.learned_late],
                    help="the late policy whose run starts the search: a heuristic's split rule, queue slack and reserved "
                         "order are kept; from a learned one, each task's share in its run and its reserved order")
    ap.add_argument("--iters", type=int, default=200_000)
    ap.add_argument("--window", type=int, default=50)
    ap.add_argument("--split-moves", type=float, default=0.5, help="the share of moves that change a GPU share")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blind", type=int, default=0, metavar="K",
                    help="search on K other noise draws (their mean latency), not on the scenario's noise")
    ap.add_argument("--other-noise", type=int, default=3, metavar="K",
                    help="rerun the result and the start policy under noise seeds +1000, ..., +1000 K (what knowing the noise was worth)")
    ap.add_argument("--lp-rho", type=float, default=1.0)
    ap.add_argument("--out", default="/tmp/late_offline")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, after --")
    args = ap.parse_args()
    if min(args.iters, args.other_noise, args.blind) < 0 or args.window < 1 or args.heldout_tasks < 1 or not 0.0 <= args.split_moves <= 1.0:
        ap.error(f"--iters, --blind and --other-noise must be >= 0, --window and --heldout-tasks >= 1 and --split-moves "
                 f"in [0, 1], got {args.iters}, {args.blind}, {args.other_noise}, {args.window}, {args.heldout_tasks} "
                 f"and {args.split_moves}")
    out = Path(args.out)
    name, tasks, cluster, noise_seed, cfg = one_scenario(args.workload, args.heldout_tasks, args.overrides)
    spec = cfg["policies"]["machine"][args.start]
    real = cluster.sample_noise(len(tasks), np.random.default_rng(noise_seed))
    start = instantiate(spec)
    own = simulate(tasks, cluster, start, real)
    own_mean = float(np.mean(own.end - own.arrival))
    step = spec.get("fraction_step", 0.05)
    if args.start in roster.late:  # every task follows the heuristic's split rule until a move fixes its share
        kept, shares0 = {**start.w, "fraction_step": step, "reserved_order": start.reserved_order}, np.full(len(tasks), -1.0)
    else:  # a learned policy has no rule to keep: every task starts with the share it had in the policy's run
        kept, shares0 = {"fraction_step": step, "reserved_order": start.reserved_order}, own.fraction.astype(np.float64)
    policy = OfflineSchedule(start_order(own), shares0, **kept)
    t0 = time.perf_counter()
    # blind: the objective's draws are not the scenario's noise (seeds s + 500 + k; --other-noise uses s + 1000 k)
    reals = ([cluster.sample_noise(len(tasks), np.random.default_rng(noise_seed + 500 + k)) for k in range(args.blind)]
             if args.blind else [real])
    keys, shares, objective, progress = search(tasks, cluster, reals, policy, args.iters, args.window,
                                               args.split_moves, args.seed)
    seconds = time.perf_counter() - t0
    b = bound_of(tasks, cluster, real, LPSettings(rho=args.lp_rho))
    check = simulate(tasks, cluster, OfflineSchedule(keys, shares, **kept), real)  # the result, run as a policy
    best = float(np.mean(check.end - check.arrival))
    other = []  # the same schedule rules where the noise is not the one searched on
    for k in range(1, args.other_noise + 1):
        r2 = cluster.sample_noise(len(tasks), np.random.default_rng(noise_seed + 1000 * k))
        means = [float(np.mean(tr.end - tr.arrival)) for tr in (
            simulate(tasks, cluster, OfflineSchedule(keys, shares, **kept), r2), simulate(tasks, cluster, instantiate(spec), r2))]
        other.append({"noise_seed": noise_seed + 1000 * k, "search_schedule": means[0], "start_policy": means[1],
                      "ratio": means[0] / means[1]})
    result = {"scenario": name, "tasks": len(tasks), "noise_seed": noise_seed, "start": args.start, "kept": kept,
              "iters": args.iters, "window": args.window, "split_moves": args.split_moves, "seed": args.seed,
              "lp_rho": args.lp_rho, "start_policy_mean_latency": own_mean,
              "blind": args.blind, "start_schedule_objective": progress[0]["mean_latency"],
              "search_objective": objective, "improving_moves": progress[-1]["improved"], "search_mean_latency": best,
              "bound_lp": b["mean_latency_lp"], "bound": b["mean_latency"],
              "search_vs_bound": best / b["mean_latency"], "start_policy_vs_bound": own_mean / b["mean_latency"],
              "search_vs_start_policy": best / own_mean, "other_noise": other, "progress": progress}  # no timing: the file is the same on rerun
    write_json(out / "offline.json", result)
    write_json(out / "offline_schedule.json", {"task_id": [int(t) for t in tasks.task_id], "key": keys.tolist(),
                                               "gpu_share": shares.tolist()})
    where = f"{args.blind} other noise draws" if args.blind else "the scenario's noise"
    print(f"{name} ({len(tasks)} tasks): {args.start} {own_mean:.4f} s ({result['start_policy_vs_bound']:.2f}x the bound "
          f"{b['mean_latency']:.4f} s). Searched on {where}: {progress[0]['mean_latency']:.4f} -> {objective:.4f} s in "
          f"{args.iters} moves ({seconds:.0f} s). On the scenario's noise: {best:.4f} s = {result['search_vs_bound']:.2f}x "
          f"the bound, {result['search_vs_start_policy']:.3f}x {args.start}; under other noise "
          f"{', '.join(format(o['ratio'], '.3f') for o in other) or 'not run'}x {args.start}. Wrote {out / 'offline.json'}")


if __name__ == "__main__":
    main()
