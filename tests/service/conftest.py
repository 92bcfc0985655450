"""Fixtures of the service tests: settings on a tmp_path database, tiny learned models trained
into a temp dir, real servers (uvicorn in a thread, PostgreSQL, Redis) started and stopped here."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from hybridsched.service.settings import ServiceSettings, load_settings
from tests.pg_fixture import create_database, postgres_server  # noqa: F401  (fixture)

CLASSIC = ["round_robin", "greedy", "eft"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def base_settings(tmp_path_factory) -> ServiceSettings:
    """The composed config once per test run (Hydra is slow to compose). Its models and tuned
    weights are looked for under a temp dir (the learned models missing, the heuristics
    untuned), never in the checkout's models/: /api/config reads them."""
    from tests.runs import untuned_override

    for var in ("HYBRIDSCHED_TOKEN", "HYBRIDSCHED_DATABASE_URL", "REDIS_URL", "HYBRIDSCHED_CORS_ORIGINS",
                "HYBRIDSCHED_TRUSTED_PROXIES", "HYBRIDSCHED_ALLOWED_HOSTS"):
        os.environ.pop(var, None)
    none = tmp_path_factory.mktemp("no-models")
    return load_settings([untuned_override(), f"train_late.model_dir={none / 'late'}",
                          *(f"{m}.model_dir={none / m}" for m in ("rf", "dqn", "cem"))])


@pytest.fixture
def make_settings(base_settings, tmp_path):
    """Settings on a database under tmp_path; keyword arguments override fields."""

    def make(**kw) -> ServiceSettings:
        fields = {"database_url": f"sqlite:///{tmp_path}/service.db", "token": "secret-token", "policies": CLASSIC,
                  "segment_tasks": 200, "speed": 0.0, "tick_s": 0.05, "rate_limit": "1000/minute",
                  # the loopback names and TestClient's "testserver"
                  "allowed_hosts": ["localhost", "127.0.0.1", "::1", "testserver"], **kw}
        return base_settings.model_copy(update=fields, deep=True)

    return make


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory, base_settings) -> dict:
    """A small RandomForest and an untrained DQN network (seconds), and the policy specs using them."""
    from benchmarks.bench_service import write_small_models

    dirs = write_small_models(tmp_path_factory.mktemp("models"), base_settings.machine["cluster"])
    specs = dict(base_settings.machine["policies"])
    for name, spec in specs.items():
        if "model_dir" in spec:
            specs[name] = {**spec, "model_dir": str(dirs["rf" if "hybrid_ml" in name else "dqn"])}
    return {"policies": specs}


@pytest.fixture
def learned_settings(make_settings, tiny_models):
    """Settings whose learned policies read the tiny models."""

    def make(**kw) -> ServiceSettings:
        s = make_settings(**kw)
        s.machine["policies"] = tiny_models["policies"]
        return s

    return make


class ThreadServer:
    """The app under a real uvicorn server on a free loopback port, in a thread."""

    def __init__(self, app) -> None:  # noqa: ANN001
        import uvicorn

        from hybridsched.service.app import server_options

        self.port = free_port()
        # the options `hybridsched serve` uses (uvicorn's own forwarded-header handling off, ...)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    **server_options(app.state.svc.settings.stall_drop_s)))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture
def thread_server():
    return ThreadServer


# --- PostgreSQL ----------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def postgresql_url(postgres_server: int) -> str:  # noqa: F811
    """An empty database ``hybridsched_test`` on the test run's throw-away PostgreSQL server
    (tests/pg_fixture.py: started as the ``postgres`` user, waited for, stopped at the end)."""
    return create_database(postgres_server, "hybridsched_test")


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path) -> str:
    """An empty service database: a SQLite file, then the test PostgreSQL server's (emptied)."""
    from hybridsched.service.persistence import Store

    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/store.db"
    url = request.getfixturevalue("postgresql_url")
    store = Store(url)  # each test starts from an empty schema
    store.upgrade()
    store.delete_history()
    store.dispose()
    return url


def fill_history(store, runs: list[tuple[list[str], int]], batch: int = 20_000) -> list[int]:  # noqa: ANN001
    """Runs written straight into ``store`` (no race): one per (policies, n_tasks), tasks
    0..n_tasks-1 with a result row per policy; the run ids, in order. Seconds for 10^5 rows."""
    import numpy as np

    from hybridsched.service.persistence import Batch

    ids = []
    for policies, n in runs:
        run_id = store.create_run({"policies": policies})
        for lo in range(0, n, batch):
            t = np.arange(lo, min(n, lo + batch))
            f = t.astype(float)
            tasks = {"task_id": t, "segment": t // 1000, "arrival": f, "size": f + 1, "intensity": f % 7,
                     "memory_mb": f % 11, "priority": t % 3, "deadline": np.full(len(t), np.nan)}
            results = [{"task_id": t, "policy": p, "device": "cpu", "gpu": np.full(len(t), -1),
                        "fraction": np.zeros(len(t)), "ready": f, "cpu_start": f, "cpu_end": f + 1,
                        "gpu_start": np.full(len(t), np.nan), "gpu_end": np.full(len(t), np.nan),
                        "gpu_mem_mb": np.zeros(len(t)), "end": f + 1, "latency": np.ones(len(t)),
                        "energy_j": np.ones(len(t)), "cost_usd": np.zeros(len(t))} for p in policies]
            store.write(Batch(run_id, int(t[-1]) + 1, float(t[-1]), tasks, np.zeros((0, 2), dtype=np.int64),
                              results))
        ids.append(run_id)
    return ids


# --- Redis ------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def redis_url():
    """A throw-away redis-server on a free loopback port (no persistence)."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (Debian package redis-server; `make system-deps`)")
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    client = redis.Redis(port=port)
    # installed but not answering is a failure, not a skip (a skip would hide it); 60 s for a loaded CI box
    deadline = time.monotonic() + 60
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"redis-server on port {port} did not answer (exit status {proc.poll()})") from None
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(10)


def wait_for(pred, timeout: float = 60.0, step: float = 0.05):  # noqa: ANN001, ANN201
    """Poll ``pred`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.time() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(step)


def serve(args: list[str], *, port: int, cwd: Path, env: dict[str, str], log: Path, timeout: float = 240,
          step: float = 0.2) -> subprocess.Popen:
    """``hybridsched serve --port PORT ARGS`` as a real process (output appended to ``log``),
    returned once ``/api/health`` answers 200; fails with the log's tail if it exits first."""
    cmd = [sys.executable, "-m", "hybridsched.cli", "serve", "--port", str(port), *args]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {log.read_text()[-2000:]}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, timeout=timeout, step=step)
    except BaseException:
        proc.kill()
        raise
    return proc
