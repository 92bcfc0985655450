"""Streaming runs of the machine kind: tasks/s end to end and peak RSS at 10^6, 10^7 (and 10^8) tasks.

Run: `python -m benchmarks.bench_stream [--sizes 1000000 10000000] [--with-1e8] [--policy eft] [--smoke]
[OVERRIDE ...]` (overrides go to each streaming run's Hydra config).
Each size runs twice in a fresh process (`python -m hybridsched.kinds.machine.stream`), with the
trace written (parquet row groups, to a temp dir removed afterwards) and with trace writing off,
so the peak RSS is that run's alone.  "End to end" = generate + simulate + summarise (+ write),
after a warm-up that compiles the engine.  Targets: peak RSS < 2 GB at every size, >= 3 M tasks/s
at the largest size (reported separately with and without the trace write).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import parse, report

TARGET_TASKS_PER_S = 3_000_000
TARGET_PEAK_MB = 2048


def run_one(n: int, policy: str, write_trace: bool, chunk_size: int, overrides: list[str] = ()) -> dict:
    """One streaming run in a fresh process; its JSON line."""
    with tempfile.TemporaryDirectory(prefix="bench_stream_") as tmp:
        cmd = [sys.executable, "-m", "hybridsched.kinds.machine.stream", "--tasks", str(n), "--policy", policy,
               f"sim.stream.write_trace={str(write_trace).lower()}", f"sim.stream.chunk_size={chunk_size}", *overrides]
        if write_trace:
            cmd[3:3] = ["--out", str(Path(tmp) / "trace.parquet")]
        res = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
        if res.returncode != 0:
            raise SystemExit(f"streaming run failed ({' '.join(cmd)}):\n{res.stderr[-2000:]}")
        out = json.loads(res.stdout.strip().splitlines()[-1])
        if write_trace:
            out["trace_mb"] = (Path(tmp) / "trace.parquet").stat().st_size / 2**20
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--with-1e8", action="store_true", help="also run 10^8 tasks (~1 min per mode on a quiet machine)")
    ap.add_argument("--policy", default="eft")
    ap.add_argument("--chunk-size", type=int, default=1_000_000)
    ap.add_argument("--no-trace-only", action="store_true", help="skip the runs that write the trace")
    args = parse(ap)
    if args.smoke:
        args.sizes, args.chunk_size = [20_000], 10_000
    sizes = sorted(set(args.sizes + ([100_000_000] if args.with_1e8 else [])))
    modes = [False] if args.no_trace_only else [True, False]
    rows = []
    for n in sizes:
        for wt in modes:
            r = run_one(n, args.policy, wt, args.chunk_size, args.overrides)
            rows.append({"policy": r["policy"], "tasks": n, "write_trace": wt, "chunk_size": r["chunk_size"],
                         "seconds": round(r["seconds"], 2), "tasks_per_s": round(r["tasks_per_s"]),
                         "peak_rss_mb": round(r["peak_rss_mb"], 1), "trace_mb": round(r.get("trace_mb", 0.0), 1),
                         "p99_latency": round(r["metrics"]["p99_latency"], 4)})
            print(rows[-1], flush=True)
    big = max(sizes)
    verdict = {}
    for wt in modes:
        r = next(r for r in rows if r["tasks"] == big and r["write_trace"] == wt)
        verdict[f"speed_target_met_{'with' if wt else 'without'}_trace"] = r["tasks_per_s"] >= TARGET_TASKS_PER_S
    verdict["memory_target_met"] = all(r["peak_rss_mb"] < TARGET_PEAK_MB for r in rows)
    report("bench_stream", rows, {"target_tasks_per_s": TARGET_TASKS_PER_S, "target_peak_mb": TARGET_PEAK_MB,
                                  "cpu_count": os.cpu_count(), **verdict})
    for k, ok in verdict.items():
        if "speed" in k:
            r = next(r for r in rows if r["tasks"] == big and r["write_trace"] == ("with_trace" in k))
            figure = f"{r['tasks_per_s']:,} tasks/s, {r['seconds']} s"
        else:
            figure = f"peak {max(r['peak_rss_mb'] for r in rows):,} MB"
        print(f"{k.replace('_met', '')} ({'>= 3,000,000 tasks/s at ' + format(big, ',') if 'speed' in k else '< 2048 MB peak RSS'}): "
              f"{'met' if ok else 'MISSED'} ({figure})")


if __name__ == "__main__":
    main()
