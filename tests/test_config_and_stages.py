"""Config composition and the stage scripts' handling of bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.conftest import small_workload

ROOT = Path(__file__).resolve().parents[1]


def test_params_yaml_is_the_composition_of_conf(tmp_path):
    """`dvc exp run` and `make params` compose conf/ into params.yaml; the committed one must match."""
    from dvc.utils.hydra import compose_and_dump

    out = tmp_path / "params.yaml"
    compose_and_dump(str(out), str(ROOT / "conf"), None, "config", str(ROOT), [])
    assert yaml.safe_load(out.read_text()) == yaml.safe_load((ROOT / "params.yaml").read_text()), \
        "params.yaml is stale: run `make params`"


def run_stage(name: str, *overrides: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run ``python -m stages.<name>`` with Hydra overrides, writing Hydra's own files under tmp."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'src'}"}
    cmd = [sys.executable, "-m", f"stages.{name}", *overrides, "hydra.output_subdir=null",
           "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _workload_dir(tmp_path: Path, mutate=None) -> Path:
    d = tmp_path / "workload"
    d.mkdir()
    df = small_workload(50).to_frame()
    (mutate(df) if mutate else df).to_parquet(d / "test.parquet")
    return d


@pytest.mark.parametrize(
    "overrides, mutate, expected",
    [
        (["sim.policies.machine=[eft,nope]"], None, "sim.policies.machine: unknown machine policy name(s) ['nope']"),
        ([], lambda d: d.assign(size=-d["size"]), "test.parquet: column 'size': 50 value(s) not > 0"),
        ([], lambda d: d.drop(columns="intensity"), "test.parquet: missing column(s) intensity"),
    ],
)
def test_simulate_rejects_bad_input_with_one_line_and_no_artifact(tmp_path, overrides, mutate, expected):
    wd = _workload_dir(tmp_path, mutate)
    traces = tmp_path / "traces"
    r = run_stage("simulate", f"paths.workload_dir={wd}", f"paths.traces_dir={traces}",
                  f"hydra.run.dir={tmp_path}", *overrides)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], r.stderr
    assert not traces.exists() and not list(tmp_path.glob(".traces*"))


def test_simulate_one_policy_from_the_policy_group(tmp_path):
    wd = _workload_dir(tmp_path)
    traces = tmp_path / "traces"
    r = run_stage("simulate", "policy=greedy", f"paths.workload_dir={wd}", f"paths.traces_dir={traces}",
                  f"hydra.run.dir={tmp_path}")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in traces.iterdir()) == ["dispatch.json", "greedy.parquet", "lower_bound.json"]
    assert (pd.read_parquet(traces / "greedy.parquet")["policy"] == "greedy").all()


@pytest.mark.parametrize("override", ["experiment=tiyn", "hparams_search=nope", "workload=defualt"])
def test_a_misspelled_group_option_fails_with_one_line(tmp_path, override):
    group, option = override.split("=")
    r = run_stage("generate", override, f"hydra.run.dir={tmp_path}")
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {override}: unknown option of config group '{group}'; known: ")


@pytest.mark.parametrize("override, expected", [
    ("workload.rate=-1", "rate"), ("workload.intensity_range=[0.5,0.1]", "intensity_range"), ("cluster.n_gpus=0", "n_gpus"),
])
def test_the_check_stage_refuses_bad_settings_before_anything_runs(tmp_path, override, expected):
    r = run_stage("check", override, f"paths.metrics_dir={tmp_path}", f"hydra.run.dir={tmp_path}", "tracking.enabled=false")
    assert r.returncode == 1, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], r.stderr
    assert not (tmp_path / "config_check.json").exists()
    ok = run_stage("check", f"paths.metrics_dir={tmp_path}", f"hydra.run.dir={tmp_path}", "tracking.enabled=false")
    assert ok.returncode == 0, ok.stderr
