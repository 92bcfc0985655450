"""Faults on a real server process: kill -9 mid-run leaves only whole batches, and the run
resumes where the committed rows end; SIGTERM stops gracefully with everything flushed. The
race's worker process ends with the server either way (no orphan)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from hybridsched.service.persistence import Store
from tests.service.conftest import free_port, serve, wait_for

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "fault-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
POLICIES = ["round_robin", "greedy", "eft"]


def _serve(db: Path, port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "HYBRIDSCHED_TOKEN": TOKEN, "HYBRIDSCHED_DATABASE_URL": f"sqlite:///{db}",
           "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    return serve(["--log-level", "warning", f"service.policies=[{','.join(POLICIES)}]", "service.segment_tasks=500",
                  "service.write_batch=200", "service.speed=20"],  # the default; the run itself goes at 0
                 port=port, cwd=ROOT, env=env, log=log, timeout=180)


def _committed(store: Store, run_id: int) -> tuple[int, dict, list]:
    from sqlalchemy import text

    run = store.run(run_id)
    with store.engine.connect() as c:
        task_ids = [r[0] for r in c.execute(text("SELECT task_id FROM tasks WHERE run_id=:r ORDER BY task_id"),
                                            {"r": run_id})]
        rows = c.execute(text("SELECT task_id, policy, gpu, fraction, \"end\", latency, energy_j FROM results "
                              "WHERE run_id=:r ORDER BY task_id, policy"), {"r": run_id}).all()
        nulls = c.execute(text("SELECT count(*) FROM results WHERE \"end\" IS NULL OR latency IS NULL "
                               "OR energy_j IS NULL OR device IS NULL")).scalar()
    n = run["n_tasks"]
    assert task_ids == list(range(n)), "committed tasks are exactly the stream's prefix 0..n-1"
    assert store.counts(run_id) == {p: n for p in POLICIES}, "every committed task has every policy's result"
    assert nulls == 0
    return n, run, rows


def _race_worker(proc: subprocess.Popen) -> list:
    """The server's child processes, once its race worker is among them (the race runs there)."""
    import psutil

    def children() -> list:
        kids = psutil.Process(proc.pid).children(recursive=True)
        return kids if any("spawn_main" in " ".join(k.cmdline()) for k in kids) else []

    return wait_for(children, timeout=60)


def _all_gone(procs: list) -> bool:
    import psutil

    def alive(p) -> bool:  # noqa: ANN001
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    return not any(alive(p) for p in procs)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_kill_9_mid_run_then_resume(tmp_path):
    db = tmp_path / "service.db"
    log = tmp_path / "server.log"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _serve(db, port, log)
    try:
        assert httpx.post(f"{base}/api/simulation/start", headers=AUTH, json={"speed": 0}, timeout=60).status_code == 200
        wait_for(lambda: httpx.get(f"{base}/api/simulation/status").json()["tasks"] > 3000, timeout=180, step=0.1)
        workers = _race_worker(proc)  # the race and its writer run in a worker process
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        wait_for(lambda: _all_gone(workers), timeout=30)  # which dies with the server: no orphan
    finally:
        if proc.poll() is None:
            proc.kill()
    store = Store(f"sqlite:///{db}")
    n_before, run, rows_before = _committed(store, 1)
    assert n_before > 0 and run["status"] == "running"  # nobody had the chance to mark it
    store.dispose()

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _serve(db, port, log)
    try:
        st = httpx.get(f"{base}/api/simulation/status").json()
        # the restarted server shows the killed run as interrupted and resumable, with its summaries
        assert st["state"] == "interrupted" and st["resumable"] and st["run_id"] == 1 and st["tasks"] == n_before
        assert {p: s["n"] for p, s in st["summary"].items()} == {p: n_before for p in POLICIES}
        assert st["speed"] == 0
        r = httpx.post(f"{base}/api/simulation/start", headers=AUTH, json={"resume": True}, timeout=60)
        assert r.status_code == 200 and r.json()["run_id"] == 1
        st = wait_for(lambda: (s := httpx.get(f"{base}/api/simulation/status").json())["tasks"] > n_before + 1000
                      and s, timeout=180, step=0.1)
        assert st["speed"] == 0  # the run's speed, not the server's default 20
        assert all(s["n"] > n_before for s in st["summary"].values())  # carried on, not restarted at 0
        assert 0 <= st["tasks_per_s"] < 1e6
        workers = _race_worker(proc)
        proc.send_signal(signal.SIGTERM)  # graceful: stop the race, commit, exit 0
        assert proc.wait(60) == 0
        wait_for(lambda: _all_gone(workers), timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    store = Store(f"sqlite:///{db}")
    n_after, run, rows_after = _committed(store, 1)
    assert n_after > n_before + 1000 and run["status"] == "stopped"
    # every row written before the kill is intact, unchanged
    assert rows_after[: len(rows_before)] == rows_before
