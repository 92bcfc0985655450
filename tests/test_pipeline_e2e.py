"""End to end: the DVC pipeline on the tiny experiment, in a fresh git copy of the project.

Checks that `dvc repro` runs every stage, that a second `dvc repro` does nothing, and that
`dvc exp run -S workload.intensity_range=[0.1,0.3]` changes metrics that `dvc metrics diff` shows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
# the copy lives in a temp dir, away from ../shared: point paths.traces at the real folder
TRACES = {"HYBRIDSCHED_TRACES": os.environ.get("HYBRIDSCHED_TRACES", str(ROOT.parent / "shared" / "traces"))}


def sh(*cmd: str, cwd: Path) -> str:
    env = {**os.environ, **TRACES, "DVC_NO_ANALYTICS": "1", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A git repo holding the project's files (tracked and new, not ignored), as a clone would."""
    dst = tmp_path_factory.mktemp("clone")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dst / f)
    template = ROOT / ".dvc" / "offline_plots.html"  # built by make, git-ignored
    if template.exists():
        shutil.copy2(template, dst / ".dvc" / template.name)
    from dvc.utils.hydra import compose_and_dump

    compose_and_dump(str(dst / "params.yaml"), str(dst / "conf"), None, "config", str(dst),
                     ["experiment=tiny", f"paths.traces={TRACES['HYBRIDSCHED_TRACES']}"])
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tiny"]):
        sh(*cmd, cwd=dst)
    return dst


def test_repro_runs_every_stage_then_nothing(project):
    sh("dvc", "repro", cwd=project)
    summary = json.loads((project / "metrics" / "summary.json").read_text())
    pol = summary["policies"]
    for name in ("round_robin", "random", "greedy", "eft", "oracle"):
        assert name in pol
    for name, m in pol.items():
        assert summary["lower_bound"]["makespan"] <= m["makespan"] + 1e-9, name
        assert summary["lower_bound"]["mean_latency"] <= m["mean_latency"] + 1e-9, name
    for png in ("latency_cdf.png", "utilisation.png", "energy_cost.png"):
        assert (project / "metrics" / "plots" / png).stat().st_size > 1000
    # every machine policy ran, each in its own dispatch mode
    params = yaml.safe_load((project / "params.yaml").read_text())
    assert list(pol) == list(params["policies"]["machine"])
    assert {m["dispatch"] for m in pol.values()} == {"arrival", "ordered", "late"}
    assert {pol[n]["dispatch"] for n in ("rollout_late", "pg_late", "eft_spt", "eft")} == {"late", "ordered", "arrival"}
    # every file a policy reads (a model, tuned weights) was made by a stage of this fresh clone
    read = {str(v) for spec in params["policies"]["machine"].values() for k, v in _leaves(spec) if k in ("model_dir", "tuned")}
    outs = [o for st in yaml.safe_load((project / "dvc.lock").read_text())["stages"].values() for o in st.get("outs", [])]
    for path in sorted(read):
        assert (project / path).exists(), path
        assert any(path == o["path"] or path.startswith(o["path"] + "/") for o in outs), f"{path}: no stage makes it"
    again = sh("dvc", "repro", cwd=project)
    assert "Data and pipelines are up to date" in again


def _leaves(node, key=None):
    """(key, value) of every leaf of a nested config node."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, k)
    else:
        yield key, node


def test_exp_run_on_another_workload_retunes_retrains_and_shows_in_metrics_diff(project):
    """`dvc exp run -S workload=bursty` (at a lower intensity): the heuristics are retuned and the late policies
    retrained on the new workload, and `dvc metrics diff` / `dvc exp show` put the new figures
    and tuned values beside the baseline's."""
    sh("dvc", "repro", cwd=project)
    sh("git", "add", "-A", cwd=project)
    sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "baseline", "--allow-empty", cwd=project)
    ran = sh("dvc", "exp", "run", "-S", "experiment=tiny", "-S", "workload=bursty", "-S", "workload.intensity_range=[0.1,0.3]",
             cwd=project)
    for stage in ("generate", "tune_heuristics", "train_late", "simulate"):
        assert f"Running stage '{stage}'" in ran, stage
    diff = json.loads(sh("dvc", "metrics", "diff", "--json", cwd=project))
    changed = diff["metrics/summary.json"]
    assert changed["policies.eft.mean_latency"]["diff"] != 0
    assert changed["policies.rollout_late.mean_latency"]["diff"] != 0
    assert diff["metrics/tune_heuristics.json"]["policies.eft_late.default"]["diff"] != 0
    assert diff["metrics/train_late.json"]["policies.pg_late.validation"]["diff"] != 0
    shown = sh("dvc", "exp", "show", "--csv", "--only-changed", cwd=project).splitlines()
    assert "policies.eft_late.params.beta_cpu" in shown[0].split(",") and len(shown) >= 3


def test_plots_diff_report_renders_offline_in_headless_chromium(project, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no chromium (make test installs Debian's chromium where it can)")
    if not (project / ".dvc" / "offline_plots.html").exists():
        pytest.skip("offline template not built (run make)")
    sh("dvc", "repro", cwd=project)
    sh("dvc", "plots", "diff", "-o", str(tmp_path / "report"), cwd=project)
    page = (tmp_path / "report" / "index.html").read_text()
    assert "cdn.jsdelivr" not in page and "vega@5.20.2" in page
    r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=15000", "--dump-dom",
                        (tmp_path / "report" / "index.html").as_uri()],
                       capture_output=True, text=True, timeout=120)
    dom = r.stdout
    # vega-embed turns each plot's div into a rendered chart (a canvas or svg with class "marks")
    n_charts = dom.count('class="marks"')
    n_specs = page.count("vegaEmbed(")
    assert n_specs >= 3 and n_charts == n_specs, (n_charts, n_specs, r.stderr[-1000:])
