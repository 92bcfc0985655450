"""The rollout dispatcher ``rollout_late`` (``policies/late_rollout.py``): with one candidate
and no share steps it is its base heuristic trace for trace; with more it keeps the late
engine's invariants and the LP bound and the compiled kernel matches the plain-Python one; its
config builds it over heft_late; and ``studies/late_rollout.py``'s files repeat on rerun."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings

from studies import late_rollout
from hybridsched.errors import HybridschedError
from hybridsched.kinds.base import instantiate
from hybridsched.kinds.machine.policies.late_rollout import RolloutLate
from hybridsched.kinds.machine.bounds import lower_bound
from hybridsched.kinds.machine.policies.late import EFTLate, HEFTLate, WSPTLate
from hybridsched.kinds.machine.sim import simulate
from tests.machine.sim_helpers import CASES as cases
from tests.machine.sim_helpers import assert_schedule_valid, parents_of
from tests.machine.sim_helpers import setup_case as _setup
from tests.runs import untuned_argv, untuned_override

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SHRINK = ("--", "workload.n_train=300", "workload.n_test=150", untuned_override())


def bases():
    """Late heuristics with a work charge, the split hold and each reserved order."""
    return [HEFTLate(w_fin=0.66, aging=0.09, beta_cpu=10.3, beta_gpu=7.5, backlog_s=5.8),
            EFTLate(beta_cpu=14.3, beta_gpu=1.7, backlog_s=7.26, reserved_order="spt"),
            WSPTLate(queue_slack=2.0, reserved_order="rank")]


@SETTINGS
@given(cases)
def test_one_candidate_without_share_steps_is_the_base(c):
    cluster, tasks, real = _setup(c)
    for base in bases():
        own = simulate(tasks, cluster, base, real).to_frame()
        ro = simulate(tasks, cluster, RolloutLate(base, 1, 0), real).to_frame()
        pd.testing.assert_frame_equal(own.drop(columns="policy"), ro.drop(columns="policy"))


@SETTINGS
@given(cases)
def test_rollouts_keep_the_invariants_the_bound_and_the_reference(c):
    cluster, tasks, real = _setup(c)
    lb = lower_bound(tasks, cluster, real)
    parents = parents_of(tasks)
    for base in bases():
        for m, s in ((4, 20), (8, 2)):
            policy = RolloutLate(base, m, s)
            tr = simulate(tasks, cluster, policy, real).to_frame()
            assert_schedule_valid(tr, tasks, cluster, parents, lb)
            pd.testing.assert_frame_equal(tr, simulate(tasks, cluster, policy, real, compiled=False).to_frame())


def test_the_config_is_a_rollout_over_heft_late_and_bad_settings_are_one_line():
    from studies.quality_eval import compose

    specs = compose([untuned_override()])["policies"]["machine"]
    ro = instantiate(specs["rollout_late"])
    heft = instantiate(specs["heft_late"])
    assert (ro.candidates, ro.shares, ro.dispatch) == (8, 20, "late")
    assert ro.w == heft.w and ro.reserved_order == heft.reserved_order and (ro.grid == heft.grid).all()
    with pytest.raises(HybridschedError, match="rollout_late.base: hybridsched.kinds.machine.policies.eft.Earliest"):
        RolloutLate(specs["eft"])
    with pytest.raises(HybridschedError, match="candidates must be an integer >= 1 and shares >= 0, got 0 and 2"):
        RolloutLate(heft, 0, 2)
    with pytest.raises(HybridschedError, match="got 1 and 1.5"):
        RolloutLate(heft, 1, 1.5)


def _main(monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", ["late_rollout", *untuned_argv(argv)])
    late_rollout.main()


def test_the_study_repeats_and_one_candidate_is_the_base(tmp_path, monkeypatch):
    runs = []
    for k in range(2):
        out = tmp_path / f"run{k}"
        _main(monkeypatch, "--workloads", "default", "--candidates", "1,4", "--shares", "0,20",
              "--table", str(tmp_path / "none.csv"), "--out", str(out), *SHRINK)
        runs.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert runs[0] == runs[1] and set(runs[0]) == {"rollout.csv", "rollout.md"}
    df = pd.read_csv(tmp_path / "run0" / "rollout.csv")
    assert list(zip(df["candidates"], df["shares"])) == [(1, 0), (1, 20), (4, 0), (4, 20)]
    assert df["ratio"].iloc[0] == 1.0 and (df["base_mean_latency"] == df["base_mean_latency"].iloc[0]).all()
    assert np.allclose(df["ratio"], df["rollout_mean_latency"] / df["base_mean_latency"], atol=1e-4)


def test_the_training_split_and_a_stale_table(tmp_path, monkeypatch, capsys):
    _main(monkeypatch, "--split", "train", "--candidates", "2", "--shares", "1", "--out", str(tmp_path / "t"), *SHRINK)
    df = pd.read_csv(tmp_path / "t" / "rollout.csv")
    assert df["scenario"].tolist() == ["default (train)"] and "bound" not in df
    stale = pd.DataFrame([{"scenario": "default", "policy": "heft_late", "dispatch": "late", "mean_latency": 9.0,
                           "bound": 0.1}])
    stale.to_csv(tmp_path / "table.csv", index=False)
    with pytest.raises(SystemExit) as e:
        _main(monkeypatch, "--table", str(tmp_path / "table.csv"), "--out", str(tmp_path / "s"), *SHRINK)
    assert "table.csv: heft_late on default has [9.0]" in str(e.value) and not (tmp_path / "s").exists()


@pytest.mark.parametrize("argv, message", [(["--candidates", "0"], "--candidates >= 1"),
                                           (["--shares", "-1"], "got [1], [-1], 0, ['default']"),
                                           (["--workloads", "nope"], "got [1], [2], 0, ['nope']"),
                                           (["--base", "pg_late"], "invalid choice: 'pg_late'")])
def test_bad_settings_are_one_line(tmp_path, monkeypatch, capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        _main(monkeypatch, "--candidates", "1", "--shares", "2", *argv, "--out", str(tmp_path / "o"), *SHRINK)
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
