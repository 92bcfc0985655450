"""Live service: start-up time and idle memory of `hybridsched serve`, then throughput
(tasks/s through the whole live path: engine for every policy, statistics, metrics, SQLite
persistence) with 50 WebSocket clients and a steady REST load, the REST P99 latency under that
load, and the server's RSS slope over the race (memory must stay flat; the API process and its
race worker together), on a real server process (the `hybridsched serve` command) on 127.0.0.1.

Run: `python -m benchmarks.bench_service [--seconds 60] [--clients 50] [--rest-rps 20] [--smoke]
[--out DIR] [OVERRIDE ...]`
(`--soak` for a 10-minute race; after `make repro`, which trains models/rf and models/dqn;
`--small-models` trains small stand-ins into a temp dir instead, for a machine without them).
Targets: start-up < 10 s; idle RSS < 400 MB; >= 5,000 tasks/s broadcast to 6 policies with
SQLite persistence; REST P99 < 50 ms; RSS slope < 2 MB/min.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.common import parse, report

TARGET_TASKS_PER_S = 5_000
TARGET_P99_MS = 50.0
TARGET_STARTUP_S = 10.0
TARGET_IDLE_RSS_MB = 400.0
TARGET_RSS_SLOPE_MB_MIN = 2.0
ROOT = Path(__file__).resolve().parents[1]
POLICIES = ["round_robin", "greedy", "eft", "hybrid_ml", "dqn", "dqn_online"]


def write_small_models(root: Path, cluster_cfg: dict) -> dict[str, Path]:
    """A small RandomForest (models/rf format) and an untrained DQN network (models/dqn format)."""
    import torch

    from hybridsched.devices import cluster_from_config
    from hybridsched.kinds.machine.dqn_state import StateSpec
    from hybridsched.kinds.machine.engine import task_matrix
    from hybridsched.kinds.machine.runtime_model import save_model, train_runtime_model
    from hybridsched.kinds.machine.workload import WorkloadSpec, generate
    from hybridsched.kinds.machine.dqn import DQNSettings, QNetwork, save_network

    cluster = cluster_from_config(cluster_cfg)
    X = task_matrix(generate(WorkloadSpec(rate=6.0), 400, np.random.default_rng(1)), cluster)
    rf_cfg = {"model": "random_forest", "seed": 0, "test_fraction": 0.25, "importance_repeats": 1,
              "random_forest": {"n_estimators": 10, "max_depth": 8, "min_samples_leaf": 3, "n_jobs": 1}}
    save_model(train_runtime_model(X, cluster, rf_cfg)[0], root / "rf")
    dqn = DQNSettings(hidden=16)
    spec = StateSpec.fit(X, cluster, dqn.fractions)
    torch.manual_seed(0)
    save_network(root / "dqn", QNetwork(spec.n_state, spec.n_actions, dqn.hidden), spec, dqn)
    return {"rf": root / "rf", "dqn": root / "dqn"}


async def _ws_clients(url: str, n: int, stop: threading.Event, counts: list[int]) -> None:
    from websockets.asyncio.client import connect

    async def one(i: int) -> None:
        async with connect(url, max_size=2**24) as ws:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(ws.recv(), 0.5)
                    counts[i] += 1
                except TimeoutError:
                    pass

    await asyncio.gather(*(one(i) for i in range(n)))


def _rest_load(base: str, rps: float, stop: threading.Event, lat_ms: list[float]) -> None:
    import httpx

    paths = ["/api/simulation/status", "/api/full_history?limit=50", "/api/metrics", "/api/full_history?limit=20&policy=eft"]
    with httpx.Client(base_url=base, timeout=10) as c:
        k = 0
        nxt = time.perf_counter()
        while not stop.is_set():
            t0 = time.perf_counter()
            r = c.get(paths[k % len(paths)])
            r.raise_for_status()
            lat_ms.append((time.perf_counter() - t0) * 1e3)
            k += 1
            nxt += 1.0 / rps
            time.sleep(max(0.0, nxt - time.perf_counter()))


def _serve(tmp: Path, port: int, policies: list[str], overrides: list[str]) -> tuple[subprocess.Popen, float]:
    """`hybridsched serve` in a child process; (process, seconds until /api/health answered 200)."""
    import httpx

    env = {**os.environ, "HYBRIDSCHED_TOKEN": "bench", "HYBRIDSCHED_DATABASE_URL": f"sqlite:///{tmp}/bench.db",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "hybridsched.cli", "serve", "--port", str(port), "--log-level", "warning",
           f"service.policies=[{','.join(policies)}]", "service.rate_limit=100000/minute", "service.speed=0",
           *overrides]
    log = (tmp / "server.log").open("ab")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"bench_service: the server exited: {(tmp / 'server.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=1).status_code == 200:
                return proc, time.perf_counter() - t0
        except httpx.HTTPError:
            pass
        if time.perf_counter() - t0 > 300:
            proc.kill()
            raise SystemExit("bench_service: the server did not answer within 300 s")
        time.sleep(0.05)


def _committed(base: str) -> float:
    """Tasks committed to the database so far (the server's Prometheus counter)."""
    import httpx

    text = httpx.get(f"{base}/api/metrics", timeout=10).text
    m = re.search(r"^hybridsched_db_tasks_written_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def _rss_mb(server) -> float:  # noqa: ANN001 (a psutil.Process)
    """RSS (MB) of the server and its race worker process together."""
    import psutil

    total = 0
    for p in [server, *server.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:  # a worker that just exited
            pass
    return total / 2**20


def _slope_mb_per_min(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of RSS (MB) against time (min), leaving out the first fifth of the
    window or its first 20 s, whichever is longer (the first segments, the database's page cache
    and the connections settle there)."""
    a = np.array(samples)
    if len(a) < 5:
        return float("nan")
    a = a[a[:, 0] >= max(20.0, a[-1, 0] / 5)]
    if len(a) < 5:
        return float("nan")
    return float(np.polyfit(a[:, 0] / 60.0, a[:, 1], 1)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=60.0, help="measured race window after warm-up")
    ap.add_argument("--soak", action="store_true", help="a 10-minute race window (RSS slope over a long race)")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--rest-rps", type=float, default=20.0)
    ap.add_argument("--policies", nargs="+", default=POLICIES)
    ap.add_argument("--small-models", action="store_true", help="train small stand-in models into a temp dir")
    ap.add_argument("--out", type=Path, default=None, help="folder of the JSON table (default: metrics/)")
    args = parse(ap)  # positional OVERRIDEs go to the server, e.g. service.switch_interval_s=0.005
    if args.smoke:  # a few seconds, small stand-in models
        args.seconds, args.clients, args.rest_rps, args.small_models, args.soak = 2.0, 2, 5.0, True, False
    seconds = 600.0 if args.soak else args.seconds

    import httpx
    import psutil

    from hybridsched.service.settings import load_settings

    tmp = Path(tempfile.mkdtemp(prefix="bench-service-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # database, models, server log: gone at exit, whatever happens
    settings = load_settings([])
    overrides: list[str] = []
    if args.small_models:
        dirs = write_small_models(tmp / "models", settings.machine["cluster"])
        overrides = [f"rf.model_dir={dirs['rf']}", f"dqn.model_dir={dirs['dqn']}"]
    with socket_port() as port:
        pass
    base = f"http://127.0.0.1:{port}"
    proc, startup_s = _serve(tmp, port, list(args.policies), [*overrides, *args.overrides])
    server = psutil.Process(proc.pid)
    time.sleep(3.0)  # idle: nothing started
    idle_rss = _rss_mb(server)
    stop = threading.Event()
    counts = [0] * args.clients
    ws_thread = threading.Thread(target=lambda: asyncio.run(_ws_clients(f"ws://127.0.0.1:{port}/ws", args.clients,
                                                                        stop, counts)), daemon=True)
    try:
        ws_thread.start()
        auth = {"Authorization": "Bearer bench"}
        httpx.post(f"{base}/api/simulation/start", headers=auth, json={"speed": 0}, timeout=120).raise_for_status()
        seg = settings.segment_tasks
        while httpx.get(f"{base}/api/simulation/status", timeout=30).json()["tasks"] < 2 * seg:  # warm-up
            if proc.poll() is not None:
                raise SystemExit("bench_service: the server died during warm-up")
            time.sleep(0.2)
        lat_ms: list[float] = []
        rest = threading.Thread(target=_rest_load, args=(base, args.rest_rps, stop, lat_ms), daemon=True)
        rest.start()
        committed0, msgs0, t0 = _committed(base), sum(counts), time.perf_counter()
        rss: list[tuple[float, float]] = []
        while (now := time.perf_counter()) - t0 < seconds:
            rss.append((now - t0, _rss_mb(server)))
            time.sleep(min(1.0, max(0.0, seconds - (now - t0))))
        dt = time.perf_counter() - t0
        committed = _committed(base) - committed0
        msgs = sum(counts) - msgs0
        stop.set()
        rest.join(15)
        httpx.post(f"{base}/api/simulation/stop", headers=auth, timeout=120)
    finally:
        stop.set()
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    ws_thread.join(15)

    tasks_per_s = committed / dt
    p50, p99 = (float(np.percentile(lat_ms, q)) for q in (50, 99)) if lat_ms else (float("nan"),) * 2
    slope = _slope_mb_per_min(rss)
    per_client = msgs / dt / max(args.clients, 1)
    rows = [
        {"measure": "start-up s (process start to /api/health 200)", "value": round(startup_s, 2),
         "target": f"< {TARGET_STARTUP_S:g}", "met": bool(startup_s < TARGET_STARTUP_S)},
        {"measure": "idle RSS MB", "value": round(idle_rss, 1), "target": f"< {TARGET_IDLE_RSS_MB:g}",
         "met": bool(idle_rss < TARGET_IDLE_RSS_MB)},
        {"measure": "tasks/s committed (all policies decided, SQLite)", "value": round(tasks_per_s, 1),
         "target": f">= {TARGET_TASKS_PER_S}", "met": bool(tasks_per_s >= TARGET_TASKS_PER_S)},
        {"measure": "result rows/s (tasks x policies)", "value": round(committed * len(args.policies) / dt, 1),
         "target": "", "met": None},
        {"measure": "REST P50 ms", "value": round(p50, 2), "target": "", "met": None},
        {"measure": "REST P99 ms (a race running)", "value": round(p99, 2), "target": f"< {TARGET_P99_MS:g}", "met": bool(p99 < TARGET_P99_MS)},
        {"measure": "REST requests", "value": len(lat_ms), "target": "", "met": None},
        {"measure": "WebSocket msgs/s per client", "value": round(per_client, 2), "target": "<= 10",
         "met": bool(per_client <= 10.5)},
        {"measure": "RSS at start of race window MB", "value": round(rss[0][1], 1) if rss else None, "target": "", "met": None},
        {"measure": "RSS at end of race window MB", "value": round(rss[-1][1], 1) if rss else None, "target": "", "met": None},
        {"measure": "RSS slope MB/min over the race", "value": round(slope, 2),
         "target": f"< {TARGET_RSS_SLOPE_MB_MIN:g}", "met": bool(slope < TARGET_RSS_SLOPE_MB_MIN)},
    ]
    for r in rows:
        if r["met"] is not None:
            print(f"{r['measure']}: {r['value']} (target {r['target']}) {'met' if r['met'] else 'MISSED'}")
    report("bench_service", rows, {"policies": list(args.policies), "overrides": list(args.overrides), "clients": args.clients, "rest_rps": args.rest_rps,
                                   "seconds": round(dt, 1), "small_models": args.small_models,
                                   "segment_tasks": settings.segment_tasks, "write_batch": settings.write_batch,
                                   "rss_samples_mb": [round(m, 1) for _, m in rss]}, folder=args.out)


class socket_port:  # noqa: N801 - a tiny context manager
    """A free loopback port."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        return None


if __name__ == "__main__":
    main()
