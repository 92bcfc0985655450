"""The kind registry: one interface, one lookup, a new kind added by the documented steps."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from hybridsched.errors import HybridschedError
from hybridsched.kinds import KINDS, get_kind, register
from hybridsched.kinds.base import STAGES, Run
from hybridsched.settings_schema import check_settings

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["machine", "cluster"])
def test_every_kind_has_every_stage(name: str) -> None:
    module = get_kind(name)
    assert all(callable(getattr(module, s)) for s in STAGES)


def test_unknown_kind_is_one_line_listing_the_known_ones() -> None:
    with pytest.raises(HybridschedError, match=r"^workload.kind: unknown kind 'nope'; known: cluster, machine"):
        get_kind("nope")


def test_stage_scripts_hold_no_kind_specific_code() -> None:
    # the DVC pipeline's stages (the kind interface); experiment scripts of one kind
    # (fgd_atc23, load_sweep, real) are kind-specific by nature
    for script in (ROOT / "stages" / f"{s}.py" for s in (*STAGES, "check")):
        if not script.exists():
            continue
        text = script.read_text()
        assert "kinds.machine" not in text and "kinds.cluster" not in text and "alibaba" not in text, script
        if script.stem in STAGES:
            assert len(text.splitlines()) <= 40, script


def test_a_toy_kind_added_by_the_documented_steps_runs_generate_simulate_evaluate(tmp_path: Path) -> None:
    # docs/adding-a-kind.md: (1) a package with the stage functions, (2) one line in the registry,
    # (3) its workload and kind configs, its policies as one YAML each.
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "workload" / "toy.yaml").write_text("name: toy\nkind: toy\nseed: 0\nn: 400\nrate: 1.6\n")
    (conf / "policies" / "toy").mkdir()
    (conf / "policies" / "toy" / "fifo.yaml").write_text("_target_: tests.toy_kind.Fifo\n")
    (conf / "policies" / "toy" / "sjf.yaml").write_text("_target_: tests.toy_kind.ShortestFirst\n")
    (conf / "kinds" / "toy.yaml").write_text(
        "# @package _global_\ndefaults:\n  - /policy_catalogue/toy\n"
        "  - _self_\nsim:\n  policies:\n    toy: [fifo, sjf]\ntoy:\n  servers: 2\n")
    cfg_text = (conf / "config.yaml").read_text().replace("  - kinds/cluster\n", "  - kinds/cluster\n  - kinds/toy\n")
    (conf / "config.yaml").write_text(cfg_text)
    register("toy", "tests.toy_kind")
    try:
        with initialize_config_dir(config_dir=str(conf), version_base=None):
            cfg = compose("config", overrides=["workload=toy", f"paths.workload_dir={tmp_path / 'w'}",
                                               f"paths.traces_dir={tmp_path / 't'}", f"paths.metrics_dir={tmp_path / 'm'}"])
        run = Run(cfg=OmegaConf.to_container(cfg, resolve=True))
        check_settings(run.cfg)  # its own settings declared (toy_kind.SETTINGS), the rest from the table
        kind = get_kind(run.kind)
        for stage in ("generate", "simulate", "evaluate"):
            getattr(kind, stage)(run)
    finally:
        KINDS.pop("toy")
    table = json.loads((tmp_path / "m" / "summary.json").read_text())["policies"]
    assert set(table) == {"fifo", "sjf"}
    # shortest-first minimises mean latency on one queue; both are above the solo bound
    assert table["sjf"]["mean_latency"] < table["fifo"]["mean_latency"]
    assert table["sjf"]["mean_latency_vs_bound"] >= 1 and table["sjf"]["latency_speedup_vs_fifo"] > 1
