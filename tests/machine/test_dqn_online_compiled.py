"""The compiled online learner (``rl/qnet_train.py``): its TD steps are torch's (float64
autograd, clip_grad_norm_, Adam) to rounding, it learns on a fixed workload, and a run is
identical on rerun."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from hybridsched.devices import Cluster  # noqa: E402
from hybridsched.kinds.machine.dqn import DQNSettings, QNetwork, save_network  # noqa: E402
from hybridsched.kinds.machine.dqn_state import StateSpec  # noqa: E402
from hybridsched.kinds.machine.policies.dqn import DQNPolicy  # noqa: E402
from hybridsched.kinds.machine.sim import simulate, task_matrix  # noqa: E402
from hybridsched.rl.qnet import net_from_weights  # noqa: E402
from hybridsched.rl.qnet_train import CompiledLearner, train_step  # noqa: E402
from tests.conftest import small_workload  # noqa: E402


def _flat(params) -> np.ndarray:
    return np.concatenate([p.detach().numpy().T.ravel() for p in params])  # .T: our transposed layout


@pytest.mark.parametrize("seed", [0, 1])
def test_compiled_td_steps_equal_torch_autograd_and_adam(seed):
    torch.manual_seed(seed)
    S, H, A, B, n = 10, 16, 5, 32, 100
    q, tgt = QNetwork(S, A, H).double(), QNetwork(S, A, H).double()
    st = replace(DQNSettings(), batch_size=B, buffer_size=200, learning_rate=1e-2, max_grad_norm=0.5, hidden=H)
    L = CompiledLearner(net_from_weights([t.detach().numpy() for t in q.state_dict().values()]), st,
                        np.random.default_rng(0))
    L.tflat[:] = _flat(tgt.parameters())
    rng = np.random.default_rng(seed + 3)
    s, s2 = rng.normal(size=(n, S)), rng.normal(size=(n, S))
    s[:, 0] = 0.0  # zero inputs are skipped in the forward pass: their gradient must still be 0 * ...
    a, r, d = rng.integers(0, A, n), rng.normal(size=n) * 3, (rng.random(n) < 0.2).astype(float)
    L.states[:n], L.next_states[:n], L.actions[:n], L.rewards[:n], L.dones[:n] = s, s2, a, r, d
    L._size = n
    opt = torch.optim.Adam(q.parameters(), lr=1e-2)
    for t in range(1, 6):
        idx = rng.integers(0, n, B)
        with torch.no_grad():
            target = torch.from_numpy(r[idx]) + 0.9 * tgt(torch.from_numpy(s2[idx])).max(1).values * (
                1 - torch.from_numpy(d[idx]))
        loss = F.smooth_l1_loss(q(torch.from_numpy(s[idx])).gather(1, torch.from_numpy(a[idx])[:, None]).squeeze(1),
                                target)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(q.parameters(), 0.5)
        opt.step()
        ours = train_step(idx, L.net, L.target, L.grad, L.flat, L.gflat, L.mflat, L.vflat, L.states, L.actions,
                          L.rewards, L.next_states, L.dones, 0.9, 1e-2, 0.5, t, *L._work)
        assert ours == pytest.approx(float(loss.detach()), rel=1e-12)
        np.testing.assert_allclose(L.flat, _flat(q.parameters()), rtol=0, atol=1e-12)


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return Cluster()


def _model(tmp_path, cluster, hidden=32):
    spec = StateSpec.fit(task_matrix(small_workload(300, seed=2, rate=6.0), cluster), cluster)
    torch.manual_seed(0)
    save_network(tmp_path, QNetwork(spec.n_state, spec.n_actions, hidden), spec, replace(DQNSettings(), hidden=hidden))
    return tmp_path


def test_online_policy_learns_and_is_identical_on_rerun(cluster, tmp_path):
    """On a fixed workload the TD loss falls over the run (first vs last 50 steps) and a second
    run (from the saved model again) gives the same schedule and the same losses."""
    model = _model(tmp_path, cluster)
    w = small_workload(3000, seed=4, rate=1.0)
    policy = DQNPolicy(model, epsilon=0.1, online=True, learning_rate=3e-3)
    real = cluster.sample_noise(len(w), np.random.default_rng(9))
    first = simulate(w, cluster, policy, real).to_frame()
    losses = np.array(policy._learner.losses)
    assert policy._learner.grad_steps == len(losses) > 300
    assert np.all(np.isfinite(losses)) and losses[-50:].mean() < 0.5 * losses[:50].mean()
    again = simulate(w, cluster, policy, real).to_frame()
    pd.testing.assert_frame_equal(first, again)
    assert np.array_equal(losses, policy._learner.losses)
