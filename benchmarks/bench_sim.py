"""Simulator speed: tasks/s per policy at 10^4, 10^5, 10^6 tasks, peak memory, linearity.

Run: `make bench` (or `python -m benchmarks.bench_sim [--sizes 10000 100000 1000000] [--smoke]`).
Targets (2 cores): >= 200,000 tasks/s for round_robin, greedy and eft at 10^6 tasks,
< 1.5 GB peak, time per task flat in the task count; and eft's whole ``simulate`` at
>= 0.5x the speed of a bare compiled EFT loop over the same tasks, measured in this process
(``benchmarks.sim_profile``, which also prints where the time goes): best of 7 rounds in which
the two take turns, by CPU time (wall time printed too).
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.common import measure, parse, report
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.policies.classic import Greedy, Random, RoundRobin
from hybridsched.kinds.machine.policies.eft import EarliestFinishTime, Oracle
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.workload import WorkloadSpec, generate

TARGET_TASKS_PER_S = 200_000
TARGET_PEAK_MB = 1536
TARGET_VS_BARE = 0.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    args = parse(ap)
    if args.smoke:
        args.sizes = [1000, 2000]
    cluster = Cluster()
    policies = [RoundRobin(), Random(), Greedy(), EarliestFinishTime(), Oracle()]
    warm = generate(WorkloadSpec(rate=6.0), 200, np.random.default_rng(1))
    for p in policies:  # compile (or load the numba cache) outside the timings
        simulate(warm, cluster, p, cluster.sample_noise(len(warm), np.random.default_rng(1)))
    rows = []
    base: dict[str, float] = {}
    for n in args.sizes:
        rng = np.random.default_rng(0)
        tasks = generate(WorkloadSpec(rate=6.0), n, rng)
        real = cluster.sample_noise(n, rng)
        for p in policies:
            # best of two: the first run also pays for page faults on fresh output arrays
            (dt, peak), (dt2, _) = (measure(lambda p=p: simulate(tasks, cluster, p, real)) for _ in range(2))
            dt = min(dt, dt2)
            us = dt / n * 1e6
            base.setdefault(p.name, us)
            rows.append({"policy": p.name, "tasks": n, "seconds": round(dt, 3), "tasks_per_s": round(n / dt),
                         "us_per_task": round(us, 3), "vs_smallest": round(us / base[p.name], 2),
                         "peak_mb": round(peak, 1)})
    big = [r for r in rows if r["tasks"] == max(args.sizes)]
    ok = all(r["tasks_per_s"] >= TARGET_TASKS_PER_S for r in big if r["policy"] in ("round_robin", "greedy", "eft"))
    ok_mem = all(r["peak_mb"] < TARGET_PEAK_MB for r in rows)
    from benchmarks.sim_profile import profile

    # eft's simulate, phase by phase, and the bare loop, taking turns in this process (best of 7);
    # the verdict is on CPU time, which a shared machine's waits for a core do not blur
    phases = profile(max(args.sizes), reps=3 if args.smoke else 7)
    vs_bare = phases["cpu"]["bare EFT loop"] / phases["cpu"]["simulate (whole)"]
    vs_bare_wall = phases["wall"]["bare EFT loop"] / phases["wall"]["simulate (whole)"]
    ok_bare = vs_bare >= TARGET_VS_BARE
    report("bench_sim", rows, {"target_tasks_per_s": TARGET_TASKS_PER_S, "target_peak_mb": TARGET_PEAK_MB,
                               "speed_target_met": ok, "memory_target_met": ok_mem,
                               "eft_phases_s": {clock: {k: round(v, 4) for k, v in ph.items()}
                                                for clock, ph in phases.items()},
                               "eft_vs_bare_loop": round(vs_bare, 3), "eft_vs_bare_loop_wall": round(vs_bare_wall, 3),
                               "target_vs_bare_loop": TARGET_VS_BARE,
                               "vs_bare_target_met": ok_bare})
    speeds = ", ".join(f"{r['policy']} {r['tasks_per_s']:,}" for r in big if r["policy"] in ("round_robin", "greedy", "eft"))
    print(f"speed target (>= {TARGET_TASKS_PER_S:,} tasks/s at {max(args.sizes):,}): {'met' if ok else 'MISSED'} ({speeds}); "
          f"memory target (< {TARGET_PEAK_MB} MB): {'met' if ok_mem else 'MISSED'} "
          f"(peak {max(r['peak_mb'] for r in rows):,} MB)")
    print(f"eft vs a bare compiled EFT loop at {max(args.sizes):,} (target >= {TARGET_VS_BARE}x): "
          f"{'met' if ok_bare else 'MISSED'} ({vs_bare:.2f}x by CPU time, best of rounds taking turns; "
          f"{vs_bare_wall:.2f}x by wall time)")


if __name__ == "__main__":
    main()
