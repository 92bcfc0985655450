"""A 2x2 Hydra multirun through a local Ray head on loopback gives the joblib launcher's table."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).parent / "ray"
SWEEP = ["policy=round_robin,eft", "workload=default,shifted", "workload.n_test=150", "workload.n_train=10",
         "tracking.enabled=false"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sweep(launcher: str, out: Path, env: dict[str, str]) -> pd.DataFrame:
    cmd = [sys.executable, "-m", "stages.simulate", "-m", *SWEEP, f"hydra/launcher={launcher}",
           f"hydra.sweep.dir={out.resolve()}", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return pd.read_csv(out / "comparison.csv")


@pytest.fixture
def ray_head():
    """A Ray head started for this test only (its own process group, temp dir and port), stopped after."""
    if not RAY.exists():
        pytest.skip("ray is not installed in this environment")
    tmp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    port = _free_port()
    log = open(tmp / "head.log", "w")
    proc = subprocess.Popen([str(RAY), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
                             f"--temp-dir={tmp}", "--num-cpus=2", "--include-dashboard=false",
                             "--disable-usage-stats"], cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.time() + 180
        while "Ray runtime started" not in (tmp / "head.log").read_text():
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"ray start failed: {(tmp / 'head.log').read_text()[-2000:]}")
            time.sleep(1)
        yield f"127.0.0.1:{port}"
    finally:
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):  # only our own process group
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def test_ray_sweep_equals_joblib_sweep(tmp_path, ray_head):
    on_ray = _sweep("ray_local", tmp_path / "ray", {**_env(), "RAY_ADDRESS": ray_head})
    local = _sweep("joblib", tmp_path / "joblib", _env())
    assert len(on_ray) == 4 and on_ray["makespan"].nunique() == 4
    pd.testing.assert_frame_equal(on_ray, local)
    assert len(list((tmp_path / "ray").glob("*/traces/*.parquet"))) == 4
