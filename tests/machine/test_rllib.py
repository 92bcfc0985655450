"""RLlib's PPO on the machine late env through a local Ray head with two env runners: the
documented ``python -m hybridsched.rl.rllib_train --address auto`` command, shrunk."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).parent / "ray"
# the command docs/train-your-own-agent.md shows, its output folder aside
COMMAND = ["-m", "hybridsched.rl.rllib_train", "--address", "auto", "--env-runners", "2", "--iterations", "2",
           "--train-batch", "400", "--n-tasks", "30"]


def _env() -> dict[str, str]:
    # RAY_AUTH_MODE set for head and driver alike: a ~/.ray/auth_token (which any local
    # ray.init() writes) otherwise turns token auth on in the head but not in a driver that
    # RAY_ADDRESS points at, and the driver is refused
    return {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "disabled"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head():
    """A Ray head for this test only (its own process group, temp dir, port and a 100 MB object
    store) on loopback, stopped after (as tests/machine/test_ray_sweep.py starts it)."""
    pytest.importorskip("ray.rllib", reason="ray[rllib] is not installed in this environment")
    tmp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    ports = [_free_port() for _ in range(3)]  # own ports: another head may run beside this one
    log = open(tmp / "head.log", "w")
    proc = subprocess.Popen([str(RAY), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
                             f"--port={ports[0]}", f"--ray-client-server-port={ports[1]}",
                             f"--dashboard-agent-listen-port={ports[2]}", f"--temp-dir={tmp}", "--num-cpus=2",
                             "--object-store-memory=100000000", "--include-dashboard=false",
                             "--disable-usage-stats"],
                            cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
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


def test_ppo_trains_on_a_ray_head_with_two_env_runners(tmp_path, ray_head):
    out = tmp_path / "rllib_late"
    r = subprocess.run([sys.executable, *COMMAND, "--out", str(out)], cwd=ROOT,
                       env={**_env(), "RAY_ADDRESS": ray_head}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((out / "returns.json").read_text())
    assert summary["env_runners"] == 2  # both actors of the head sampled
    rows = summary["iterations"]
    assert [row["iteration"] for row in rows] == [1, 2]
    for row in rows:  # the return is minus the total latency over m: finite and negative
        assert row["episodes"] > 0 and math.isfinite(row["episode_return_mean"]) and row["episode_return_mean"] < 0
    assert rows[-1]["env_steps_lifetime"] >= 2 * 400
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint", "returns.json"]

    # the checkpoint's policy, loaded without Ray, picks a feasible candidate whatever the mask
    from hybridsched.rl.rllib_train import load_agent

    act = load_agent(out / "checkpoint")
    rng = np.random.default_rng(0)
    for _ in range(20):
        obs = rng.random((32, 16))
        mask = np.zeros(32, dtype=bool)
        mask[rng.choice(32, size=int(rng.integers(1, 4)), replace=False)] = True
        assert mask[act(obs, mask)]
