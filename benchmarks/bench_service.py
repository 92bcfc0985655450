"""Live service throughput: tasks/s through the whole live path (engine for every policy,
statistics, metrics, SQLite persistence) with 50 WebSocket clients and a steady REST load,
and the REST P99 latency under that load, on a real uvicorn server on 127.0.0.1.

Run: `python -m benchmarks.bench_service [--seconds 20] [--clients 50] [--rest-rps 20] [--smoke]
[OVERRIDE ...]`
(after `make repro`, which trains models/rf and models/dqn; `--small-models` trains small
stand-ins into a temp dir instead, for a machine without them).
Targets: >= 5,000 tasks/s broadcast to 6 policies with SQLite persistence; REST P99 < 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.common import parse, report

TARGET_TASKS_PER_S = 5_000
TARGET_P99_MS = 50.0
POLICIES = ["round_robin", "greedy", "eft", "hybrid_ml", "dqn", "dqn_online"]


def write_small_models(root: Path, cluster_cfg: dict) -> dict[str, Path]:
    """A small RandomForest (models/rf format) and an untrained DQN network (models/dqn format)."""
    import torch

    from hybridsched.kinds.machine.devices import cluster_from_config
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=20.0, help="measured window after warm-up")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--rest-rps", type=float, default=20.0)
    ap.add_argument("--policies", nargs="+", default=POLICIES)
    ap.add_argument("--small-models", action="store_true", help="train small stand-in models into a temp dir")
    args = parse(ap)
    if args.smoke:  # a few seconds, small stand-in models
        args.seconds, args.clients, args.rest_rps, args.small_models = 2.0, 2, 5.0, True

    import httpx
    import uvicorn

    from hybridsched.service.app import create_app
    from hybridsched.service.settings import load_settings

    tmp = Path(tempfile.mkdtemp(prefix="bench-service-"))
    settings = load_settings(args.overrides, database_url=f"sqlite:///{tmp}/bench.db", token="bench", speed=0.0,
                             rate_limit="100000/minute")
    settings.policies = list(args.policies)
    if args.small_models:
        dirs = write_small_models(tmp / "models", settings.machine["cluster"])
        for spec in settings.machine["policies"].values():
            if "model_dir" in spec:
                spec["model_dir"] = str(dirs["rf" if "rf" in str(spec["model_dir"]) else "dqn"])
    app = create_app(settings)
    app.state.svc.race.check()  # compile every kernel and load every model before timing
    with socket_port() as port:
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                               ws="websockets-sansio"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    stop = threading.Event()
    counts = [0] * args.clients
    ws_thread = threading.Thread(target=lambda: asyncio.run(_ws_clients(f"ws://127.0.0.1:{port}/ws", args.clients,
                                                                        stop, counts)), daemon=True)
    ws_thread.start()
    httpx.post(f"{base}/api/simulation/start", headers={"Authorization": "Bearer bench"}, timeout=120).raise_for_status()
    race = app.state.svc.race
    metrics = app.state.svc.metrics
    while race.total < 2 * settings.segment_tasks:  # warm-up: first segments, WebSocket connections
        time.sleep(0.1)
    lat_ms: list[float] = []
    rest = threading.Thread(target=_rest_load, args=(base, args.rest_rps, stop, lat_ms), daemon=True)
    rest.start()
    committed0 = metrics.db_tasks._value.get()
    released0, msgs0, t0 = race.total, sum(counts), time.perf_counter()
    time.sleep(args.seconds)
    dt = time.perf_counter() - t0
    committed = metrics.db_tasks._value.get() - committed0
    released = race.total - released0
    msgs = sum(counts) - msgs0
    stop.set()
    rest.join(15)
    httpx.post(f"{base}/api/simulation/stop", headers={"Authorization": "Bearer bench"}, timeout=120)
    server.should_exit = True
    th.join(30)
    ws_thread.join(15)

    tasks_per_s = committed / dt
    p50, p99 = (float(np.percentile(lat_ms, q)) for q in (50, 99)) if lat_ms else (float("nan"),) * 2
    rows = [
        {"measure": "tasks/s committed (all policies decided, SQLite)", "value": round(tasks_per_s, 1),
         "target": f">= {TARGET_TASKS_PER_S}", "met": bool(tasks_per_s >= TARGET_TASKS_PER_S)},
        {"measure": "tasks/s released by the race", "value": round(released / dt, 1), "target": "", "met": None},
        {"measure": "result rows/s (tasks x policies)", "value": round(committed * len(settings.policies) / dt, 1),
         "target": "", "met": None},
        {"measure": "REST P50 ms", "value": round(p50, 2), "target": "", "met": None},
        {"measure": "REST P99 ms", "value": round(p99, 2), "target": f"< {TARGET_P99_MS:g}", "met": bool(p99 < TARGET_P99_MS)},
        {"measure": "REST requests", "value": len(lat_ms), "target": "", "met": None},
        {"measure": "WebSocket msgs/s per client", "value": round(msgs / dt / max(args.clients, 1), 2),
         "target": "<= 10", "met": bool(msgs / dt / max(args.clients, 1) <= 10.5)},
    ]
    for r in rows:
        if r["met"] is not None:
            print(f"{r['measure']}: {r['value']} (target {r['target']}) {'met' if r['met'] else 'MISSED'}")
    report("bench_service", rows, {"policies": settings.policies, "clients": args.clients, "rest_rps": args.rest_rps,
                                   "seconds": round(dt, 1), "small_models": args.small_models,
                                   "segment_tasks": settings.segment_tasks, "write_batch": settings.write_batch})


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
