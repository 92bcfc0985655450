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


def test_a_categorical_setting_is_searched_and_trial_0_keeps_the_untuned_option(tmp_path):
    from hybridsched.kinds.machine.tuning import defaults_of

    late = {"_target_": "hybridsched.kinds.machine.policies.late.EFTLate", "fraction_step": 0.1}
    space = {"eft_late": {"aging": [0.0, 2.0], "reserved_order": {"choices": ["fifo", "spt", "rank"]}}}
    cfg = {"policies": {"machine": {"eft_late": late}}}
    # the YAML leaves both out: trial 0 takes the class's default where it lies in the space (aging 0)
    # and the first option (the untuned one); set in the YAML, a value is kept
    assert defaults_of("eft_late", cfg, space) == {"aging": 0.0, "reserved_order": "fifo"}
    assert defaults_of("eft_late", {"policies": {"machine": {"eft_late": {**late, "reserved_order": "rank"}}}},
                       space) == {"aging": 0.0, "reserved_order": "rank"}
    with pytest.raises(HybridschedError, match=r"tune.spaces.eft_late.reserved_order: the policy's reserved_order "
                                               r"'lifo' is not one of the choices \['fifo', 'spt', 'rank'\]"):
        defaults_of("eft_late", {"policies": {"machine": {"eft_late": {**late, "reserved_order": "lifo"}}}}, space)
    tasks = small_workload(200, seed=5, rate=8.0)
    s = TuneSettings(target="eft_late", n_trials=8, seed=3, storage=str(tmp_path / "s.journal"), spaces=space)
    out = run_study(s, cfg, tasks, Cluster(n_gpus=2))
    assert out["best"]["mean_latency"] <= out["default"]["mean_latency"]
    assert out["best_params"]["reserved_order"] in ("fifo", "spt", "rank")
    import optuna

    from hybridsched.kinds.machine.tuning import _storage

    study = optuna.load_study(study_name=out["study"], storage=_storage(str(tmp_path / "s.journal")))
    assert len({t.params["reserved_order"] for t in study.trials}) > 1  # more than one option was tried


@pytest.mark.parametrize("entry, line", [
    ({"choices": []}, "choices must be a non-empty list of distinct names"),
    ({"choices": ["fifo", "fifo"]}, "choices must be a non-empty list of distinct names"),
    ({"choices": ["fifo"], "low": 0}, "(and nothing else)"),
    ({"choice": ["fifo"]}, "unknown key(s) ['choice']"),
    ({"low": "a", "high": 2}, "low and high must be numbers"),
])
def test_a_bad_choices_entry_is_one_line(entry, line):
    with pytest.raises(HybridschedError, match=r"tune.spaces.eft_late.reserved_order: .*" + __import__("re").escape(line)):
        TuneSettings(target="eft_late", spaces={"eft_late": {"reserved_order": entry}})
