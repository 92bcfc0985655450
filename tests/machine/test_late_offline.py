"""studies.late_offline, shrunk: the offline search over static task orders and splits starts from the
policy's own schedule order, never ends above where it started, writes keys that rerun as a
policy to the reported figure, stays above the LP bound, and writes the same files twice."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from studies import late_offline
from studies.late_eval import scenarios
from hybridsched.devices import Cluster
from hybridsched.kinds.base import instantiate
from hybridsched.kinds.machine.engine import task_matrix
from hybridsched.kinds.machine.policies.late import _ALONE, SPTLate, task_data
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.workload import TaskTable
from tests.runs import untuned_argv, untuned_override

SHRINK = ("--", "workload.n_train=300", "workload.n_test=150", untuned_override())


def _main(monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", ["late_offline", *untuned_argv(argv)])
    late_offline.main()


def test_search_improves_reruns_and_repeats(tmp_path, monkeypatch):
    runs = []
    for k in range(2):
        out = tmp_path / f"run{k}"
        _main(monkeypatch, "--iters", "400", "--window", "10", "--out", str(out), *SHRINK)
        runs.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert runs[0] == runs[1] and set(runs[0]) == {"offline.json", "offline_schedule.json"}
    r = json.loads(runs[0]["offline.json"])
    assert r["tasks"] == 150 and r["start"] == "heft_late"
    steps = [p["mean_latency"] for p in r["progress"]]
    assert steps == sorted(steps, reverse=True) and r["search_mean_latency"] == steps[-1]
    assert r["search_objective"] <= r["start_schedule_objective"]
    assert r["search_objective"] == r["search_mean_latency"]  # the result, rerun as a policy by simulate
    assert r["bound"] <= r["search_mean_latency"]
    assert [o["noise_seed"] for o in r["other_noise"]] == [r["noise_seed"] + 1000 * k for k in (1, 2, 3)]
    assert all(o["ratio"] == o["search_schedule"] / o["start_policy"] for o in r["other_noise"])
    sched = json.loads(runs[0]["offline_schedule.json"])
    assert sorted(sched["key"]) == list(range(150))  # ranks
    shares = np.array(sched["gpu_share"])
    assert ((shares == -1.0) | ((shares >= 0) & (shares <= 1))).all() and (shares >= 0).any()  # some fixed


def test_order_only_and_shares_only(tmp_path, monkeypatch):
    def run(*argv: str) -> dict:
        out = tmp_path / "_".join(argv)
        _main(monkeypatch, *argv, "--window", "10", "--other-noise", "0", "--out", str(out), *SHRINK)
        return json.loads((out / "offline_schedule.json").read_text())

    start = run("--iters", "0")
    order_only = run("--iters", "300", "--split-moves", "0")
    shares_only = run("--iters", "300", "--split-moves", "1")
    assert all(f == -1.0 for f in order_only["gpu_share"]) and order_only["key"] != start["key"]
    assert shares_only["key"] == start["key"] and any(f >= 0 for f in shares_only["gpu_share"])


def test_blind_search_does_not_see_the_scenario_noise(tmp_path, monkeypatch):
    out = tmp_path / "blind"
    _main(monkeypatch, "--iters", "200", "--window", "10", "--blind", "2", "--other-noise", "0", "--out", str(out), *SHRINK)
    r = json.loads((out / "offline.json").read_text())
    assert r["blind"] == 2 and r["other_noise"] == []
    assert r["search_objective"] <= r["start_schedule_objective"]
    # the objective is the mean over the two blind draws, the figure the scenario's noise: they differ
    assert r["search_objective"] != r["search_mean_latency"] and r["bound"] <= r["search_mean_latency"]


def test_heldout_draw_is_the_scenario_tables(tmp_path, monkeypatch):
    """--workload heldoutK searches held-out draw k as studies.late_eval builds it (tasks and
    noise from seed k), from the start policy's own run there."""
    out = tmp_path / "h1"
    _main(monkeypatch, "--workload", "heldout1", "--heldout-tasks", "150", "--start", "eft_late_plain", "--iters", "100",
          "--window", "10", "--other-noise", "0", "--out", str(out))
    r = json.loads((out / "offline.json").read_text())
    name, tasks, cluster, seed, cfg = scenarios([], 2, 150, [untuned_override()])[-1]
    own = simulate(tasks, cluster, instantiate(cfg["policies"]["machine"]["eft_late_plain"]),
                   cluster.sample_noise(150, np.random.default_rng(seed)))
    assert (r["scenario"], r["tasks"], r["noise_seed"]) == (name, 150, 1) == ("heldout1", 150, 1)
    assert r["start_policy_mean_latency"] == float(np.mean(own.end - own.arrival))
    assert r["bound"] <= r["search_mean_latency"] <= r["start_schedule_objective"]


def test_start_from_a_learned_policy_fixes_its_shares(tmp_path, monkeypatch):
    """From pg_late's run every task starts with the share it had there (a learned policy has no
    split rule to keep), and the engine keeps its reserved order.  The model: a tiny trained
    pg_late whose reserved parts run by rank, as the pipeline's (tests/machine/late_models.py)."""
    from tests.machine.late_models import train_tiny

    model = train_tiny(tmp_path / "models", ("pg_late",)) / "pg_late"
    shrink = (*SHRINK, f"policies.machine.pg_late.model_dir={model}")
    out = tmp_path / "pg"
    _main(monkeypatch, "--start", "pg_late", "--iters", "0", "--other-noise", "0", "--out", str(out), *shrink)
    r = json.loads((out / "offline.json").read_text())
    name, tasks, cluster, seed, cfg = scenarios(["default"], 0, 0, list(shrink[1:]))[0]
    pg = instantiate(cfg["policies"]["machine"]["pg_late"])
    own = simulate(tasks, cluster, pg, cluster.sample_noise(len(tasks), np.random.default_rng(seed)))
    sched = json.loads((out / "offline_schedule.json").read_text())
    np.testing.assert_array_equal(sched["gpu_share"], own.fraction)
    assert r["kept"] == {"fraction_step": 0.05, "reserved_order": pg.reserved_order} and pg.reserved_order == "rank"
    assert r["start_policy_mean_latency"] == float(np.mean(own.end - own.arrival))


def test_static_order_replays_a_schedule_from_its_start_order(tasks: TaskTable):
    """Keys in the order a list policy started its tasks (ties at one instant: the policy's own
    key, here the best time alone) give back that schedule, so the search starts from it."""
    cluster = Cluster(n_gpus=2)
    real = cluster.sample_noise(len(tasks), np.random.default_rng(3))
    own = simulate(tasks, cluster, SPTLate(), real)
    first = np.fmin(own.cpu_start, own.gpu_start)
    alone = task_data(tasks, cluster, task_matrix(tasks, cluster), 0.0)[:, _ALONE]
    keys = np.empty(len(tasks))
    keys[np.lexsort((alone, first))] = np.arange(len(tasks))
    rule = np.full(len(tasks), -1.0)  # every split by the rule: SPTLate's (no work charge)
    again = simulate(tasks, cluster, late_offline.OfflineSchedule(keys, rule), real)
    np.testing.assert_array_equal(again.end, own.end)
    np.testing.assert_array_equal(again.fraction, own.fraction)
    cpu_only = simulate(tasks, cluster, late_offline.OfflineSchedule(keys, np.zeros(len(tasks))), real)
    assert (cpu_only.fraction == 0).all() and (cpu_only.gpu == -1).all()
    ranks = late_offline.start_order(own)
    assert sorted(ranks) == list(range(len(tasks))) and np.all(np.diff(first[np.argsort(ranks)]) >= 0)


@pytest.mark.parametrize("argv, message", [(["--iters", "-1"], "--iters, --blind and --other-noise must be >= 0"),
                                           (["--split-moves", "1.5"], "--split-moves in [0, 1]"),
                                           (["--other-noise", "-1"], "got 200000, 0, -1,"),
                                           (["--blind", "-2"], "got 200000, -2, 3,"),
                                           (["--heldout-tasks", "0"], "--window and --heldout-tasks >= 1"),
                                           (["--workload", "heldout5"], "invalid choice: 'heldout5'"),
                                           (["--start", "cem"], "invalid choice: 'cem'")])
def test_bad_settings_are_one_line(tmp_path, monkeypatch, capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        _main(monkeypatch, *argv, "--out", str(tmp_path / "o"), *SHRINK)
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
