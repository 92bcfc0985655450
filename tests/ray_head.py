"""A Ray head on loopback for one test: its own process group, temp dir, ports and a small
object store, stopped after (tests/machine/test_ray_sweep.py, tests/machine/test_rllib.py)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).parent / "ray"


def ray_env() -> dict[str, str]:
    """The environment of the head and of the drivers that join it."""
    # RAY_AUTH_MODE for head and driver alike: a ~/.ray/auth_token (which any local ray.init()
    # writes) otherwise turns token auth on in the head but not in a driver that RAY_ADDRESS
    # points at, and the driver is refused
    return {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "disabled"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def ray_head() -> Iterator[str]:
    """Start a head (skip the test if Ray is not installed) and yield its address."""
    if not RAY.exists():
        pytest.skip("ray is not installed in this environment")
    tmp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    ports = [_free_port() for _ in range(3)]  # own ports: another head may run beside this one
    log = open(tmp / "head.log", "w")
    proc = subprocess.Popen([str(RAY), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
                             f"--port={ports[0]}", f"--ray-client-server-port={ports[1]}",
                             f"--dashboard-agent-listen-port={ports[2]}", f"--temp-dir={tmp}", "--num-cpus=2",
                             "--object-store-memory=100000000", "--include-dashboard=false",
                             "--disable-usage-stats"],
                            cwd=ROOT, env=ray_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 180
        while "Ray runtime started" not in (tmp / "head.log").read_text():
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"ray start failed: {(tmp / 'head.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield f"127.0.0.1:{ports[0]}"
    finally:
        # SIGTERM to `ray start` alone: it drains the node and stops its processes in seconds
        # (a SIGTERM to the whole group kills them first and the drain then waits out its 30 s)
        proc.terminate()
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # only our own process group: whatever is left
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
