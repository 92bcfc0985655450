"""Tuning a heuristic's weights with the project's Optuna study (storage under tmp_path)."""

import pytest

from hybridsched.errors import HybridschedError
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.tuning import TuneSettings, run_study
from tests.conftest import small_workload

SPACE = {"eft_load": {"beta_cpu": {"low": 0.05, "high": 20.0, "log": True}, "backlog_s": [0.0, 20.0]}}
CFG = {"policies": {"machine": {"eft_load": {"_target_": "hybridsched.kinds.machine.policies.weighted.LoadAwareEFT",
                                             "beta_cpu": 1.0, "beta_gpu": 0.5, "backlog_s": 2.0, "fraction_step": 0.1}}}}


def test_heuristic_target_is_tuned_and_never_worse_than_its_default(tmp_path):
    tasks = small_workload(300, seed=4, rate=6.0, intensity_range=(0.0, 0.4), memory_range=(2000.0, 16000.0))
    s = TuneSettings(target="eft_load", n_trials=4, storage=str(tmp_path / "s.journal"), spaces=SPACE)
    out = run_study(s, CFG, tasks, Cluster(n_gpus=2))
    assert out["n_complete"] == 4
    assert out["best"]["mean_latency"] <= out["default"]["mean_latency"]
    assert set(out["tuned_config"]["policies"]["machine"]["eft_load"]) == {"beta_cpu", "backlog_s"}
    again = run_study(s, CFG, tasks, Cluster(n_gpus=2))  # resumes: no new trials
    assert again["n_trials"] == 4


def test_unknown_target_and_bad_range_are_one_line_errors():
    with pytest.raises(HybridschedError, match="tune.target"):
        TuneSettings(target="nope", spaces=SPACE)
    with pytest.raises(HybridschedError, match="tune.spaces.eft_load.beta_cpu"):
        TuneSettings(target="eft_load", spaces={"eft_load": {"beta_cpu": [3.0, 1.0]}})
