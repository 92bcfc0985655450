"""Each workload scenario in conf/workload/, composed by Hydra, has the distribution it promises."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from hybridsched.kinds.machine.workload import TaskTable, from_frame, generate_splits

CONF = Path(__file__).resolve().parents[2] / "conf"
SCENARIOS = ["default", "gpu_heavy", "cpu_friendly", "shifted", "bursty", "dag"]
N = 3000


def workload_cfg(scenario: str, *overrides: str) -> dict:
    """The composed ``workload`` node of conf/config.yaml with this scenario (and overrides)."""
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=[f"workload={scenario}", *overrides])
    return OmegaConf.to_container(cfg.workload, resolve=True)


def splits(scenario: str, *overrides: str) -> tuple[TaskTable, TaskTable]:
    return generate_splits(workload_cfg(scenario, f"workload.n_train={N}", f"workload.n_test={N}", *overrides))


@pytest.fixture(scope="module")
def tables() -> dict[str, tuple[TaskTable, TaskTable]]:
    return {s: splits(s) for s in SCENARIOS}


def count_dispersion(arrival: np.ndarray, window_s: float) -> float:
    """Variance / mean of arrivals per window (1 for a Poisson process)."""
    edges = np.arange(arrival[0], arrival[-1], window_s)
    counts = np.histogram(arrival, bins=edges)[0]
    return float(counts.var() / counts.mean())


def test_every_synthetic_scenario_is_in_the_conf_folder() -> None:
    # the other workload options import real traces (kind: cluster); tests/cluster/ covers them
    from tests.runs import compose_run

    synthetic = {p.stem for p in (CONF / "workload").glob("*.yaml") if p.stem != "file"  # file: the user's own
                 and compose_run(f"workload={p.stem}").cfg["workload"]["kind"] == "machine"}
    assert synthetic == set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_is_a_valid_task_table(scenario: str, tables) -> None:
    for split, t in zip(("train", "test"), tables[scenario], strict=True):
        assert len(t) == N, split
        assert workload_cfg(scenario)["name"] == scenario
        # the reader's schema checks (ranges, sorted arrivals, unique ids, acyclic deps) all pass
        back = from_frame(t.to_frame(), source=f"{scenario}/{split}")
        np.testing.assert_array_equal(back.task_id, t.task_id)
        assert np.all((t.intensity >= 0) & (t.intensity <= 1)) and np.all(t.size > 0) and np.all(t.memory_mb > 0)


def test_train_and_test_ids_do_not_overlap(tables) -> None:
    train, test = tables["default"]
    assert not set(train.task_id) & set(test.task_id)


def test_same_seed_same_workload_and_other_seed_differs() -> None:
    a, _ = splits("default", "workload.n_train=200", "workload.n_test=10")
    b, _ = splits("default", "workload.n_train=200", "workload.n_test=10")
    c, _ = splits("default", "workload.n_train=200", "workload.n_test=10", "workload.seed=1")
    np.testing.assert_array_equal(a.size, b.size)
    assert not np.allclose(a.size, c.size)


def test_gpu_heavy_is_more_compute_intense_than_default(tables) -> None:
    heavy, default = tables["gpu_heavy"][0], tables["default"][0]
    assert heavy.intensity.mean() > default.intensity.mean() + 0.2
    assert heavy.intensity.min() >= 0.6
    assert np.median(heavy.size) > np.median(default.size)


def test_cpu_friendly_is_memory_heavier_and_less_intense(tables) -> None:
    cpu, default = tables["cpu_friendly"][0], tables["default"][0]
    assert cpu.intensity.mean() < default.intensity.mean() - 0.2
    assert cpu.intensity.max() <= 0.3
    assert np.median(cpu.memory_mb) > 2 * np.median(default.memory_mb)


def test_shifted_test_split_is_much_less_intense_than_train(tables) -> None:
    train, test = tables["shifted"]
    assert test.intensity.mean() < train.intensity.mean() - 0.4
    assert test.intensity.max() <= 0.35 and train.intensity.min() >= 0.6
    assert np.median(test.memory_mb) > np.median(train.memory_mb)
    # the default scenario has no such shift between its splits
    d_train, d_test = tables["default"]
    assert abs(d_test.intensity.mean() - d_train.intensity.mean()) < 0.05


def test_bursty_arrivals_are_overdispersed_and_default_is_poisson(tables) -> None:
    window = 10.0  # ~50 windows a split: enough for a steady variance estimate
    bursty = count_dispersion(tables["bursty"][0].arrival, window)
    poisson = count_dispersion(tables["default"][0].arrival, window)
    assert bursty > 1.5
    assert 0.5 < poisson < 1.5
    # same mean rate over a whole period: bursts move arrivals around without changing the load
    cfg = workload_cfg("bursty")
    period = cfg["burst_period_s"]
    in_first_period = np.count_nonzero(tables["bursty"][0].arrival < period)
    assert in_first_period == pytest.approx(cfg["rate"] * period, rel=0.1)


def test_dag_parents_arrive_earlier_and_graph_is_acyclic(tables) -> None:
    for t in tables["dag"]:
        assert t.has_deps
        child = np.repeat(np.arange(len(t)), np.diff(t.parent_ptr))
        parent = t.parent_idx
        # every parent is an earlier row, so it arrives no later: row order is a topological order
        assert np.all(parent < child)
        assert np.all(t.arrival[parent] <= t.arrival[child])
        cfg = workload_cfg("dag")
        assert np.diff(t.parent_ptr).max() <= cfg["dag_max_parents"]
        # parents stay inside their job of dag_job_size consecutive tasks
        assert np.all(parent // cfg["dag_job_size"] == child // cfg["dag_job_size"])
    assert not tables["default"][0].has_deps


def test_intensity_range_override_bounds_every_task() -> None:
    train, test = splits("default", "workload.intensity_range=[0.1,0.3]")
    for t in (train, test):
        assert t.intensity.min() >= 0.1 and t.intensity.max() <= 0.3
        assert t.intensity.max() - t.intensity.min() > 0.15  # spread over the range, not a constant
