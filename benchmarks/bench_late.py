"""Late dispatch speed: tasks/s of every late-mode policy at 10^4, 10^5, 10^6 tasks.

Run: `make bench` (or `python -m benchmarks.bench_late [--sizes 10000 100000 1000000]
[--workloads default bursty] [--smoke]`).  Every late heuristic of the scenarios stage
(``scenarios_late.roster``) and its learned late policies (their conf entries and the models
their stages write) runs through ``sim.simulate`` on the test split's task mix of each workload, drawn at
each size (seed 0, noise seed 1).  Targets (2 cores), the simulator's (``bench_sim``) for late
mode: >= 200,000 tasks/s for every one at 10^6 tasks on the default workload, time per task
near-flat in the task count (10^6 ÷ 10^4 <= 1.5 on every workload), < 1.5 GB peak.  A pick
scans the whole pool, so a workload whose pool grows with the run (overload) would show here
as time per task growing with the task count; ``bursty`` is the heaviest that stays stable.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.common import ROOT, measure, parse, project_path, report, settings
from hybridsched.devices import cluster_from_config
from hybridsched.kinds.machine.scenarios_late import config_roster, factories
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.workload import generate, spec_from_config

TARGET_TASKS_PER_S = 200_000
TARGET_LINEAR = 1.5  # us/task at the largest size / at the smallest
TARGET_PEAK_MB = 1536


def late_policies(cfg: dict) -> dict:
    """Name -> a fresh policy, for every late heuristic and learned late policy of ``cfg`` (the
    scenarios stage's factories; models and tuned weights taken from the project root).  Before
    `make repro` has made them, a heuristic runs untuned and a learned policy is left out, each
    said in one line (the speed of a pick does not depend on the weights' values)."""
    def anchored(node):
        if not isinstance(node, dict):
            return node
        out = {k: str(project_path(v)) if k in ("model_dir", "tuned") and v else anchored(v) for k, v in node.items()}
        if out.get("tuned") and not Path(out["tuned"]).is_file():
            print(f"bench_late: {out['tuned']} not made yet (`make repro`): its policy runs untuned")
            out["tuned"] = None
        return out

    specs = {n: anchored(s) for n, s in cfg["policies"]["machine"].items()}
    roster = config_roster(cfg)
    names = [*roster.late]
    for n in roster.learned_late:
        if (Path(specs[n]["model_dir"]) / "model.json").is_file():
            names.append(n)
        else:
            print(f"bench_late: {n} left out: no model in {specs[n]['model_dir']} (`make repro` trains it)")
    return factories(specs, names)


def timed(fn) -> float:
    """Wall seconds of one call."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def repeats(n: int) -> int:
    """Runs timed at ``n`` tasks (the best counts): about 3·10^5 tasks' worth, at least 2 and at
    most 30. A 10^4-task run takes milliseconds, so its best of three moved the linearity ratio
    (10^6 ÷ 10^4) by ±30 % between runs; thirty of them take 0.2 – 2.3 s per policy."""
    return max(2, min(30, 300_000 // n))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--workloads", nargs="+", default=["default", "bursty"])
    args = parse(ap)
    known = sorted(p.stem for p in (ROOT / "conf" / "workload").glob("*.yaml"))
    unknown = [w for w in args.workloads if w not in known]
    if unknown:
        ap.error(f"--workloads: unknown workload(s) {unknown}; known: {known}")
    if args.smoke:  # one workload: the second runs the same code
        args.sizes, args.workloads = [1000, 2000], args.workloads[:1]
    rows = []
    for wname in args.workloads:
        cfg = settings([f"workload={wname}", *args.overrides])
        if cfg["workload"].get("kind", "machine") != "machine":
            ap.error(f"--workloads: {wname} is a {cfg['workload']['kind']} workload; late dispatch is the machine kind's")
        cluster = cluster_from_config(cfg["cluster"])
        spec = spec_from_config(cfg["workload"], "test")
        pols = late_policies(cfg)
        warm = generate(spec, 300, np.random.default_rng(2), cpu_gflops=cluster.cpu_gflops)
        for make in pols.values():  # compile (or load the numba cache) outside the timings
            simulate(warm, cluster, make(), cluster.sample_noise(len(warm), np.random.default_rng(2)))
        base: dict[str, float] = {}
        for n in args.sizes:
            tasks = generate(spec, n, np.random.default_rng(0), cpu_gflops=cluster.cpu_gflops)
            real = cluster.sample_noise(n, np.random.default_rng(1))
            for name, make in pols.items():
                # timed without tracemalloc: numba's allocations go through it, and the network
                # policies allocate their candidates at every pick (2x slower traced); best of
                # `repeats(n)`, as the first run also pays for page faults on fresh output arrays
                dt = min(timed(lambda: simulate(tasks, cluster, make(), real)) for _ in range(repeats(n)))
                out = {}
                _, peak = measure(lambda: out.update(tr=simulate(tasks, cluster, make(), real)))
                us = dt / n * 1e6
                base.setdefault(name, us)
                tr = out["tr"]
                rows.append({"workload": wname, "policy": name, "tasks": n, "seconds": round(dt, 3),
                             "tasks_per_s": round(n / dt), "us_per_task": round(us, 3),
                             "vs_smallest": round(us / base[name], 2), "peak_mb": round(peak, 1),
                             "mean_latency_s": round(float(np.mean(tr.end - tr.arrival)), 4)})
    big = [r for r in rows if r["tasks"] == max(args.sizes)]
    slow = [r for r in big if r["workload"] == "default" and r["tasks_per_s"] < TARGET_TASKS_PER_S]
    ok = "default" in args.workloads and not slow
    bent = [r for r in big if r["vs_smallest"] > TARGET_LINEAR]
    ok_mem = all(r["peak_mb"] < TARGET_PEAK_MB for r in rows)
    report("bench_late", rows, {"target_tasks_per_s": TARGET_TASKS_PER_S, "target_linear": TARGET_LINEAR,
                                "target_peak_mb": TARGET_PEAK_MB, "speed_target_met": ok,
                                "linear_target_met": not bent, "memory_target_met": ok_mem})
    default_big = [r for r in big if r["workload"] == "default"]
    lo = min(default_big, key=lambda r: r["tasks_per_s"]) if default_big else None
    print(f"speed target (>= {TARGET_TASKS_PER_S:,} tasks/s for every late policy at {max(args.sizes):,} on default): "
          f"{'met' if ok else 'MISSED'} (slowest: {lo['policy'] + ' ' + format(lo['tasks_per_s'], ',') if lo else 'none run'}"
          f"{'; below: ' + ', '.join(r['policy'] for r in slow) if slow else ''})")
    worst = max(big, key=lambda r: r["vs_smallest"])
    print(f"near-linear (us/task at {max(args.sizes):,} / at {min(args.sizes):,} <= {TARGET_LINEAR}): "
          f"{'met' if not bent else 'MISSED'} (worst {worst['policy']} on {worst['workload']} {worst['vs_smallest']}x"
          f"{'; above: ' + ', '.join(r['workload'] + '/' + r['policy'] for r in bent) if bent else ''}); "
          f"memory target (< {TARGET_PEAK_MB} MB): {'met' if ok_mem else 'MISSED'} "
          f"(peak {max(r['peak_mb'] for r in rows):,} MB)")


if __name__ == "__main__":
    main()
