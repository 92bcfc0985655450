"""The LP bound memo (kinds/machine/bound_memo.py): a reused bound equals a fresh solve and
costs no LP, any change of what the bound reads misses, a corrupt entry is solved again,
parallel callers wait for one solve, simulate writes the same bytes with or without it, and a
two-job multirun solves the LP once."""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from hybridsched.devices import Cluster, Realization
from hybridsched.kinds.machine import bounds
from hybridsched.kinds.machine.bound_memo import bound_key, memo_lower_bound
from hybridsched.kinds.machine.bounds_lp import LPSettings
from tests.conftest import small_workload
from tests.runs import compose_run, outputs_in

LP = LPSettings(rho=1.0, max_levels=10)  # a coarse grid: a 40-task LP solves in well under a second


@functools.cache
def _inputs(n: int = 40):
    """Tasks, the conf's cluster and seeded noise (composed once: the tests only read them)."""
    cluster = Cluster.from_dict(compose_run().cfg["cluster"])
    return small_workload(n), cluster, cluster.sample_noise(n, np.random.default_rng(0))


@functools.cache
def _fresh() -> bounds.LowerBound:
    """The bound of :func:`_inputs` on the grid :data:`LP`, solved without the memo."""
    return bounds.lower_bound(*_inputs(), LP)


def _count_solves(monkeypatch) -> list[int]:
    """Patch ``bounds.lower_bound`` to count its calls (the memo calls it through the module)."""
    calls: list[int] = []
    solve = bounds.lower_bound

    def counted(*a, **k):
        calls.append(1)
        return solve(*a, **k)

    monkeypatch.setattr(bounds, "lower_bound", counted)
    return calls


def _same_bound(a: bounds.LowerBound, b: bounds.LowerBound) -> bool:
    """Equal in every field but the solve's wall time."""
    return dataclasses.replace(a, lp_solve_s=0.0) == dataclasses.replace(b, lp_solve_s=0.0)


def test_a_reused_bound_equals_a_fresh_solve_and_solves_nothing(tmp_path, monkeypatch, capsys):
    tasks, cluster, real = _inputs()
    fresh = _fresh()
    calls = _count_solves(monkeypatch)
    first = memo_lower_bound(tasks, cluster, real, LP, tmp_path)
    second = memo_lower_bound(tasks, cluster, real, LP, tmp_path)
    assert len(calls) == 1 and np.isfinite(first.mean_latency_lp)
    assert _same_bound(first, fresh) and second == first  # bit for bit, the stored solve time too
    out = capsys.readouterr().out
    assert out.count("LP bound: solved in ") == 1 and out.count(", reused from ") == 1, out
    assert len(list(tmp_path.glob("*.json"))) == 1
    # no LP (off) or no memo folder: computed every time, nothing kept
    memo_lower_bound(tasks, cluster, real, None, tmp_path)
    memo_lower_bound(tasks, cluster, real, LP, None)
    assert len(calls) == 3 and len(list(tmp_path.glob("*.json"))) == 1


def test_a_change_of_anything_the_bound_reads_misses(tmp_path, monkeypatch):
    tasks, cluster, real = _inputs()
    key = bound_key(tasks, cluster, real, LP)
    later = dataclasses.replace(tasks, arrival=tasks.arrival + np.where(np.arange(len(tasks)) == 5, 1e-9, 0.0))
    noisier = Realization(cpu_factor=real.cpu_factor, gpu_factor=real.gpu_factor * 1.01)
    changed = {
        "a task's arrival": bound_key(later, cluster, real, LP),
        "a task's size": bound_key(dataclasses.replace(tasks, size=tasks.size * 1.5), cluster, real, LP),
        "the noise": bound_key(tasks, cluster, noisier, LP),
        "a cluster constant": bound_key(tasks, dataclasses.replace(cluster, gpu_mem_mb=cluster.gpu_mem_mb / 4), real, LP),
        "the GPU count": bound_key(tasks, dataclasses.replace(cluster, n_gpus=cluster.n_gpus + 1), real, LP),
        "an LP setting": bound_key(tasks, cluster, real, dataclasses.replace(LP, piece_cuts=1)),
    }
    assert all(k != key for k in changed.values()), [n for n, k in changed.items() if k == key]
    assert len(set(changed.values())) == len(changed)
    # what the bound does not read (power, price, priorities) shares the entry
    assert bound_key(dataclasses.replace(tasks, priority=tasks.priority + 1), dataclasses.replace(
        cluster, price_per_kwh=9.0, gpu_busy_w=99.0), real, LP) == key
    calls = _count_solves(monkeypatch)
    memo_lower_bound(tasks, cluster, real, LP, tmp_path)
    memo_lower_bound(tasks, cluster, real, dataclasses.replace(LP, piece_cuts=1), tmp_path)
    memo_lower_bound(tasks, cluster, noisier, LP, tmp_path)
    assert len(calls) == 3 and len(list(tmp_path.glob("*.json"))) == 3


@pytest.mark.parametrize("corrupt", [
    b"{\"format\": 1, \"key\": ",  # cut off mid-write by something other than the atomic writer
    b"\xff\xfe not text",
    b"[]",
    b"{\"format\": 1, \"key\": \"KEY\", \"bound\": {\"makespan\": 1.0}}",  # fields missing
    b"{\"format\": 1, \"key\": \"KEY\", \"bound\": {\"makespan\": 1.0, \"mean_latency\": \"1\", \"mean_latency_solo\": 1.0, "
    b"\"mean_latency_lp\": null, \"lp_solve_s\": 0.0}}",  # not numbers
    b"{\"format\": 1, \"key\": \"another\", \"bound\": {}}",
])
def test_a_corrupt_entry_is_solved_again_and_replaced(tmp_path, monkeypatch, capsys, corrupt):
    tasks, cluster, real = _inputs()
    key = bound_key(tasks, cluster, real, LP)
    entry = tmp_path / f"{key}.json"
    entry.write_bytes(corrupt.replace(b"KEY", key.encode()))
    fresh = _fresh()
    calls = _count_solves(monkeypatch)
    lb = memo_lower_bound(tasks, cluster, real, LP, tmp_path)
    assert len(calls) == 1 and _same_bound(lb, fresh)
    assert f"LP bound: memo entry {entry} is unreadable (" in capsys.readouterr().out
    assert memo_lower_bound(tasks, cluster, real, LP, tmp_path) == lb and len(calls) == 1  # replaced by a whole one


def test_parallel_callers_wait_for_one_solve(tmp_path, monkeypatch):
    """Two callers of one key at once (two jobs of a sweep): the second waits on the first's
    lock and reuses its entry."""
    tasks, cluster, real = _inputs()
    solve = bounds.lower_bound
    calls: list[int] = []

    def slow(*a, **k):
        calls.append(1)
        time.sleep(0.3)  # both callers are inside memo_lower_bound before the first entry lands
        return solve(*a, **k)

    monkeypatch.setattr(bounds, "lower_bound", slow)
    got: list[bounds.LowerBound] = []
    jobs = [threading.Thread(target=lambda: got.append(memo_lower_bound(tasks, cluster, real, LP, tmp_path)))
            for _ in range(2)]
    for j in jobs:
        j.start()
    for j in jobs:
        j.join()
    assert len(calls) == 1 and len(got) == 2 and got[0] == got[1]


def test_simulate_writes_the_same_bytes_with_a_cold_warm_or_no_memo(tmp_path, capfd, monkeypatch):
    """The stage's files are the same bytes without a memo, with a cold one and a warm one (the
    bound in this process: a spawned interpreter would add seconds and change nothing here)."""
    from hybridsched import parallel
    from hybridsched.kinds.base import Run
    from hybridsched.kinds.machine import stages

    monkeypatch.setattr(parallel, "can_spawn", lambda: False)
    wd = tmp_path / "data" / "workload"
    wd.mkdir(parents=True)
    small_workload(60).to_frame().to_parquet(wd / "test.parquet")
    cfg = compose_run(*outputs_in(tmp_path), "sim.policies.machine=[eft]", "sim.bound_lp.rho=1",
                      "sim.bound_lp.max_levels=10").cfg

    def simulate(name: str, memo: Path | None) -> dict[str, bytes]:
        traces = tmp_path / name
        stages.simulate(Run(cfg={**cfg, "paths": {**cfg["paths"], "traces_dir": str(traces), "bound_cache": memo}}))
        return {p.name: p.read_bytes() for p in sorted(traces.iterdir())}

    none = simulate("none", None)
    cold = simulate("cold", tmp_path / "memo")
    out = capfd.readouterr().out
    warm = simulate("warm", tmp_path / "memo")
    assert "lower_bound.json" in none and none == cold == warm
    assert out.count("LP bound: solved in ") == 1, out  # the memo's line; the run without one prints none
    assert ", reused from " in capfd.readouterr().out


def test_a_two_job_multirun_solves_the_lp_once(tmp_path):
    """``python -m stages.simulate -m policy=eft,round_robin``: the second job reuses the first
    job's bound (the memo folder is shared; each job's traces are its own)."""
    from tests.test_config_and_stages import run_stage

    memo = tmp_path / "memo"
    r = run_stage("simulate", "-m", "policy=eft,round_robin", "workload.n_test=60", "workload.n_train=10",
                  "sim.bound_lp.rho=1", "sim.bound_lp.max_levels=10", "tracking.enabled=false",
                  f"paths.bound_cache={memo}", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("LP bound: solved in ") == 1 and r.stdout.count(", reused from ") == 1, r.stdout
    assert len(list(memo.glob("*.json"))) == 1
    bounds_written = [p.read_bytes() for p in sorted((tmp_path / "sweep").glob("*/traces/lower_bound.json"))]
    assert len(bounds_written) == 2 and bounds_written[0] == bounds_written[1]
