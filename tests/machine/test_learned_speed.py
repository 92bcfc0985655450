"""The fast paths of the learned policies give exactly the reference results:
the compiled forest predictor, hybrid_ml's in-loop ridge learning with lazy re-prediction, and
the DQN's fused, allocation-free forward pass.  Equality is to the bit (the DQN's Q-values: in
value, see ``rl.qnet.affine_skip0``): a schedule must not change because a path got faster."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsched.devices import Cluster
from hybridsched.kinds.machine.forest_predict import flatten_forest
from hybridsched.kinds.machine.online import ResidualModel, ridge_refit, ridge_state_size
from hybridsched.kinds.machine.policies.hybrid_ml import HybridML
from hybridsched.kinds.machine.runtime_model import train_runtime_model
from hybridsched.kinds.machine.sim import simulate, task_matrix
from hybridsched.rl.qnet import dueling_q_into, dueling_q_net, net_from_weights, pack_weights
from tests.conftest import small_workload

SMALL_RF = {"model": "random_forest", "seed": 0, "test_fraction": 0.25, "importance_repeats": 1,
            "random_forest": {"n_estimators": 8, "max_depth": 8, "min_samples_leaf": 2, "n_jobs": 1}}
FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return Cluster()


@pytest.fixture(scope="module")
def model(cluster):
    X = task_matrix(small_workload(400, seed=1, rate=6.0), cluster)
    return train_runtime_model(X, cluster, SMALL_RF)[0]


# --- compiled forest --------------------------------------------------------------------------------
@FAST
@given(seed=st.integers(0, 10_000), n_out=st.sampled_from([1, 2]), depth=st.integers(1, 9),
       scale=st.floats(1e-3, 1e4))
def test_compiled_forest_equals_sklearn_predict_to_the_bit(seed, n_out, depth, scale):
    from sklearn.ensemble import RandomForestRegressor

    rng = np.random.default_rng(seed)
    F = rng.normal(size=(200, 5)) * scale
    y = np.column_stack([np.sin(F[:, 0]) + F[:, 1], F[:, 2] * F[:, 3]])[:, :n_out] + rng.normal(size=(200, n_out))
    est = RandomForestRegressor(n_estimators=7, max_depth=depth, random_state=seed, n_jobs=1)
    est.fit(F, y[:, 0] if n_out == 1 else y)
    flat = flatten_forest(est)
    G = rng.normal(size=(333, 5)) * scale * 1.5  # includes values beyond the training range
    G[:7] = F[:7]  # and values exactly at training points (thresholds lie between them)
    want = est.predict(G).reshape(len(G), n_out)
    assert np.array_equal(_bits(flat.predict(G)), _bits(want))


def test_forest_with_nan_input_goes_through_the_estimator(model):
    F = np.full((3, model._flat.n_features), 1.0)
    F[1, 2] = np.nan
    assert not model._flat.accepts(F) and model._flat.accepts(F[[0, 2]])


# --- hybrid_ml ridge learning -----------------------------------------------------------------------
@FAST
@given(seed=st.integers(0, 10_000), n=st.integers(5, 400), p=st.integers(1, 6), alpha=st.floats(0.01, 100.0),
       min_obs=st.integers(1, 50))
def test_ridge_refit_is_the_ridge_solution(seed, n, p, alpha, min_obs):
    """The compiled refit solves the ridge normal equations on standardised features (a direct
    least-squares solve of the augmented system agrees to 1e-9 relative)."""
    rng = np.random.default_rng(seed)
    F = rng.normal(size=(n, p)) * rng.uniform(0.1, 10, p) + rng.normal(size=p)
    r = F @ rng.normal(size=p) + rng.normal(size=n)
    state = np.zeros(ridge_state_size(p))
    ridge_refit(state, F, r, alpha, min_obs)
    if n < min_obs:
        assert state[0] == 0.0
        return
    mean, scale = F.mean(axis=0), F.std(axis=0)
    scale[scale < 1e-12] = 1.0
    Z = (F - mean) / scale
    coef = np.linalg.lstsq(np.vstack([Z, np.sqrt(alpha) * np.eye(p)]), np.concatenate([r - r.mean(), np.zeros(p)]),
                           rcond=None)[0]
    assert state[0] == 1.0 and state[1] == pytest.approx(r.mean(), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(state[2 + 2 * p:], coef, rtol=1e-9, atol=1e-9 * np.abs(coef).max())
    m = ResidualModel("ridge", alpha=alpha, min_obs=min_obs)
    m.fit(F, r)  # the Python entry point is the same function
    assert np.array_equal(_bits(m.state), _bits(state))


class _EagerHybridML(HybridML):
    """The reference path: every refit re-predicts the undecided rows in numpy, in Python."""

    def prepare(self, tasks, cluster, X) -> None:
        super().prepare(tasks, cluster, X)
        self.learn_kernel = None


@FAST
@given(seed=st.integers(0, 1000), retrain_every=st.integers(1, 60), window=st.integers(5, 400),
       lookahead=st.sampled_from([0, 1, 7, 100, 2000]), min_obs=st.integers(1, 40))
def test_in_loop_ridge_learning_gives_the_reference_schedule(model, cluster, seed, retrain_every, window,
                                                             lookahead, min_obs):
    """In-loop learning with lazy re-prediction = the eager Python refit loop, to the bit."""
    tasks = small_workload(600, seed=seed, rate=6.0)
    real = cluster.sample_noise(len(tasks), np.random.default_rng(seed))
    kw = dict(model=model, online=True, retrain_every=retrain_every, window=window, lookahead=lookahead,
              min_obs=min_obs)
    fast, ref = HybridML(**kw), _EagerHybridML(**kw)
    a, b = simulate(tasks, cluster, fast, real), simulate(tasks, cluster, ref, real)
    assert fast.n_refits == ref.n_refits > 0
    for col in ("gpu", "fraction", "cpu_start", "cpu_end", "gpu_start", "gpu_end", "end"):
        assert np.array_equal(np.asarray(getattr(a, col)), np.asarray(getattr(b, col)), equal_nan=True), col
    # the predictions a decision used are the same numbers
    assert np.array_equal(_bits(fast.kernel_data()[0][:, :2]), _bits(ref.kernel_data()[0][:, :2]))


def test_in_loop_learning_returns_to_python_only_at_the_end(model, cluster):
    from hybridsched.kinds.machine.engine import Session

    tasks = small_workload(500, seed=3, rate=6.0)
    real = cluster.sample_noise(len(tasks), np.random.default_rng(0))
    inline = Session(tasks, cluster, HybridML(model=model, retrain_every=10), real, inline_learning=True)
    steps = 1
    while not inline.step():
        steps += 1
    stepped = Session(tasks, cluster, HybridML(model=model, retrain_every=10), real)
    steps_stepped = 1
    while not stepped.step():
        steps_stepped += 1
    assert steps == 1 and steps_stepped > 10
    assert np.array_equal(inline.trace().fraction, stepped.trace().fraction)


# --- DQN forward pass ---------------------------------------------------------------------------------
@FAST
@given(seed=st.integers(0, 10_000), S=st.integers(1, 50), H=st.integers(1, 70), A=st.integers(1, 20))
def test_fused_forward_pass_equals_the_reference(seed, S, H, A):
    """Separate arrays, zero inputs skipped: the same Q-values as the flat reference pass (equal
    in value, which -0.0 vs 0.0 aside is equal in bits), also with zero state features."""
    rng = np.random.default_rng(seed)
    shapes = [(H, S), (H,), (H, H), (H,), (1, H), (1,), (A, H), (A,)]
    weights = [rng.normal(size=sh) for sh in shapes]
    ref, net = pack_weights(weights), net_from_weights(weights)
    h1, h2, nz = np.empty(H), np.empty(H), np.empty(max(S, H), dtype=np.int64)
    states = rng.normal(size=(20, S)) * 3
    states[::3, ::2] = 0.0  # zero inputs are skipped in the first layer too
    for s in states:
        q_ref, q_fast = np.empty(A), np.empty(A)
        dueling_q_into(q_ref, s, ref, 0, S, H, A)
        dueling_q_net(q_fast, s, net, h1, h2, nz)
        assert np.array_equal(q_fast, q_ref) and np.argmax(q_fast) == np.argmax(q_ref)


def test_dqn_kernel_acts_as_the_reference_path(cluster):
    """The kernel (features into scratch, transposed forward pass) picks the same action as
    features + the reference forward pass, on random states of a random network."""
    from hybridsched.kinds.machine.dqn_state import (HEADER, N_ACT, StateSpec, dqn_decide, features_into,
                                                     q_values_batch)

    tasks = small_workload(300, seed=2, rate=6.0)
    X = task_matrix(tasks, cluster)
    spec = StateSpec.fit(X, cluster)
    rng = np.random.default_rng(5)
    H = 32
    shapes = [(H, spec.n_state), (H,), (H, H), (H,), (1, H), (1,), (spec.n_actions, H), (spec.n_actions,)]
    weights = [rng.normal(size=sh) * 0.3 for sh in shapes]
    params = spec.pack(weights, H)
    ref_params = np.concatenate([spec.header(H), pack_weights(weights)])
    A = int(params.hdr[N_ACT])
    pdata = np.zeros((len(tasks) + 1, 2))
    pdata[:, 0] = 1.0  # uniform above epsilon 0: always greedy
    S = np.empty((len(tasks), spec.n_state))
    for i in range(len(tasks)):
        est = X[i, 6] + rng.exponential(2.0, cluster.n_devices)
        features_into(S[i], i, X[i, 6], est, X, params.hdr)
        q = np.empty(A)
        dueling_q_into(q, S[i], ref_params, HEADER + 2 * A, spec.n_state, H, A)
        g, f = dqn_decide(i, X[i, 6], est.copy(), est.copy(), X, pdata, params)
        a = int(np.argmax(q))
        assert (g, f) == (int(params.hdr[HEADER + a]), params.hdr[HEADER + A + a])
        if i % 50 == 0:  # the batch helper runs the same pass
            assert np.array_equal(q_values_batch(S[i:i + 1], params)[0], q)


def test_dqn_greedy_schedule_is_unchanged_by_the_fused_pass(cluster, tmp_path):
    """The greedy DQN's schedule on a fixed workload and network is the one of the reference flat
    transposed pass (digest taken from that pass, commit a506693)."""
    import hashlib

    torch = pytest.importorskip("torch")
    from hybridsched.kinds.machine.dqn import DQNSettings, QNetwork, save_network
    from hybridsched.kinds.machine.dqn_state import StateSpec
    from hybridsched.kinds.machine.policies.dqn import DQNPolicy
    from hybridsched.kinds.machine.workload import WorkloadSpec, generate

    X = task_matrix(generate(WorkloadSpec(rate=6.0), 500, np.random.default_rng(2)), cluster)
    spec = StateSpec.fit(X, cluster)
    torch.manual_seed(0)
    save_network(tmp_path, QNetwork(spec.n_state, spec.n_actions, 64), spec, DQNSettings())
    rng = np.random.default_rng(7)
    tasks = generate(WorkloadSpec(rate=6.0), 5000, rng)
    tr = simulate(tasks, cluster, DQNPolicy(tmp_path), cluster.sample_noise(5000, rng))
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes()
                                     for a in (tr.gpu, tr.fraction, tr.end, tr.energy_j))).hexdigest()
    assert digest == "9406f9f78e28d408aa5731a6b6ec5305de4c2ad9fae2ef954955ae72d1ffec7a"
