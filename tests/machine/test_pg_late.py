"""``pg_late``, dqn_late's per-candidate network trained by policy gradient: plain late EFT
before training (bit for bit), the discounted-load return against a brute-force integral and
Decima's reward, a seeded reproducible training run (twice: the same bytes), the entry point
in studies.late_eval, the split options B's and C's work charges as model settings, and
one clear line on a missing or bad model."""

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
from hybridsched.kinds.machine.metrics import check_trace
from hybridsched.kinds.machine.policies.late_dqn import FEATURES, N_FEAT, PGLate, n_weights
from tests.conftest import small_workload
from tests.machine.sim_helpers import parents_of, run

TUNED_B = {"beta_cpu": 11.0, "beta_gpu": 7.14, "backlog_s": 1.6}  # eft_late's YAML weights


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


@pytest.mark.parametrize("order", ["rank", "spt"])  # the committed sixth model's, the fifth's
def test_late_eval_train_pg_entry_point_and_bad_override(tmp_path, monkeypatch, order):
    from studies import late_eval

    def main(*argv):
        monkeypatch.setattr(sys, "argv", ["late_eval", *argv])
        late_eval.main()

    main("--train-pg", str(tmp_path / "m"), "--pg-set",
         "iterations=1,episodes=1,rollouts=2,tasks=80,hidden=3,selection_draws=1,validation_draws=0,"
         f"b_beta_cpu=11.0,b_beta_gpu=7.14,b_backlog_s=1.6,c_option=1,reserved_order={order}", "--out",
         str(tmp_path / "o"))
    model = json.loads((tmp_path / "m" / "model.json").read_text())
    assert model["hidden"] == 3 and model["option_b"] == TUNED_B and model["option_c"]["beta_cpu"] == 1.0
    assert model["reserved_order"] == order and "queue_slack" not in model
    assert (tmp_path / "o" / "train_pg_late.json").is_file()
    with pytest.raises(SystemExit, match="unknown LatePGSettings key"):
        main("--train-pg", str(tmp_path / "m2"), "--pg-set", "iters=1", "--out", str(tmp_path / "o"))


def test_missing_model_is_one_clear_line(tmp_path):
    with pytest.raises(HybridschedError, match="pg_late policy: no trained model at .*`dvc repro train_late` trains it"):
        run(small_workload(20, seed=1), Cluster(n_gpus=1), PGLate(model_dir=str(tmp_path)))


def _always_b(hidden: int = 2) -> list[float]:
    """Packed weights whose score is ``100 x [the candidate is option B] - finish / m``."""
    w1 = np.zeros((hidden, N_FEAT))
    w1[0, FEATURES.index("option_b")] = 1.0
    w2 = np.zeros((hidden, hidden))
    w2[0, 0] = 1.0
    w3 = np.zeros(hidden)
    w3[0] = 100.0
    return [*w1.ravel(), *np.zeros(hidden), *w2.ravel(), *np.zeros(hidden), *w3, 0.0]


def test_option_b_charge_is_a_model_setting():
    cluster = Cluster(n_gpus=2, noise_sigma=0.2)
    # CPU-friendly, memory-heavy tasks, as shifted's test split: the charge decides the split
    tasks = small_workload(250, seed=3, rate=6.0, intensity_range=(0.0, 0.35), memory_range=(2000.0, 16000.0))
    plain = {"hidden": 2, "weights": _always_b()}
    tuned = {**plain, "option_b": TUNED_B}
    # the prior (output layer 0) is plain late EFT whatever option B is: A has the earliest finish
    ref = run(tasks, cluster, EFTLate())
    zero = run(tasks, cluster, PGLate(model={"hidden": 2, "weights": [0.0] * n_weights(2), "option_b": TUNED_B}))
    np.testing.assert_array_equal(zero["end"].to_numpy(), ref["end"].to_numpy())
    a = run(tasks, cluster, PGLate(model=plain))
    b = run(tasks, cluster, PGLate(model=tuned))
    for tr in (a, b):
        assert check_trace(tr, cluster, parents_of(tasks)) == []
    # eft_late's heavy charge keeps more tasks on the CPU alone than the weight-1 charge
    assert (b["fraction"] == 0).mean() > (a["fraction"] == 0).mean()
    py = run(tasks, cluster, PGLate(model=tuned), compiled=False)
    np.testing.assert_array_equal(py["end"].to_numpy(), b["end"].to_numpy())


@pytest.mark.parametrize("bad", [{"beta_cpu": -1.0}, {"beta": 2.0}, {"backlog_s": "x"}])
def test_bad_option_b_is_one_clear_line(bad):
    model = {"hidden": 2, "weights": [0.0] * n_weights(2), "option_b": bad}
    with pytest.raises(HybridschedError, match="pg_late model: option_b must hold non-negative numbers"):
        run(small_workload(20, seed=1), Cluster(n_gpus=1), PGLate(model=model))


def test_training_writes_option_b_only_when_it_is_not_the_default(tmp_path):
    cluster = Cluster(n_gpus=2)
    base = dict(iterations=1, episodes=1, rollouts=2, tasks=80, steps=1, hidden=3, selection_draws=1,
                validation_draws=0)
    train(LatePGSettings(**base), MachineCEMSettings(tasks=80), cluster, tmp_path / "a", log=lambda *_: None)
    train(LatePGSettings(**base, b_beta_cpu=11.0, b_beta_gpu=7.14, b_backlog_s=1.6), MachineCEMSettings(tasks=80),
          cluster, tmp_path / "b", log=lambda *_: None)
    assert "option_b" not in json.loads((tmp_path / "a" / "model.json").read_text())
    assert json.loads((tmp_path / "b" / "model.json").read_text())["option_b"] == TUNED_B


def test_option_c_adds_a_third_candidate_only_where_its_split_differs():
    cluster = Cluster(n_gpus=2, noise_sigma=0.2)
    tasks = small_workload(250, seed=3, rate=6.0, intensity_range=(0.0, 0.35), memory_range=(2000.0, 16000.0))
    tuned = {"hidden": 2, "weights": _always_b(), "option_b": TUNED_B}
    # C with B's own charge never differs from B: the same candidates, the same trace
    same = run(tasks, cluster, PGLate(model={**tuned, "option_c": TUNED_B}))
    np.testing.assert_array_equal(same["end"].to_numpy(), run(tasks, cluster, PGLate(model=tuned))["end"].to_numpy())
    # a random network over A, B and C: the engine's invariants, and compiled = plain Python
    rng = np.random.default_rng(0)
    model = {"hidden": 3, "weights": rng.normal(0.0, 0.5, n_weights(3)).tolist(), "option_b": TUNED_B,
             "option_c": {"beta_cpu": 1.0, "beta_gpu": 1.0, "backlog_s": 0.0}}
    a = run(tasks, cluster, PGLate(model=model))
    assert check_trace(a, cluster, parents_of(tasks)) == []
    b = run(tasks, cluster, PGLate(model=model), compiled=False)
    np.testing.assert_array_equal(a["end"].to_numpy(), b["end"].to_numpy())


def test_bad_option_c_is_one_clear_line():
    model = {"hidden": 2, "weights": [0.0] * n_weights(2), "option_c": {"beta_gpu": -2.0}}
    with pytest.raises(HybridschedError, match="pg_late model: option_c must hold non-negative numbers"):
        run(small_workload(20, seed=1), Cluster(n_gpus=1), PGLate(model=model))


def test_training_writes_queue_slack_only_when_finite(tmp_path):
    base = dict(iterations=1, episodes=1, rollouts=2, tasks=80, steps=1, hidden=3, selection_draws=1, validation_draws=0)
    for slack, d in ((0.5, tmp_path / "a"), (float("inf"), tmp_path / "b")):
        train(LatePGSettings(**base, queue_slack=slack), MachineCEMSettings(tasks=80), Cluster(n_gpus=2), d,
              log=lambda *_: None)
    assert json.loads((tmp_path / "a" / "model.json").read_text())["queue_slack"] == 0.5
    assert json.loads((tmp_path / "a" / "train_pg_late.json").read_text())["settings"]["queue_slack"] == 0.5
    # no hold: the files are as before the setting existed (JSON has no infinity)
    assert "queue_slack" not in json.loads((tmp_path / "b" / "model.json").read_text())
    assert "queue_slack" not in json.loads((tmp_path / "b" / "train_pg_late.json").read_text())["settings"]


def test_a_negative_queue_slack_is_refused_before_training():
    for bad in (-1.0, float("nan")):
        with pytest.raises(HybridschedError, match="pg_late training: queue_slack must be >= 0"):
            LatePGSettings(queue_slack=bad)


def test_training_writes_option_c_when_asked(tmp_path):
    s = LatePGSettings(iterations=1, episodes=1, rollouts=2, tasks=80, steps=1, hidden=3, selection_draws=1,
                       validation_draws=0, b_beta_cpu=11.0, b_beta_gpu=7.14, b_backlog_s=1.6, c_option=1)
    train(s, MachineCEMSettings(tasks=80), Cluster(n_gpus=2), tmp_path, log=lambda *_: None)
    model = json.loads((tmp_path / "model.json").read_text())
    assert model["option_b"] == TUNED_B and model["option_c"] == {"beta_cpu": 1.0, "beta_gpu": 1.0, "backlog_s": 0.0}


def test_reserved_order_is_a_model_setting():
    # the untrained network is plain late EFT under either engine rule for reserved parts
    cluster = Cluster(n_gpus=2)
    tasks = small_workload(300, seed=6, rate=8.0, memory_range=(2000.0, 16000.0))
    zero = {"hidden": 3, "weights": [0.0] * n_weights(3)}
    for order in ("fifo", "spt"):
        ref = run(tasks, cluster, EFTLate(reserved_order=order))
        got = run(tasks, cluster, PGLate(model={**zero, "reserved_order": order}))
        np.testing.assert_array_equal(got["end"].to_numpy(), ref["end"].to_numpy())
    assert not np.array_equal(run(tasks, cluster, EFTLate(reserved_order="spt"))["end"].to_numpy(),
                              run(tasks, cluster, EFTLate())["end"].to_numpy())
    with pytest.raises(HybridschedError, match="pg_late model: reserved_order must be one of"):
        run(tasks, cluster, PGLate(model={**zero, "reserved_order": "lifo"}))


def test_training_writes_reserved_order_only_when_not_fifo(tmp_path):
    base = dict(iterations=1, episodes=1, rollouts=2, tasks=80, steps=1, hidden=3, selection_draws=1, validation_draws=0)
    for order, d in (("spt", tmp_path / "a"), ("fifo", tmp_path / "b")):
        train(LatePGSettings(**base, reserved_order=order), MachineCEMSettings(tasks=80), Cluster(n_gpus=2), d,
              log=lambda *_: None)
    assert json.loads((tmp_path / "a" / "model.json").read_text())["reserved_order"] == "spt"
    assert json.loads((tmp_path / "a" / "train_pg_late.json").read_text())["settings"]["reserved_order"] == "spt"
    assert "reserved_order" not in json.loads((tmp_path / "b" / "model.json").read_text())
    assert "reserved_order" not in json.loads((tmp_path / "b" / "train_pg_late.json").read_text())["settings"]
    with pytest.raises(HybridschedError, match="pg_late training: reserved_order must be one of"):
        LatePGSettings(reserved_order="lifo")
