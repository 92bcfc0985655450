"""Tuned weights are a stage's output: the policy YAMLs hold what a person chose (the untuned
defaults and where the tuned file is), the ``tune_heuristics`` stage writes the values, and
every way of building a policy reads them (kinds/base.py, ``with_tuned``)."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest
import yaml

from hybridsched.errors import HybridschedError
from hybridsched.kinds.base import instantiate, with_tuned, without_tuned
from tests.runs import ROOT, compose_run, outputs_in

SPACES = yaml.safe_load((ROOT / "conf" / "tune" / "default.yaml").read_text())["spaces"]


def _class(target: str):
    module, _, name = target.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("name", sorted(SPACES))
def test_a_tuned_policy_yaml_holds_its_untuned_defaults_and_names_the_stage_file(name):
    """No number a search chose sits in conf/: each searched setting in the YAML is the class's
    own default, and ``tuned`` points at the tune_heuristics stage's file."""
    raw = yaml.safe_load((ROOT / "conf" / "policies" / "machine" / f"{name}.yaml").read_text())
    assert raw.get("tuned") == f"${{paths.tuned}}/machine/{name}.yaml"
    params = inspect.signature(_class(raw["_target_"])).parameters
    for key in SPACES[name]:
        if key in raw:  # left out, it is the class's default by construction
            assert raw[key] == params[key].default, f"{name}.yaml: {key} {raw[key]} is not the untuned {params[key].default}"
    # trial 0 is the untuned policy wherever the class's value lies in the space
    # (eft_late_hold's untuned queue_slack, infinite, is no hold: eft_late_plain)
    from hybridsched.kinds.machine.tuning import defaults_of
    from tests.runs import compose_run

    trial0 = defaults_of(name, compose_run().cfg, SPACES)
    for key, rng in SPACES[name].items():
        default = params[key].default
        if isinstance(rng, dict) and "choices" in rng:
            assert trial0[key] == raw.get(key, rng["choices"][0])
        elif (rng["low"] if isinstance(rng, dict) else rng[0]) <= default <= (rng["high"] if isinstance(rng, dict) else rng[1]):
            assert trial0[key] == default and type(trial0[key]) is type(default), (name, key)
        else:
            assert key not in trial0 and name == "eft_late_hold", (name, key)


def test_with_tuned_overlays_nested_nodes_and_says_which_file_is_missing(tmp_path):
    f = tmp_path / "eft_rank.yaml"
    f.write_text("# header\nparams: {beta_cpu: 3.5, kappa: 0.25}\n")
    target = "hybridsched.kinds.machine.policies.weighted.RankEFT"
    spec = {"_target_": "hybridsched.kinds.machine.policies.ordered.OrderedQueues", "order": "spt",
            "placement": {"_target_": target, "tuned": str(f), "beta_cpu": 1.0, "kappa": 0.5}}
    assert with_tuned(spec)["placement"] == {"_target_": target, "beta_cpu": 3.5, "kappa": 0.25}
    assert without_tuned(spec)["placement"] == {"_target_": target, "beta_cpu": 1.0, "kappa": 0.5}
    assert instantiate(spec).placement.weights[1] == 3.5  # (alpha, beta_cpu, ...)
    assert with_tuned({**spec["placement"], "tuned": None})["beta_cpu"] == 1.0  # tuned=null: the YAML's values
    with pytest.raises(HybridschedError, match=r"nope.yaml: no tuned weights \(run `dvc repro tune_heuristics`"):
        instantiate({**spec["placement"], "tuned": str(tmp_path / "nope.yaml")})
    with pytest.raises(HybridschedError, match=r"its tuned values replace \{'kappa': 0.9\}, which differ from the untuned "
                                               r"defaults; to run the policy with values by hand, also set its tuned=null"):
        with_tuned({**spec["placement"], "kappa": 0.9})  # an override by hand is never silently replaced
    assert with_tuned({**spec["placement"], "kappa": 0.9, "tuned": None})["kappa"] == 0.9
    f.write_text("params: {beta_cpu: 3.5, colour: red}\n")
    with pytest.raises(HybridschedError, match=r"\['colour'\] are not settings of the policy"):
        with_tuned(spec)
    f.write_text("- 1\n")
    with pytest.raises(HybridschedError, match="expected a `params:` mapping"):
        with_tuned(spec)


@pytest.fixture(scope="module")
def tuned_run(tmp_path_factory):
    """The tune_heuristics stage on a small generated workload, its outputs under tmp."""
    from hybridsched.kinds.machine.stages import generate
    from stages.tune_heuristics import tune_heuristics

    tmp = tmp_path_factory.mktemp("tuned")
    run = compose_run(*outputs_in(tmp), "workload.n_train=600", "workload.n_test=200", "tune.heuristic_trials=4")
    generate(run)
    return run, tune_heuristics(run)


def test_the_stage_writes_one_file_per_policy_never_worse_than_untuned(tuned_run):
    run, metrics = tuned_run
    files = sorted(p.stem for p in (run.path("tuned") / "machine").glob("*.yaml"))
    assert files == sorted(SPACES)
    for name, r in metrics["policies"].items():
        assert r["best"] <= r["default"], name
        assert set(r["params"]) == set(SPACES[name])
        doc = yaml.safe_load((run.path("tuned") / "machine" / f"{name}.yaml").read_text())
        assert doc["params"] == r["params"]
    # every consumer builds the policy with the stage's values, nested ones too (rollout_late's base)
    pols = run.build_policies()
    assert pols["eft_rank"].weights[1] == metrics["policies"]["eft_rank"]["params"]["beta_cpu"]
    heft = metrics["policies"]["heft_late"]["params"]
    assert pols["rollout_late"].w["w_fin"] == pytest.approx(heft["w_fin"])


def test_the_stage_reruns_to_the_same_bytes(tuned_run, tmp_path):
    from stages.tune_heuristics import tune_heuristics

    run, _ = tuned_run
    first = {p.name: p.read_bytes() for p in (run.path("tuned") / "machine").iterdir()}
    again = compose_run(*(o for o in outputs_in(Path(run.cfg["paths"]["workload_dir"]).parents[1])),
                        "workload.n_train=600", "workload.n_test=200", "tune.heuristic_trials=4",
                        f"paths.tuned={tmp_path / 'tuned'}", f"paths.metrics_dir={tmp_path / 'metrics'}")
    tune_heuristics(again)
    assert {p.name: p.read_bytes() for p in (tmp_path / "tuned" / "machine").iterdir()} == first
