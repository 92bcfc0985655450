"""The per-candidate DQN for late dispatch (``dqn_late``): plain late EFT before training (bit
for bit), the numba forward pass equal to the trainer's numpy and torch ones, the invariants
and the LP bound with random weights, compiled = reference, a seeded reproducible training
run, Decima's reward summing to the total latency, and one clear line on a bad model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hybridsched.devices import Cluster
from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.bounds import lower_bound
from hybridsched.kinds.machine.bounds_lp import LPSettings
from hybridsched.kinds.machine.cem_train import MachineCEMSettings
from hybridsched.kinds.machine.late_dqn_train import LateDQNSettings, _net, _weights_of, decision_rewards, q_numpy, train
from hybridsched.kinds.machine.metrics import check_trace
from hybridsched.kinds.machine.policies.late import _B_CPU, _B_GPU, EFTLate, split_charged
from hybridsched.kinds.machine.policies.late_dqn import (
    N_FEAT,
    DQNLate,
    forward_params,
    grid_start,
    head_params,
    n_weights,
    q_values,
    split_options,
)
from tests.conftest import small_workload
from tests.machine.sim_helpers import parents_of, run


def _model(hidden: int, seed: int | None) -> dict:
    w = np.zeros(n_weights(hidden)) if seed is None else np.random.default_rng(seed).normal(0, 0.7, n_weights(hidden))
    return {"hidden": hidden, "weights": w.tolist()}


@pytest.mark.parametrize("spec", [dict(rate=8.0, dag_job_size=6), dict(rate=4.0, intensity_range=(0.0, 0.35))])
def test_untrained_network_is_plain_late_eft_exactly(spec):
    cluster = Cluster(n_gpus=4)
    tasks = small_workload(400, seed=5, **spec)
    ref = run(tasks, cluster, EFTLate())
    got = run(tasks, cluster, DQNLate(model=_model(8, None)))
    np.testing.assert_array_equal(got["fraction"].to_numpy(), ref["fraction"].to_numpy())
    np.testing.assert_array_equal(got["end"].to_numpy(), ref["end"].to_numpy())


def _row_by_row(feat: np.ndarray, w: np.ndarray, hidden: int) -> np.ndarray:
    b1 = hidden * N_FEAT
    w2 = b1 + hidden
    b2 = w2 + hidden * hidden
    w3 = b2 + hidden
    out = []
    for x in feat:
        h1 = []
        for r in range(hidden):
            acc = w[b1 + r]
            for q in range(N_FEAT):
                acc += w[r * N_FEAT + q] * x[q]
            h1.append(acc if acc > 0.0 else 0.0)
        v = w[w3 + hidden]
        for r in range(hidden):
            acc = w[b2 + r]
            for q in range(hidden):
                acc += w[w2 + r * hidden + q] * h1[q]
            if acc > 0.0:
                v += w[w3 + r] * acc
        out.append(v - x[N_FEAT])
    return np.asarray(out)


def test_split_options_is_split_charged_per_option():
    # the candidates' one-pass split search gives each option exactly what split_charged gives
    from hybridsched.kinds.machine.engine import task_matrix
    from hybridsched.kinds.machine.policies.base import fraction_grid

    cluster = Cluster(n_gpus=2)
    tasks = small_workload(200, seed=7, memory_range=(50.0, 30000.0))
    X = task_matrix(tasks, cluster)
    rng = np.random.default_rng(3)
    out = np.empty((3, 4))
    differ = 0
    for step in (0.05, 0.25):
        params = head_params(cluster, 4, np.zeros(n_weights(4)), fraction_grid(step),
                             {"beta_cpu": 11.0, "beta_gpu": 7.14, "backlog_s": 1.6},
                             {"beta_cpu": 1.0, "beta_gpu": 2.0, "backlog_s": 0.0})
        grid0 = grid_start(4)
        for i in range(len(tasks)):
            t, cpu_free, gpu_free = rng.uniform(0, 5), rng.uniform(0, 8), rng.uniform(0, 8)
            s_b, s_c = rng.uniform(0, 1), rng.uniform(0, 1)
            for n_opt in (2, 3):
                split_options(i, t, cpu_free, gpu_free, X, params, grid0, s_b, s_c, n_opt, out)
                b = params[_B_CPU], params[_B_GPU]
                want = [split_charged(i, t, cpu_free, gpu_free, X, params, grid0, s_b * 0, *b),
                        split_charged(i, t, cpu_free, gpu_free, X, params, grid0, s_b, *b),
                        split_charged(i, t, cpu_free, gpu_free, X, params, grid0, s_c, 1.0, 2.0)]
                for o in range(n_opt):
                    assert tuple(out[o]) == want[o]
                differ += len({w[0] for w in want}) > 1
    assert differ > 50  # the three charges do pick different splits


def test_forward_passes_agree():
    import torch

    torch.manual_seed(0)
    net = _net(6)
    with torch.no_grad():
        net[4].weight.normal_()
        net[4].bias.normal_()
    w = _weights_of(net)
    feat = np.random.default_rng(1).uniform(0, 1, (9, N_FEAT + 1))
    params = np.concatenate([[0.0, 0.0], forward_params(w, 6)])
    numba_q = q_values(feat, 9, params, 2, 6)
    np.testing.assert_allclose(numba_q, q_numpy(feat, w, 6), rtol=1e-12, atol=1e-12)
    # bit for bit the plain forward pass, one unit's sum at a time in input order (what the
    # committed models' figures were made with before the kernel read transposed weights)
    assert numba_q.tolist() == _row_by_row(feat, w, 6).tolist()
    assert q_values.py_func(feat, 9, params, 2, 6).tolist() == numba_q.tolist()
    torch_q = net(torch.from_numpy(feat[:, :N_FEAT])).squeeze(-1).detach().numpy() - feat[:, N_FEAT]
    np.testing.assert_allclose(numba_q, torch_q, rtol=1e-10, atol=1e-10)


def test_random_weights_keep_invariants_and_bounds_and_match_the_reference():
    cluster = Cluster(n_gpus=3, noise_sigma=0.3)
    tasks = small_workload(120, seed=4, rate=9.0, dag_job_size=5, memory_range=(50.0, 20000.0))
    real = cluster.sample_noise(len(tasks), np.random.default_rng(4))
    lb = lower_bound(tasks, cluster, real, LPSettings())
    for seed in range(3):
        a = run(tasks, cluster, DQNLate(model=_model(5, seed)), seed=4)
        assert check_trace(a, cluster, parents_of(tasks)) == []
        assert lb.mean_latency_lp <= (a["end"] - a["arrival"]).mean() * (1 + 1e-9)
        assert lb.mean_latency <= (a["end"] - a["arrival"]).mean() * (1 + 1e-9)
        b = run(tasks, cluster, DQNLate(model=_model(5, seed)), seed=4, compiled=False)
        np.testing.assert_array_equal(a["end"].to_numpy(), b["end"].to_numpy())


def test_decima_reward_sums_to_minus_total_latency():
    arrival = np.array([0.0, 0.5, 1.0, 4.0])
    end = np.array([2.0, 1.5, 3.0, 5.0])
    r = decision_rewards(np.array([0.0, 0.5, 1.0, 4.0]), arrival, end, m=2.0)
    assert r.sum() == pytest.approx(-(end - arrival).sum() / 2.0)
    assert r[0] == pytest.approx(-0.5 / 2.0)  # one task in the system for 0.5 s


def test_training_is_seeded_and_writes_the_model(tmp_path):
    cluster = Cluster(n_gpus=2)
    mix = MachineCEMSettings(tasks=150)
    s = LateDQNSettings(iterations=1, episodes=1, tasks=120, steps=20, batch=16, hidden=4, selection_draws=1,
                        validation_draws=1)
    a = train(s, mix, cluster, tmp_path / "a", log=lambda *_: None)
    b = train(s, mix, cluster, tmp_path / "b", log=lambda *_: None)
    assert (tmp_path / "a" / "model.json").read_bytes() == (tmp_path / "b" / "model.json").read_bytes()
    assert a["validation_per_draw"] == b["validation_per_draw"]
    model = json.loads((tmp_path / "a" / "model.json").read_text())
    assert len(model["weights"]) == n_weights(4)
    assert a["history"][1]["transitions"] > 0


def test_missing_or_wrong_model_is_one_clear_line(tmp_path):
    tasks = small_workload(20, seed=1)
    with pytest.raises(HybridschedError, match="no trained model at"):
        run(tasks, Cluster(n_gpus=1), DQNLate(model_dir=str(tmp_path)))
    with pytest.raises(HybridschedError, match="weights expected"):
        run(tasks, Cluster(n_gpus=1), DQNLate(model={"hidden": 4, "weights": [0.0] * 3}))
