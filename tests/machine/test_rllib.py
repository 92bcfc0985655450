"""RLlib's PPO on the machine late env through a local Ray head with two env runners: the
documented ``python -m hybridsched.rl.rllib_train --address auto`` command, shrunk."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.ray_head import ray_env
from tests.ray_head import ray_head as start_ray_head

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# the command docs/train-your-own-agent.md shows, its output folder aside
COMMAND = ["-m", "hybridsched.rl.rllib_train", "--address", "auto", "--env-runners", "2", "--iterations", "2",
           "--train-batch", "400", "--n-tasks", "30"]


@pytest.fixture
def ray_head():
    """A Ray head for this test only (tests/ray_head.py)."""
    pytest.importorskip("ray.rllib", reason="ray[rllib] is not installed in this environment")
    with start_ray_head() as address:
        yield address


def test_ppo_trains_on_a_ray_head_with_two_env_runners(tmp_path, ray_head):
    out = tmp_path / "rllib_late"
    r = subprocess.run([sys.executable, *COMMAND, "--out", str(out)], cwd=ROOT,
                       env={**ray_env(), "RAY_ADDRESS": ray_head}, capture_output=True, text=True, timeout=300)
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
