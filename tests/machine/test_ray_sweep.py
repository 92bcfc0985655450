"""A 2x2 Hydra multirun through a local Ray head on loopback gives the joblib launcher's table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.ray_head import ray_env
from tests.ray_head import ray_head as start_ray_head

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ["policy=round_robin,eft", "workload=default,shifted", "workload.n_test=150", "workload.n_train=10",
         "tracking.enabled=false"]


def _sweep(launcher: str, out: Path, env: dict[str, str]) -> pd.DataFrame:
    cmd = [sys.executable, "-m", "stages.simulate", "-m", *SWEEP, f"hydra/launcher={launcher}",
           f"hydra.sweep.dir={out.resolve()}", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return pd.read_csv(out / "comparison.csv")


@pytest.fixture
def ray_head():
    """A Ray head for this test only (tests/ray_head.py)."""
    with start_ray_head() as address:
        yield address


def test_ray_sweep_equals_joblib_sweep(tmp_path, ray_head):
    on_ray = _sweep("ray_local", tmp_path / "ray", {**ray_env(), "RAY_ADDRESS": ray_head})
    local = _sweep("joblib", tmp_path / "joblib", ray_env())
    assert len(on_ray) == 4 and on_ray["makespan"].nunique() == 4
    pd.testing.assert_frame_equal(on_ray, local)
    assert len(list((tmp_path / "ray").glob("*/traces/*.parquet"))) == 4
