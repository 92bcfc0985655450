"""The results stages: another kind's pipeline in a scratch folder, its tables kept whole."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from stages.results import HYDRA, KEPT, ORDER

ROOT = Path(__file__).resolve().parents[1]
# the kind switch's small sizes (a 300-pod slice, tiny searches)
from tests.test_kind_switch import TINY  # noqa: E402


def results(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    """``python -m stages.results`` from the project root, writing under ``tmp_path/m``."""
    return subprocess.run([sys.executable, "-m", "stages.results", *HYDRA, *overrides, f"paths.metrics_dir={tmp_path / 'm'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1800)


def workspace_files() -> dict[str, float]:
    """Path -> modification time of everything under the workspace's data/, models/, metrics/."""
    return {str(p): p.stat().st_mtime for d in ("data", "models", "metrics") if (ROOT / d).exists()
            for p in (ROOT / d).rglob("*")}


@pytest.mark.slow
def test_the_cluster_kind_runs_in_a_scratch_folder_and_keeps_its_tables(tmp_path):
    before = workspace_files()
    r = results(tmp_path, "workload=alibaba_gpu_2023", *TINY)
    assert r.returncode == 0, r.stderr[-3000:]
    out = tmp_path / "m" / "results" / "cluster"
    assert sorted(p.name for p in out.iterdir()) == sorted([*KEPT, "headline.png"])
    head = json.loads((out / "headline.json").read_text())["headline"]
    table = pd.read_csv(out / "policies.csv")
    assert head["metric"] == "mean_latency" and head["best"]["policy"] in set(table["policy"])
    assert {"eft", "fgd", "oracle", "learned_queue"} <= set(table["policy"])
    assert workspace_files() == before  # nothing of the workspace's data/, models/ or metrics/ touched


def test_a_failing_stage_ends_it_with_that_stages_line_and_writes_nothing(tmp_path):
    # a missing pod list: only the check stage opens the files (this stage checks the values)
    r = results(tmp_path, "workload=alibaba_gpu_2023", f"workload.path={tmp_path / 'absent.csv'}")
    assert r.returncode == 1
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("error: results: the check stage of the cluster kind failed: error: workload.path"), line
    assert not (tmp_path / "m" / "results").exists()


def test_the_order_runs_each_stage_after_the_stages_it_reads_from():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert set(ORDER) == {n for n in stages if n not in ("scenarios", "fgd_atc23") and not n.startswith("results_")}

    def outs(name: str) -> list[str]:
        return [next(iter(o)) if isinstance(o, dict) else o for o in stages[name].get("outs", [])]

    for i, name in enumerate(ORDER):
        for dep in stages[name].get("deps", []):
            makers = [m for m in ORDER if any(dep == o or dep.startswith(o + "/") for o in outs(m))]
            assert all(ORDER.index(m) < i for m in makers), f"{name} reads {dep}, made by {makers} after it"
