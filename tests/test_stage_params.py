"""The stages that build only the policies their settings name declare exactly those in dvc.yaml,
and the check stage warns when a setting names one that dvc.yaml leaves out."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from hybridsched.kinds import KINDS, get_kind
from hybridsched.stage_params import check_dvc_yaml, module_file, targets, undeclared

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


@pytest.fixture(scope="module")
def dvc_yaml() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_dvc_yaml_declares_every_policy_the_default_settings_name(kind, params, dvc_yaml):
    reads = get_kind(kind).policies_read(params)
    assert reads, f"{kind}: no stage that builds only some policies"
    assert undeclared(dvc_yaml, kind, reads, params["policies"][kind]) == []


def test_a_narrowed_stage_lists_no_policy_it_does_not_read(params, dvc_yaml):
    """The params of the narrowed stages are exactly what policies_read names (no stale key)."""
    reads: dict[str, set[str]] = {}
    for kind in KINDS:
        for stage, names in get_kind(kind).policies_read(params).items():
            reads.setdefault(stage, set()).update(f"policies.{kind}.{n}" for n in names)
    for stage, keys in reads.items():
        listed = {p for p in dvc_yaml["stages"][stage].get("params", []) if isinstance(p, str) and p.startswith("policies.")}
        assert listed == keys, f"dvc.yaml stage {stage}: params {sorted(listed)}, policies_read {sorted(keys)}"


def test_a_setting_naming_another_policy_is_said(params, dvc_yaml):
    cfg = copy.deepcopy(params)
    cfg["tune"]["spaces"]["hybrid_ml"] = {"retrain_every": [10, 100]}
    cfg["train_late"]["base"] = "greedy"
    lines = undeclared(dvc_yaml, "machine", get_kind("machine").policies_read(cfg), cfg["policies"]["machine"])
    assert any("stage tune_heuristics reads policies.machine.hybrid_ml" in line for line in lines), lines
    assert any("stage tune_heuristics builds policies.machine.hybrid_ml from "
               "src/hybridsched/kinds/machine/policies/hybrid_ml.py" in line for line in lines), lines
    assert any("stage train_late reads policies.machine.greedy" in line for line in lines), lines
    assert all(line.startswith("dvc.yaml: stage ") for line in lines)


def test_check_dvc_yaml_reads_the_file_it_is_given(params, dvc_yaml, tmp_path):
    cfg = copy.deepcopy(params)
    stripped = copy.deepcopy(dvc_yaml)
    stripped["stages"]["train_late"]["params"].remove("policies.machine.eft_late")
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(stripped))
    lines = check_dvc_yaml(cfg, get_kind("machine"), tmp_path / "dvc.yaml")
    assert lines == ["dvc.yaml: stage train_late reads policies.machine.eft_late (its settings name 'eft_late') but its "
                     "params do not list it, so DVC will not rerun train_late when it changes"]
    assert check_dvc_yaml(cfg, get_kind("machine"), tmp_path / "absent.yaml") == []


def test_targets_are_found_in_nested_policies(params):
    node = params["policies"]["machine"]["rollout_late"]
    found = targets(node)
    assert node["_target_"] in found and len(found) >= 2, found  # rollout_late and its base
    assert all((ROOT / module_file(t)).is_file() for t in found)
