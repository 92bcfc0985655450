"""``pg_late``, dqn_late's per-candidate network trained by policy gradient: plain late EFT
before training (bit for bit), the discounted-load return against a brute-force integral and
Decima's reward, a seeded reproducible training run (twice: the same bytes), the entry point
in benchmarks.late_eval, and one clear line on a missing model."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from hybridsched.devices import Cluster
from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.cem_train import MachineCEMSettings
from hybridsched.kinds.machine.late_dqn_train import decision_rewards
from hybridsched.kinds.machine.late_pg_train import LatePGSettings, discounted_load, train
from hybridsched.kinds.machine.policies.late import EFTLate
from hybridsched.kinds.machine.policies.late_dqn import PGLate, n_weights
from tests.conftest import small_workload
from tests.machine.sim_helpers import run


def test_untrained_network_is_plain_late_eft_exactly():
    cluster = Cluster(n_gpus=4)
    tasks = small_workload(300, seed=6, rate=8.0, dag_job_size=6)
    ref = run(tasks, cluster, EFTLate())
    got = run(tasks, cluster, PGLate(model={"hidden": 5, "weights": [0.0] * n_weights(5)}))
    np.testing.assert_array_equal(got["fraction"].to_numpy(), ref["fraction"].to_numpy())
    np.testing.assert_array_equal(got["end"].to_numpy(), ref["end"].to_numpy())


def _brute(arrival, end, t, T):
    s = np.linspace(t, end.max() + 1.0, 400_001)
    n = ((arrival[None, :] <= s[:, None]) & (end[None, :] > s[:, None])).sum(axis=1)
    w = np.exp(-(s - t) / T) if np.isfinite(T) else np.ones_like(s)
    return float(np.trapezoid(n * w, s))


@pytest.mark.parametrize("T", [0.7, 3.0, np.inf])
def test_discounted_load_is_the_integral_of_tasks_in_the_system(T):
    rng = np.random.default_rng(2)
    arrival = np.sort(rng.uniform(0, 5, 7))
    end = arrival + rng.uniform(0.1, 3, 7)
    at = np.array([-1.0, 0.0, arrival[3], 2.5, end.max() - 0.01, end.max() + 1.0])
    got = discounted_load(arrival, end, at, T)
    want = [_brute(arrival, end, max(t, -1.0), T) if t < end.max() else 0.0 for t in at]
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)
    if not np.isfinite(T):  # undiscounted: the remaining area, as Decima's rewards sum to
        times = np.array([0.0, arrival[3], 2.5])
        r = decision_rewards(times, arrival, end, m=1.0)
        np.testing.assert_allclose(-np.cumsum(r[::-1])[::-1], discounted_load(arrival, end, times, T), atol=1e-9)


def test_training_is_seeded_and_writes_the_selected_model(tmp_path):
    cluster = Cluster(n_gpus=2)
    mix = MachineCEMSettings(tasks=150)
    s = LatePGSettings(iterations=2, episodes=1, rollouts=3, tasks=150, steps=2, hidden=4, lr=0.05,
                       selection_draws=1, validation_draws=1)
    a = train(s, mix, cluster, tmp_path / "a", log=lambda *_: None)
    b = train(s, mix, cluster, tmp_path / "b", log=lambda *_: None)
    assert (tmp_path / "a" / "model.json").read_bytes() == (tmp_path / "b" / "model.json").read_bytes()
    assert a["history"] == b["history"] and a["validation_per_draw"] == b["validation_per_draw"]
    assert a["history"][1]["decisions"] >= 3 * 150
    # the selected model is the best on the selection draws, iteration 0 (the prior) included
    assert a["selection"] == min(h["selection"] for h in a["history"])


def test_late_eval_train_pg_entry_point_and_bad_override(tmp_path, monkeypatch):
    from benchmarks import late_eval

    def main(*argv):
        monkeypatch.setattr(sys, "argv", ["late_eval", *argv])
        late_eval.main()

    main("--train-pg", str(tmp_path / "m"), "--pg-set",
         "iterations=1,episodes=1,rollouts=2,tasks=80,hidden=3,selection_draws=1,validation_draws=0",
         "--out", str(tmp_path / "o"))
    assert json.loads((tmp_path / "m" / "model.json").read_text())["hidden"] == 3
    assert (tmp_path / "o" / "train_pg_late.json").is_file()
    with pytest.raises(SystemExit, match="unknown LatePGSettings key"):
        main("--train-pg", str(tmp_path / "m2"), "--pg-set", "iters=1", "--out", str(tmp_path / "o"))


def test_missing_model_is_one_clear_line(tmp_path):
    with pytest.raises(HybridschedError, match="pg_late policy: no trained model at .*--train-pg"):
        run(small_workload(20, seed=1), Cluster(n_gpus=1), PGLate(model_dir=str(tmp_path)))
