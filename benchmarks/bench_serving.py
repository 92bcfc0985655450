"""Serving simulator speed: requests/s for FIFO and dynamic at 10^4, 10^5, 10^6 requests, peak memory.

Run: `python -m benchmarks.bench_serving [--sizes 10000 100000 1000000]`.
Targets (2 cores): >= 1,000,000 requests/s for FIFO and >= 300,000/s for dynamic at 10^6.
The load keeps the machine busy (rate 40/s on 4 lanes, synthetic linear latency table).
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from benchmarks.common import measure, report
from hybridsched.kinds.serving.engine import simulate
from hybridsched.kinds.serving.latency import dense_latency
from hybridsched.kinds.serving.policies import FIFO, Dynamic
from hybridsched.kinds.serving.settings import ServingSettings
from hybridsched.kinds.serving.workload import generate_stream, to_requests

TARGETS = {"fifo": 1_000_000, "dynamic": 300_000}


def _table(s: ServingSettings) -> np.ndarray:
    base = {"resnet18": 0.03, "resnet50": 0.08, "vit_b16": 0.4}
    rows = [{"model": m, "backend": be, "precision": "fp32", "batch": b,
             "latency_ms": 1e3 * base[m] * (0.6 + 0.4 * b)} for m in base for be in s.backends for b in (1, 128)]
    return dense_latency(pd.DataFrame(rows), s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    args = ap.parse_args()
    s = ServingSettings(lanes=4, window_ms=20.0)
    lat = _table(s)
    policies = [FIFO(), Dynamic()]
    warm = to_requests(generate_stream({"rate": 40.0}, s, 500, 1, 0, lat[:, 1]), s)
    for p in policies:  # compile outside the timings
        simulate(warm, s, lat, p)
    rows = []
    for n in args.sizes:
        reqs = to_requests(generate_stream({"rate": 40.0}, s, n, 0, 0, lat[:, 1]), s)
        for p in policies:
            (dt, peak), (dt2, _) = (measure(lambda p=p: simulate(reqs, s, lat, p)) for _ in range(2))
            dt = min(dt, dt2)
            rows.append({"policy": p.name, "requests": n, "seconds": round(dt, 3), "requests_per_s": round(n / dt),
                         "us_per_request": round(dt / n * 1e6, 3), "peak_mb": round(peak, 1)})
    big = {r["policy"]: r["requests_per_s"] for r in rows if r["requests"] == max(args.sizes)}
    met = {k: big.get(k, 0) >= v for k, v in TARGETS.items()}
    report("bench_serving", rows, {"targets_requests_per_s": TARGETS, "met": met,
                                   "note": "wall time of simulate() incl. building the trace DataFrame"})
    for k, v in TARGETS.items():
        print(f"{k}: {big.get(k, 0):,} requests/s at {max(args.sizes):,} (target >= {v:,}): {'met' if met[k] else 'MISSED'}")


if __name__ == "__main__":
    main()
