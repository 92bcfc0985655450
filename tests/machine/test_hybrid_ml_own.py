"""hybrid_ml on its own belief of device free times (HybridMLOwnBelief): the belief advances by
the policy's own predictions, resets when a device is seen idle, and the policy runs clean."""

from __future__ import annotations

import numpy as np
import pytest

from hybridsched.devices import Cluster
from hybridsched.kinds.machine.engine import MAX_F
from hybridsched.kinds.machine.metrics import check_trace
from hybridsched.kinds.machine.policies.base import fraction_grid
from hybridsched.kinds.machine.policies.hybrid_ml import (_GRID_AT, _HEADER, _LAUNCH, _N_STATE, HybridMLOwnBelief,
                                                          _hybrid_ml_own)
from hybridsched.kinds.machine.runtime_model import train_runtime_model
from hybridsched.kinds.machine.sim import simulate, task_matrix
from tests.conftest import small_workload
from tests.machine.sim_helpers import parents_of

SMALL_RF = {"model": "random_forest", "seed": 0, "test_fraction": 0.25, "importance_repeats": 0,
            "random_forest": {"n_estimators": 10, "max_depth": 8, "min_samples_leaf": 3, "n_jobs": 1}}


def _params(own: list[float], launch: float = 0.0, step: float = 0.5) -> np.ndarray:
    """The kernel's params with no ridge state: header, the own belief, the grid."""
    header = np.zeros(_HEADER)
    header[_LAUNCH], header[_GRID_AT], header[_N_STATE] = launch, _HEADER + len(own), 0
    return np.concatenate([header, own, fraction_grid(step)])


def _decide(i, t, est, true_free, pdata, params, max_f=1.0):
    X = np.zeros((len(pdata), 7))
    X[:, MAX_F] = max_f
    return _hybrid_ml_own.py_func(i, t, np.array(est, float), np.array(true_free, float), X, pdata, params)


def test_own_belief_advances_by_its_predictions_not_the_engines():
    # CPU + 2 GPUs. The engine believes GPU 0 frees at 1 s; by the policy's own predictions of
    # what it queued there it is busy until 10 s, and the device is indeed still busy (true 5 s).
    pdata = np.array([[100.0, 2.0, 0.0]])  # predicted C 100 s, G 2 s: a GPU task
    params = _params([0.0, 10.0, 3.0])
    g, f = _decide(0, 0.5, est=[0.5, 1.0, 3.0], true_free=[0.0, 5.0, 3.0], pdata=pdata, params=params)
    assert (g, f) == (1, 1.0)  # the engine's belief would pick GPU 0 (free at 1 s)
    assert params[_HEADER + 2] == pytest.approx(3.0 + 2.0)  # GPU 1's belief grew by the predicted G
    assert pdata[0, 2] == 1.0


def test_a_device_seen_idle_resets_the_belief_to_now():
    pdata = np.array([[1.0, 50.0, 0.0]])  # a CPU task
    params = _params([40.0, 0.0, 0.0])  # believed busy until 40 s, but the CPU is idle at t = 2
    g, f = _decide(0, 2.0, est=[2.0, 2.0, 2.0], true_free=[1.5, 0.0, 0.0], pdata=pdata, params=params)
    assert f == 0.0 and params[_HEADER] == pytest.approx(2.0 + 1.0)


@pytest.mark.parametrize("online", [False, True])
def test_own_belief_policy_runs_clean_and_compiled_matches_python(online):
    cluster = Cluster()
    model, _ = train_runtime_model(task_matrix(small_workload(600, seed=1, rate=6.0), cluster), cluster, SMALL_RF)
    tasks = small_workload(300, seed=3, rate=8.0, dag_job_size=4)
    real = cluster.sample_noise(len(tasks), np.random.default_rng(1))
    fast = simulate(tasks, cluster, HybridMLOwnBelief(model=model, online=online), real, compiled=True)
    slow = simulate(tasks, cluster, HybridMLOwnBelief(model=model, online=online), real, compiled=False)
    np.testing.assert_array_equal(fast.fraction, slow.fraction)
    np.testing.assert_array_equal(fast.gpu, slow.gpu)
    assert check_trace(fast.to_frame(), cluster, parents_of(tasks)) == []
