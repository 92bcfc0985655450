"""The late-dispatch engine (sim.dispatch: late): invariants on random small workloads
(hypothesis), the compiled loop against the plain-Python reference, the LP bound below every
late policy, and the split rule on a hand-made case."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

from hybridsched.kinds.machine.bounds import lower_bound
from hybridsched.devices import Cluster
from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.late_engine import RESERVED, simulate_late
from hybridsched.kinds.machine.policies.base import Policy
from hybridsched.kinds.machine.policies.late import EFTLate, HEFTLate, LateList, SPTLate, WSPTLate
from hybridsched.kinds.machine.policies.late_dqn import DQNLate, PGLate, n_weights
from hybridsched.kinds.machine.policies.late_rollout import RolloutLate
from hybridsched.kinds.machine.policies.late_scorer import CEMLate
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.workload import TaskTable
from tests.conftest import small_workload
from tests.machine.sim_helpers import CASES as cases
from tests.machine.sim_helpers import assert_schedule_valid, parents_of
from tests.machine.sim_helpers import setup_case as _setup
from tests.machine.late_models import train_tiny

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """cem_late, dqn_late and pg_late, tiny but trained (tests/machine/late_models.py)."""
    return train_tiny(tmp_path_factory.mktemp("late_models"))


def late_policies(models: Path):
    rnd = np.random.default_rng(3).normal(0, 0.7, n_weights(6))
    return [SPTLate(), WSPTLate(), EFTLate(), HEFTLate(), EFTLate(beta_cpu=14.3, beta_gpu=1.7, backlog_s=7.26),
            SPTLate(aging=0.5, beta_cpu=2.0, fraction_step=0.25),
            # trained late models read from their model_dir, and a random Q-network
            CEMLate(model_dir=str(models / "cem_late")), DQNLate(model_dir=str(models / "dqn_late")),
            PGLate(model_dir=str(models / "pg_late")),
            DQNLate(model={"hidden": 6, "weights": rnd.tolist()}),
            # the split hold (late.start_device): a heuristic and a network with one
            EFTLate(queue_slack=2.0), WSPTLate(queue_slack=0.0),
            # reserved parts shortest first (late_engine._shortest_first)
            EFTLate(reserved_order="spt"), HEFTLate(reserved_order="spt", queue_slack=1.0),
            EFTLate(reserved_order="rank"), WSPTLate(reserved_order="rank", queue_slack=2.0),
            PGLate(model={"hidden": 6, "weights": rnd.tolist(), "queue_slack": 0.5}),
            # the rollout over the pool (late_rollout.py), over a charged heft_late and a held split
            RolloutLate(HEFTLate(beta_cpu=10.3, beta_gpu=7.5, backlog_s=5.8), 4, 20),
            RolloutLate(EFTLate(queue_slack=1.0, reserved_order="rank"), 2, 3)]


@SETTINGS
@given(cases)
def test_late_policies_keep_the_invariants_and_the_lp_bound_holds(models, c):
    cluster, tasks, real = _setup(c)
    lb = lower_bound(tasks, cluster, real)
    assert np.isfinite(lb.mean_latency_lp)
    parents = parents_of(tasks)
    for policy in late_policies(models):
        assert_schedule_valid(simulate(tasks, cluster, policy, real).to_frame(), tasks, cluster, parents, lb, policy.name)


@SETTINGS
@given(cases)
def test_late_compiled_matches_the_reference_and_reruns_are_identical(models, c):
    cluster, tasks, real = _setup(c)
    for policy in late_policies(models):
        a = simulate(tasks, cluster, policy, real).to_frame()
        pd.testing.assert_frame_equal(a, simulate(tasks, cluster, policy, real).to_frame())
        pd.testing.assert_frame_equal(a, simulate(tasks, cluster, policy, real, compiled=False).to_frame())


def _table(arrival, size, intensity, memory) -> TaskTable:
    n = len(arrival)
    return TaskTable(np.arange(n), np.asarray(arrival, float), np.asarray(size, float), np.asarray(intensity, float),
                     np.asarray(memory, float), np.zeros(n, dtype=np.int64), np.full(n, np.nan),
                     np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64))


@njit
def _split_half_on_cpu(t, pool, n_pool, idle, est, qlen, X, ready, pdata, params):
    """Task at pool[0], half on GPU 0, started on the CPU (waits when the CPU is busy)."""
    if idle[0] == 0:
        return -1, -1, 0.0, 0
    return 0, 0, 0.5, 0


class _HalfOnCPU(Policy):
    name = "half"
    dispatch = "late"
    pick_kernel = _split_half_on_cpu


def test_the_other_part_of_a_split_joins_its_device_queue_with_priority():
    # Both tasks arrive at 0: task 0 starts on the CPU with half on GPU 0, so does task 1 once
    # the CPU frees; task 1's GPU part waits for GPU 0 only if task 0's GPU part is still there.
    cluster = Cluster(n_gpus=1, noise_sigma=0.0, launch_s=0.0)
    tasks = _table([0.0, 0.0], [100.0, 100.0], [0.0, 0.0], [100.0, 100.0])
    tr = simulate_late(tasks, cluster, _HalfOnCPU(), cluster.sample_noise(2, np.random.default_rng(0)))
    cpu_half = 0.5 * 100 / cluster.cpu_gflops
    gpu_half = 0.5 * cluster.gpu_seconds(np.array([100.0]), np.array([0.0]), np.array([100.0]))[0]
    assert tr.cpu_start[0] == 0.0 and tr.gpu_start[0] == 0.0  # both parts start at once on idle devices
    assert tr.cpu_start[1] == pytest.approx(cpu_half)  # task 1 waited in the pool for the CPU
    assert tr.gpu_start[1] == pytest.approx(max(cpu_half, gpu_half))  # its GPU part: at once or right after task 0's
    assert tr.end[1] == pytest.approx(max(2 * cpu_half, max(cpu_half, gpu_half) + gpu_half))


@njit
def _never(t, pool, n_pool, idle, est, qlen, X, ready, pdata, params):
    return -1, -1, 0.0, 0


@njit
def _busy_device(t, pool, n_pool, idle, est, qlen, X, ready, pdata, params):
    return 0, 0, 1.0, 0  # the CPU with the whole task on the GPU: not a CPU part


@pytest.mark.parametrize("kernel, message", [(_never, "waited while every device was idle"),
                                             (_busy_device, "needs a GPU share below 1")])
@pytest.mark.parametrize("compiled", [True, False])
def test_a_policy_that_breaks_the_rules_fails_with_one_line(kernel, message, compiled):
    cls = type("Bad", (Policy,), {"name": "bad", "dispatch": "late", "pick_kernel": kernel})
    cluster = Cluster(n_gpus=1)
    tasks = small_workload(5, 0)
    with pytest.raises(RuntimeError, match=message):
        simulate_late(tasks, cluster, cls(), cluster.sample_noise(5, np.random.default_rng(0)), compiled=compiled)


def test_an_arrival_policy_cannot_run_late():
    from hybridsched.kinds.machine.policies.eft import EarliestFinishTime

    cluster = Cluster(n_gpus=1)
    tasks = small_workload(5, 0)
    with pytest.raises(HybridschedError, match="no late-dispatch kernel"):
        simulate_late(tasks, cluster, EarliestFinishTime(), cluster.sample_noise(5, np.random.default_rng(0)))


def test_list_kernel_weights_must_be_non_negative():
    with pytest.raises(ValueError, match="aging must be >= 0"):
        LateList(aging=-1.0)
    with pytest.raises(ValueError, match="queue_slack must be >= 0"):
        EFTLate(queue_slack=-0.5)


def _split_parts(tr):
    split = (tr.fraction > 0) & (tr.fraction < 1)
    return split, tr.cpu_start[split], tr.gpu_start[split]


@SETTINGS
@given(cases)
def test_queue_slack_zero_starts_every_split_on_the_cpu(models, c):
    # A split may start on a GPU only while its CPU part would wait at most 0 s; an idle CPU
    # takes the split first, so every split's CPU part starts no later than its GPU part
    # (without noise: the rule reads believed times, and a part running late looks done).
    cluster, tasks, real = _setup({**c, "sigma": 0.0})
    for policy in (EFTLate(queue_slack=0.0), HEFTLate(queue_slack=0.0, beta_cpu=3.0),
                   PGLate(model={**json.loads((models / "pg_late" / "model.json").read_text()), "queue_slack": 0.0})):
        _, cs, gs = _split_parts(simulate(tasks, cluster, policy, real))
        assert (cs <= gs).all(), policy.name


@SETTINGS
@given(cases, st.sampled_from([0.25, 1.0, 3.0]))
def test_queue_slack_bounds_how_long_a_split_cpu_part_waits_behind_its_gpu_part(c, slack):
    # Without noise the believed CPU free time is the true one, and the CPU's reserved queue is
    # FIFO, so a split started on a GPU gets the CPU within slack x its GPU part's seconds.
    cluster, tasks, real = _setup({**c, "sigma": 0.0})
    tr = simulate(tasks, cluster, EFTLate(queue_slack=slack), real)
    split, cs, gs = _split_parts(tr)
    gpu_part = tr.gpu_end[split] - gs
    assert (cs - gs <= slack * gpu_part + 1e-9).all()


def test_a_bad_queue_slack_in_a_model_file_is_one_line(models):
    cluster = Cluster(n_gpus=1)
    tasks = small_workload(5, 0)
    model = json.loads((models / "pg_late" / "model.json").read_text())
    for bad in (-1.0, "2", True):
        with pytest.raises(HybridschedError, match=f"pg_late model: queue_slack must be a number >= 0, got {bad!r}"):
            simulate(tasks, cluster, PGLate(model={**model, "queue_slack": bad}), cluster.sample_noise(5, np.random.default_rng(0)))


def test_sim_dispatch_filters_the_policies_by_mode():
    from hybridsched.errors import HybridschedError
    from hybridsched.kinds.machine.policies.eft import EarliestFinishTime
    from hybridsched.kinds.machine.policies.ordered import OrderedQueues
    from hybridsched.evaluation import dispatch_mode
    from hybridsched.kinds.machine.stages import select_dispatch

    pols = {"eft": EarliestFinishTime(), "spt_late": SPTLate(),
            "eft_spt": OrderedQueues(order="spt", placement={"_target_": "hybridsched.kinds.machine.policies.eft.EarliestFinishTime"})}
    assert [dispatch_mode(p) for p in pols.values()] == ["arrival", "late", "ordered"]
    assert list(select_dispatch({}, pols)) == ["eft", "spt_late", "eft_spt"]  # all is the default
    assert list(select_dispatch({"dispatch": "late"}, pols)) == ["spt_late"]
    assert list(select_dispatch({"dispatch": "ordered"}, pols)) == ["eft_spt"]
    assert list(select_dispatch({"dispatch": "late"}, {"eft": pols["eft"]}, named=True)) == ["eft"]  # policy=NAME wins
    with pytest.raises(HybridschedError, match=r"sim.dispatch=late: none of the chosen policies \['eft'\] dispatches late"):
        select_dispatch({"dispatch": "late"}, {"eft": pols["eft"]})
    with pytest.raises(HybridschedError, match="sim.dispatch must be one of .*got 'soon'"):
        select_dispatch({"dispatch": "soon"}, pols)


def test_a_late_heuristic_is_a_tune_target(tmp_path):
    from pathlib import Path

    import yaml

    from hybridsched.kinds.machine.tuning import TuneSettings, run_study

    cfg = yaml.safe_load((Path(__file__).resolve().parents[2] / "params.yaml").read_text())
    s = TuneSettings.from_dict({**cfg["tune"], "target": "eft_late", "n_trials": 3, "storage": str(tmp_path / "s.journal")})
    out = run_study(s, cfg, small_workload(300, 1, rate=6.0), Cluster())
    assert out["best"]["mean_latency"] <= out["default"]["mean_latency"]
    assert set(out["best_params"]) == {"aging", "beta_cpu", "beta_gpu", "backlog_s", "reserved_order"}
    assert out["best_params"]["reserved_order"] in RESERVED


def late_simulate(tmp_path, names: list[str]):
    """The simulate stage in late mode on a small generated workload under ``tmp_path``:
    (kind, the overrides, the run, the results table)."""
    from hybridsched.kinds import get_kind
    from tests.runs import compose_run, outputs_in

    kind = get_kind("machine")
    over = [*outputs_in(tmp_path), "workload.n_train=50", "workload.n_test=200", "sim.bound_lp.enabled=false"]
    kind.generate(compose_run(*over))
    run = compose_run(*over, "sim.dispatch=late", f"sim.policies.machine=[{','.join(names)}]")
    kind.check_config(run)
    table = kind.simulate(run)
    assert set(table.index) == set(names)
    assert (table["mean_latency_vs_bound"] >= 1 - 1e-9).all()  # the (solo) bound holds in late mode too
    return kind, over, run, table


def test_simulate_and_evaluate_stages_run_late_policies_with_sim_dispatch_late(tmp_path):
    import pandas as pd

    from hybridsched.errors import HybridschedError
    from tests.runs import compose_run

    kind, over, run, _ = late_simulate(tmp_path, ["spt_late", "wspt_late", "eft_late", "heft_late"])
    table = kind.evaluate(run)
    assert (tmp_path / "metrics" / "summary.json").is_file()
    # the headline: one dispatch mode, so the best overall only, at the lowest mean latency
    import json

    head = json.loads((tmp_path / "metrics" / "headline.json").read_text())["headline"]
    assert head["best"]["policy"] == table["mean_latency"].idxmin() and "late" not in head
    assert head["best"]["vs_bound"] >= 1 - 1e-9 and (tmp_path / "metrics" / "plots" / "headline.png").is_file()
    assert set(pd.read_csv(tmp_path / "metrics" / "policies.csv")["dispatch"]) == {"late"}
    with pytest.raises(HybridschedError, match=r"sim.dispatch=arrival: none of the chosen policies \['eft_late'\]"):
        kind.check_config(compose_run(*over, "sim.dispatch=arrival", "sim.policies.machine=[eft_late]"))


@njit
def _split_on_cpu(t, pool, n_pool, idle, est, qlen, X, ready, pdata, params):
    """The oldest waiting task, 0.9 of it on GPU 0, started on the CPU (waits while the CPU is busy)."""
    if idle[0] == 0:
        return -1, -1, 0.0, 0
    return 0, 0, 0.9, 0


class _SplitOnCPU(Policy):
    name = "split"
    dispatch = "late"
    pick_kernel = _split_on_cpu

    def __init__(self, reserved_order: str) -> None:
        self.reserved_order = reserved_order


def test_reserved_parts_run_shortest_first_with_spt_and_in_queue_order_with_fifo():
    # three splits start on the CPU one after another; their GPU parts (0.9 of each) queue on
    # GPU 0 behind the first one's: FIFO runs them as queued (1 then 2), SPT the shorter (2) first
    cluster = Cluster(n_gpus=1, noise_sigma=0.0, launch_s=0.0)
    tasks = _table([0.0, 0.0, 0.0], [100.0, 400.0, 200.0], [0.0, 0.0, 0.0], [100.0, 100.0, 100.0])
    real = cluster.sample_noise(3, np.random.default_rng(0))
    fifo = simulate_late(tasks, cluster, _SplitOnCPU("fifo"), real)
    spt = simulate_late(tasks, cluster, _SplitOnCPU("spt"), real)
    assert fifo.gpu_start[1] < fifo.gpu_start[2]
    assert spt.gpu_start[2] < spt.gpu_start[1]
    assert spt.gpu_start[2] == pytest.approx(fifo.gpu_start[1])  # the same slot, the shorter part in it


def test_rank_runs_the_reserved_part_that_a_chain_waits_behind_first():
    # as above, but task 1 (the longer GPU part) has a long child: ``rank`` divides its part's
    # seconds by 1 + that child's best time alone / the mean, so it goes before task 2's
    cluster = Cluster(n_gpus=1, noise_sigma=0.0, launch_s=0.0)
    tasks = _table([0.0, 0.0, 0.0, 0.0], [100.0, 400.0, 200.0, 4000.0], [0.0] * 4, [100.0] * 4)
    tasks = TaskTable(*[getattr(tasks, f) for f in ("task_id", "arrival", "size", "intensity", "memory_mb",
                                                     "priority", "deadline")],
                      np.array([0, 0, 0, 0, 1]), np.array([1]))
    real = cluster.sample_noise(4, np.random.default_rng(0))
    spt = simulate_late(tasks, cluster, _SplitOnCPU("spt"), real)
    rank = simulate_late(tasks, cluster, _SplitOnCPU("rank"), real)
    assert spt.gpu_start[2] < spt.gpu_start[1]
    assert rank.gpu_start[1] < rank.gpu_start[2]


@SETTINGS
@given(cases)
def test_without_dependencies_rank_is_spt_trace_for_trace(c):
    cluster, tasks, real = _setup(c)
    n = len(tasks)
    flat = TaskTable(tasks.task_id, tasks.arrival, tasks.size, tasks.intensity, tasks.memory_mb, tasks.priority,
                     tasks.deadline, np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64))
    for make in (lambda o: EFTLate(reserved_order=o), lambda o: HEFTLate(reserved_order=o, queue_slack=1.0)):
        a = simulate_late(flat, cluster, make("spt"), real).to_frame()
        b = simulate_late(flat, cluster, make("rank"), real).to_frame()
        pd.testing.assert_frame_equal(a, b)


def test_a_bad_reserved_order_is_one_line():
    with pytest.raises(HybridschedError, match="EFTLate.reserved_order: 'lifo' is not one of"):
        EFTLate(reserved_order="lifo")
