"""Device queues in a chosen order (ordered_engine.py, policies/ordered.py): FIFO is the arrival
engine trace for trace, the invariants and the LP bound hold for every order (hypothesis), the
compiled loop equals the plain-Python reference, and the orders on hand-made cases."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from numba import njit

from hybridsched.devices import Cluster
from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.bounds import lower_bound
from hybridsched.kinds.machine.policies.base import Policy
from hybridsched.kinds.machine.policies.ordered import OrderedQueues
from hybridsched.kinds.machine.sim import simulate, simulate_arrival
from hybridsched.kinds.machine.workload import TaskTable
from tests.conftest import small_workload
from tests.machine.sim_helpers import CASES as cases
from tests.machine.sim_helpers import assert_schedule_valid, parents_of
from tests.machine.sim_helpers import setup_case as _setup

P = "hybridsched.kinds.machine.policies"
EFT = {"_target_": f"{P}.eft.EarliestFinishTime"}
PLACEMENTS = [EFT,
              {"_target_": f"{P}.weighted.RankEFT", "beta_cpu": 3.0, "beta_gpu": 0.5, "backlog_s": 2.0},
              {"_target_": f"{P}.weighted.DMDA"},
              {"_target_": f"{P}.eft.Oracle"},
              {"_target_": f"{P}.classic.RoundRobin"}]

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def ordered(placement: dict, order: str) -> OrderedQueues:
    p = OrderedQueues(placement=placement, order=order)
    p.name = f"{placement['_target_'].rsplit('.', 1)[1]}+{order}"
    return p


@SETTINGS
@given(cases)
def test_fifo_is_the_arrival_engine_trace_for_trace(c):
    from hybridsched.kinds.base import instantiate

    cluster, tasks, real = _setup(c)
    for spec in PLACEMENTS:
        a = simulate_arrival(tasks, cluster, instantiate(spec), real).to_frame()
        b = simulate(tasks, cluster, ordered(spec, "fifo"), real).to_frame()
        pd.testing.assert_frame_equal(a.drop(columns="policy"), b.drop(columns="policy"))


@SETTINGS
@given(cases)
def test_every_order_keeps_the_invariants_and_the_lp_bound_holds(c):
    cluster, tasks, real = _setup(c)
    lb = lower_bound(tasks, cluster, real)
    parents = parents_of(tasks)
    for spec in PLACEMENTS:
        for order in ("spt", "wspt"):
            policy = ordered(spec, order)
            assert_schedule_valid(simulate(tasks, cluster, policy, real).to_frame(), tasks, cluster, parents, lb,
                                  policy.name)


@SETTINGS
@given(cases)
def test_ordered_compiled_matches_the_reference_and_reruns_are_identical(c):
    cluster, tasks, real = _setup(c)
    for spec in PLACEMENTS[:3]:
        for order in ("spt", "wspt"):
            policy = ordered(spec, order)
            a = simulate(tasks, cluster, policy, real).to_frame()
            pd.testing.assert_frame_equal(a, simulate(tasks, cluster, policy, real).to_frame())
            pd.testing.assert_frame_equal(a, simulate(tasks, cluster, policy, real, compiled=False).to_frame())


@njit
def _on_cpu(i, t, est, true_free, X, pdata, params):
    return 0, 0.0


class CPUOnly(Policy):
    """Every task wholly on the CPU: one queue to order."""

    kernel = _on_cpu


def _cpu_tasks(sizes, priority=None) -> TaskTable:
    """Tasks arriving at t = 0, 0.001, 0.002, ..."""
    n = len(sizes)
    return TaskTable(np.arange(n), np.arange(n) * 1e-3, np.asarray(sizes, float), np.zeros(n),
                     np.full(n, 100.0), np.zeros(n, dtype=np.int64) if priority is None else np.asarray(priority),
                     np.full(n, np.nan), np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64))


def _cpu_starts(order: str, tasks: TaskTable) -> np.ndarray:
    cluster = Cluster(n_gpus=1, noise_sigma=0.0)
    policy = ordered({"_target_": f"{__name__}.CPUOnly"}, order)
    return simulate(tasks, cluster, policy, cluster.sample_noise(len(tasks), np.random.default_rng(0))).cpu_start


def test_spt_runs_the_shortest_queued_part_first_and_fifo_the_first_queued():
    # task 0 takes the CPU at once; 1 (long) and 2 (short) queue behind it
    tasks = _cpu_tasks([100.0, 300.0, 50.0])
    fifo, spt = _cpu_starts("fifo", tasks), _cpu_starts("spt", tasks)
    assert fifo[0] == spt[0] == 0.0
    assert fifo[1] < fifo[2]  # first come, first served
    assert spt[2] < spt[1]  # shortest first
    assert spt[2] == pytest.approx(100.0 / 50.0) and spt[1] == pytest.approx((100.0 + 50.0) / 50.0)


def test_wspt_divides_by_one_plus_the_priority():
    # task 2 is half as long as task 1 but task 1 has priority 2: 300 / 3 < 150 / 1
    tasks = _cpu_tasks([100.0, 300.0, 150.0], priority=[0, 2, 0])
    spt, wspt = _cpu_starts("spt", tasks), _cpu_starts("wspt", tasks)
    assert spt[2] < spt[1]
    assert wspt[1] < wspt[2]


@pytest.mark.parametrize("kwargs, message", [
    ({"placement": EFT, "order": "lifo"}, "order: 'lifo' is not one of"),
    ({"placement": {"_target_": f"{P}.late.EFTLate"}}, "is not an arrival-mode policy"),
    ({"placement": {"_target_": f"{P}.dqn.DQNPolicy", "online": True, "model_dir": "/nowhere"}}, "learns online"),
])
def test_bad_settings_are_one_line(kwargs, message):
    with pytest.raises(HybridschedError, match=message):
        OrderedQueues(**kwargs)


def test_it_cannot_continue_from_given_device_times():
    cluster = Cluster(n_gpus=1)
    tasks = small_workload(5, 0)
    with pytest.raises(HybridschedError, match="orders its device queues"):
        simulate(tasks, cluster, ordered(EFT, "spt"),
                 cluster.sample_noise(5, np.random.default_rng(0)), devices=np.zeros((2, 2)))
