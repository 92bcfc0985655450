"""The DQN: replay buffer, target network, dueling head, training in the simulator,
save/load, the compiled inference path and the outcome reconstruction it learns from."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from hybridsched.devices import Cluster  # noqa: E402
from hybridsched.errors import HybridschedError, ModelFileError  # noqa: E402
from hybridsched.kinds.machine.dqn import DQNSettings, load_model, save_model, save_network  # noqa: E402
from hybridsched.kinds.machine.dqn_train import train  # noqa: E402
from hybridsched.rl.dqn import DQNLearner, QNetwork, linear_schedule  # noqa: E402
from hybridsched.kinds.machine.dqn_state import StateSpec, features_into, q_values_batch  # noqa: E402
from hybridsched.kinds.machine.outcomes import OutcomeClock  # noqa: E402
from hybridsched.rl.replay import ReplayBuffer  # noqa: E402
from hybridsched.kinds.machine.policies.base import Policy  # noqa: E402
from hybridsched.kinds.machine.policies.classic import RoundRobin  # noqa: E402
from hybridsched.kinds.machine.policies.dqn import DQNPolicy  # noqa: E402
from hybridsched.kinds.machine.sim import task_matrix  # noqa: E402
from tests.conftest import small_workload  # noqa: E402
from tests.machine.sim_helpers import run  # noqa: E402

SMALL = DQNSettings(episodes=12, buffer_size=5_000, batch_size=64, learning_starts=200, train_frequency=2,
                    target_network_frequency=100, exploration_fraction=0.4, hidden=32)


def _transitions(k: int, n_state: int = 3, start: int = 0):
    idx = np.arange(start, start + k)
    s = np.repeat(idx[:, None], n_state, axis=1).astype(np.float32)
    return s, idx % 5, idx.astype(np.float32), s + 0.5, np.zeros(k)


# --- replay buffer ---------------------------------------------------------------------------
def test_replay_overwrites_the_oldest_when_full():
    buf = ReplayBuffer(capacity=5, n_state=3)
    buf.add(*_transitions(4))
    assert len(buf) == 4
    buf.add(*_transitions(3, start=4))  # ids 4, 5, 6: 5 and 6 overwrite 0 and 1
    assert len(buf) == 5
    assert sorted(buf.rewards.tolist()) == [2, 3, 4, 5, 6]
    buf.add(*_transitions(12, start=100))  # more than capacity at once: the newest 5 survive
    assert sorted(buf.rewards.tolist()) == [107, 108, 109, 110, 111]
    np.testing.assert_array_equal(buf.states[:, 0], buf.rewards)  # rows stay aligned


def test_replay_sample_shapes_and_seeded_determinism():
    buf = ReplayBuffer(capacity=50, n_state=3)
    buf.add(*_transitions(20))
    a = buf.sample(8, np.random.default_rng(1))
    b = buf.sample(8, np.random.default_rng(1))
    c = buf.sample(8, np.random.default_rng(2))
    assert a.states.shape == (8, 3) and a.next_states.shape == (8, 3)
    assert a.actions.shape == a.rewards.shape == a.dones.shape == (8,)
    assert a.actions.dtype == np.int64 and a.states.dtype == np.float32
    np.testing.assert_array_equal(a.rewards, b.rewards)
    assert not np.array_equal(a.rewards, c.rewards)
    assert set(a.rewards.tolist()) <= set(range(20))  # only stored transitions
    with pytest.raises(ValueError):
        ReplayBuffer(5, 3).sample(1, np.random.default_rng(0))


# --- network and learner ------------------------------------------------------------------------
def test_dueling_head_is_value_plus_advantage_minus_mean_advantage():
    torch.manual_seed(0)
    q = QNetwork(n_state=6, n_actions=5, hidden=8)
    x = torch.randn(4, 6)
    h = q.trunk(x)
    v, adv = q.value(h), q.advantage(h)
    torch.testing.assert_close(q(x), v + adv - adv.mean(dim=1, keepdim=True))
    # the advantage enters only through its deviation from the mean
    torch.testing.assert_close(q(x).mean(dim=1, keepdim=True), v)


def _learner(**kw) -> DQNLearner:
    s = replace(DQNSettings(hidden=8, batch_size=4, buffer_size=100), **kw)
    return DQNLearner(3, 5, s, np.random.default_rng(0))


def _perturb(net) -> None:
    with torch.no_grad():
        for p in net.parameters():
            p.add_(1.0)


def _same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def test_target_network_is_a_hard_copy_every_n_transitions():
    ln = _learner(target_network_frequency=3, tau=1.0, learning_starts=10_000)  # no gradient steps
    _perturb(ln.q)
    ln.add(*_transitions(2))
    assert not _same(ln.q, ln.target) and ln.target_updates == 0
    ln.add(*_transitions(1, start=2))  # third transition
    assert _same(ln.q, ln.target) and ln.target_updates == 1
    _perturb(ln.q)
    ln.add(*_transitions(5, start=3))  # transitions 4..8: one update, at 6
    assert ln.target_updates == 2 and _same(ln.q, ln.target)


def test_soft_target_update_moves_tau_of_the_way():
    ln = _learner(target_network_frequency=1, tau=0.25, learning_starts=10_000)
    before = [p.detach().clone() for p in ln.target.parameters()]
    _perturb(ln.q)
    online = [p.detach().clone() for p in ln.q.parameters()]
    ln.add(*_transitions(1))
    for t, b, o in zip(ln.target.parameters(), before, online, strict=True):
        torch.testing.assert_close(t.detach(), 0.25 * o + 0.75 * b)


def test_gradient_steps_start_after_learning_starts_every_train_frequency():
    ln = _learner(learning_starts=8, train_frequency=4)
    ln.add(*_transitions(8))
    assert ln.grad_steps == 0
    ln.add(*_transitions(8, start=8))  # transitions 9..16: steps at 12 and 16
    assert ln.grad_steps == 2 and len(ln.losses) == 2 and all(np.isfinite(ln.losses))


def test_linear_schedule():
    assert linear_schedule(1.0, 0.1, 100, 0) == 1.0
    assert linear_schedule(1.0, 0.1, 100, 50) == pytest.approx(0.55)
    assert linear_schedule(1.0, 0.1, 100, 1000) == pytest.approx(0.1)


def test_settings_reject_unknown_keys_and_bad_values():
    with pytest.raises(HybridschedError, match="unknown key"):
        DQNSettings.from_dict({"learning_rat": 0.1})
    with pytest.raises(HybridschedError, match="dqn.gamma"):
        DQNSettings.from_dict({"gamma": 1.5})
    with pytest.raises(HybridschedError, match="epsilon must be in"):
        DQNPolicy(epsilon=2.0)
    assert DQNSettings.from_dict({"fractions": [0.5, 1]}).fractions == (0.5, 1.0)
    assert DQNSettings.from_dict({"model_dir": "models/dqn", "gamma": 0.5}).gamma == 0.5  # the group's path key


# --- compiled inference and save/load --------------------------------------------------------------
def _spec_and_states(cluster, n: int = 64):
    tasks = small_workload(n)
    X = task_matrix(tasks, cluster)
    spec = StateSpec.fit(X, cluster)
    rng = np.random.default_rng(0)
    params = spec.header(hidden=16)
    S = np.empty((n, spec.n_state))
    for i in range(n):
        est = X[i, 6] + rng.exponential(1.0, cluster.n_devices)
        features_into(S[i], i, X[i, 6], est, X, params)
    return spec, S


def test_compiled_forward_pass_matches_torch(cluster):
    spec, S = _spec_and_states(cluster)
    torch.manual_seed(3)
    q = QNetwork(spec.n_state, spec.n_actions, 16)
    params = spec.pack([t.detach().numpy() for t in q.state_dict().values()], hidden=16)
    expected = q(torch.from_numpy(S.astype(np.float32))).detach().numpy()
    np.testing.assert_allclose(q_values_batch(S, params), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(q_values_batch(S, params).argmax(1), expected.argmax(1))


def test_state_has_documented_size_and_finite_values(cluster):
    spec, S = _spec_and_states(cluster)
    assert spec.n_actions == 1 + 4 * cluster.n_gpus
    assert S.shape[1] == 6 + cluster.n_devices + 2 * spec.n_actions
    assert np.isfinite(S).all()


def test_save_load_round_trips_identical_q_values(cluster, tmp_path):
    spec, S = _spec_and_states(cluster)
    settings = replace(DQNSettings(), hidden=16)
    torch.manual_seed(5)
    q = QNetwork(spec.n_state, spec.n_actions, 16)
    save_network(tmp_path, q, spec, settings)
    m = load_model(tmp_path)
    x = torch.from_numpy(S.astype(np.float32))
    assert torch.equal(m.q(x), q(x))
    assert m.spec == spec and m.settings == settings
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["n_actions"] == len(meta["actions"]) == spec.n_actions


@pytest.mark.parametrize("damage", ["garbage", "truncate", "missing", "wrong_shape", "bad_meta"])
def test_a_damaged_model_gives_model_file_error_naming_the_file(cluster, tmp_path, damage):
    spec, _ = _spec_and_states(cluster, 8)
    save_network(tmp_path, QNetwork(spec.n_state, spec.n_actions, 16), spec, replace(DQNSettings(), hidden=16))
    pt, meta = tmp_path / "model.pt", tmp_path / "meta.json"
    if damage == "garbage":
        pt.write_bytes(b"not a torch file")
    elif damage == "truncate":
        pt.write_bytes(pt.read_bytes()[:100])
    elif damage == "missing":
        pt.unlink()
    elif damage == "wrong_shape":
        torch.save(QNetwork(spec.n_state, spec.n_actions, 32).state_dict(), pt)
    else:
        meta.write_text("{not json")
    with pytest.raises(ModelFileError, match=re.escape(str(meta if damage == "bad_meta" else pt))):
        load_model(tmp_path)


def test_policy_refuses_a_model_trained_for_another_cluster(tmp_path):
    trained_on = Cluster(n_gpus=2)
    spec, _ = _spec_and_states(trained_on, 8)
    save_network(tmp_path, QNetwork(spec.n_state, spec.n_actions, 16), spec, replace(DQNSettings(), hidden=16))
    with pytest.raises(ModelFileError, match="meta.json: model was trained for 2 GPUs, the cluster has 3"):
        run(small_workload(20), Cluster(n_gpus=3), DQNPolicy(tmp_path))
    with pytest.raises(ModelFileError, match="not found"):
        run(small_workload(20), trained_on, DQNPolicy(tmp_path / "nowhere"))


# --- the outcome clock -------------------------------------------------------------------------------
def test_outcome_clock_rebuilds_the_actual_end_of_every_task(cluster):
    """From decisions + observed part durations alone, the clock gets the engine's end times."""
    w = small_workload(300, rate=1.0)  # light load, so few tasks end after the last decision
    X = task_matrix(w, cluster)
    ends = np.full(len(w), np.nan)
    energies = np.full(len(w), np.nan)

    class Recorder(Policy):
        name = "recorder"
        observe_every = 3

        def prepare(self, tasks, cluster_, X_):
            self.clock = OutcomeClock(len(tasks), cluster.n_devices, cluster.cpu_busy_w, cluster.gpu_busy_w)

        def decide(self, i, t, est_free):
            g, f = i % cluster.n_gpus, [0.0, 0.3, 1.0][i % 3]
            self.clock.decided(np.array([i]), np.array([t]), np.array([g]), np.array([min(f, X[i, 5])]))
            return g, f

        def observe(self, rows, fraction, cpu_s, gpu_s):
            r, e, j = self.clock.finished(rows, cpu_s, gpu_s)
            ends[r], energies[r] = e, j

    tr = run(w, cluster, Recorder())
    seen = ~np.isnan(ends)
    assert seen.sum() > 250  # all but the tail finished after the last decision
    np.testing.assert_allclose(ends[seen], tr["end"].to_numpy()[seen], rtol=1e-12)
    np.testing.assert_allclose(energies[seen], tr["energy_j"].to_numpy()[seen], rtol=1e-9)  # from end - start


# --- training in the simulator ------------------------------------------------------------------------
def _greedy_mean_latency(tasks, cluster, model_dir) -> float:
    tr = run(tasks, cluster, DQNPolicy(model_dir), seed=7)
    return float((tr["end"] - tr["arrival"]).mean())


@pytest.mark.slow
def test_short_training_beats_the_untrained_network_and_round_robin(cluster, tmp_path):
    train_w, test_w = small_workload(300, seed=1, rate=3.0), small_workload(300, seed=2, rate=3.0)
    result = train(train_w, cluster, SMALL)
    assert len(result.history) == SMALL.episodes and result.learner.grad_steps > 1000
    assert result.history[-1]["mean_reward"] > 5 * result.history[0]["mean_reward"]  # rewards are < 0
    torch.manual_seed(SMALL.seed)  # the network training started from
    untrained = QNetwork(result.spec.n_state, result.spec.n_actions, SMALL.hidden)
    save_network(tmp_path / "untrained", untrained, result.spec, SMALL)
    save_model(tmp_path / "trained", result)
    before = _greedy_mean_latency(test_w, cluster, tmp_path / "untrained")
    after = _greedy_mean_latency(test_w, cluster, tmp_path / "trained")
    rr = run(test_w, cluster, RoundRobin(), seed=7)
    assert after < 0.5 * before, (before, after)
    assert after < 0.5 * float((rr["end"] - rr["arrival"]).mean())


def test_training_is_seeded(cluster):
    w = small_workload(150, seed=1, rate=3.0)
    settings = replace(SMALL, episodes=2, learning_starts=50)
    a, b = train(w, cluster, settings), train(w, cluster, settings)
    c = train(w, cluster, replace(settings, seed=1))
    strip = [{k: v for k, v in h.items() if k != "wall_s"} for h in a.history]
    assert strip == [{k: v for k, v in h.items() if k != "wall_s"} for h in b.history]
    assert strip != [{k: v for k, v in h.items() if k != "wall_s"} for h in c.history]
    assert all(torch.equal(x, y) for x, y in zip(a.learner.q.parameters(), b.learner.q.parameters(), strict=True))


def test_dqn_policy_compiled_equals_python_reference_offline_and_online(cluster, tmp_path):
    spec, _ = _spec_and_states(cluster, 8)
    torch.manual_seed(0)
    save_network(tmp_path, QNetwork(spec.n_state, spec.n_actions, 16), spec,
               replace(DQNSettings(), hidden=16, batch_size=8, buffer_size=100))
    w = small_workload(120)
    for policy in (DQNPolicy(tmp_path), DQNPolicy(tmp_path, epsilon=0.2, online=True, update_every=4)):
        pd.testing.assert_frame_equal(run(w, cluster, policy, compiled=True), run(w, cluster, policy, compiled=False))


def test_online_policy_learns_during_the_run_and_restarts_from_the_saved_model(cluster, tmp_path):
    spec, _ = _spec_and_states(cluster, 8)
    save_network(tmp_path, QNetwork(spec.n_state, spec.n_actions, 16), spec,
               replace(DQNSettings(), hidden=16, batch_size=8, buffer_size=100, train_frequency=1))
    policy = DQNPolicy(tmp_path, epsilon=0.1, online=True, update_every=4, batch_size=8, train_frequency=1)
    w = small_workload(200, rate=2.0)
    first = run(w, cluster, policy)
    assert policy._learner.grad_steps > 50 and policy.n_rewards > 150
    assert np.all(np.isfinite(policy._learner.losses))
    pd.testing.assert_frame_equal(first, run(w, cluster, policy))  # each run starts from the file
    explored = run(w, cluster, DQNPolicy(tmp_path, epsilon=1.0))
    assert explored["fraction"].nunique() > 3  # random actions use the whole action table
