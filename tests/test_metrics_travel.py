"""Metrics travel with the commit: a fresh clone, before any run, shows the committed metrics,
and `dvc metrics diff` between two commits shows what changed (DVC's example-get-started)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DVC = shutil.which("dvc") or str(ROOT / ".venv" / "bin" / "dvc")


def _run(*cmd: str, cwd: Path) -> str:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, f"{cmd}: {r.stderr[-1500:]}"
    return r.stdout


@pytest.mark.skipif(not (ROOT / ".git").exists() or not Path(DVC).exists(), reason="needs the git checkout and dvc")
def test_a_fresh_clone_shows_and_diffs_the_committed_metrics(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    _run("git", "clone", "-q", str(ROOT), str(clone), cwd=tmp_path)
    shown = json.loads(_run(DVC, "metrics", "show", "--json", cwd=clone))
    files = next(iter(shown.values()))["data"]
    summary = files["metrics/summary.json"]["data"]
    assert summary["kind"] == "machine" and summary["policies"]["eft"]["mean_latency"] > 0
    # a commit that changes a metric: the diff names it with both values
    path = clone / "metrics" / "summary.json"
    data = json.loads(path.read_text())
    old = data["policies"]["eft"]["mean_latency"]
    data["policies"]["eft"]["mean_latency"] = old * 2
    path.write_text(json.dumps(data))
    _run("git", "commit", "-qam", "change a metric", cwd=clone)
    diff = json.loads(_run(DVC, "metrics", "diff", "HEAD~1", "--json", cwd=clone))
    change = diff["metrics/summary.json"]["policies.eft.mean_latency"]
    assert change["old"] == pytest.approx(old) and change["new"] == pytest.approx(2 * old)
