"""``hybridsched compare``: the headline of revisions side by side, read through DVC."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hybridsched.cli import main
from hybridsched.compare import compare_table
from hybridsched.errors import HybridschedError


def _head(best: str, value: float, bound: float = 0.5) -> dict:
    entry = {"policy": best, "mean_latency": value, "vs_bound": value / bound}
    return {"metric": "mean_latency", "higher_is_better": False, "bound": bound, "best": entry, "late": entry}


def test_the_table_has_a_column_per_revision_and_a_row_per_entry():
    text = compare_table({"workspace": _head("rollout_late", 0.66), "HEAD": _head("eft_late", 0.71)})
    assert text.splitlines()[0] == "mean_latency (lower is better)"
    assert "| | workspace | HEAD |" in text
    assert "| best | rollout_late 0.66 (×1.32) | eft_late 0.71 (×1.42) |" in text
    assert "| bound | 0.5 | 0.5 |" in text
    assert "| arrival |" not in text  # no revision has that entry


def test_revisions_of_different_kinds_are_refused():
    other = {**_head("fifo", 0.9), "metric": "slo_attainment"}
    with pytest.raises(HybridschedError, match="rank on different metrics"):
        compare_table({"a": _head("eft", 1.0), "b": other})


def test_the_command_compares_the_workspace_with_a_commit_and_names_a_bad_revision(tmp_path, monkeypatch, capsys):
    def sh(*cmd: str) -> None:
        subprocess.run(cmd, cwd=tmp_path, check=True, capture_output=True)

    sh("git", "init", "-q")
    sh("git", "config", "user.email", "t@example.org")
    sh("git", "config", "user.name", "t")
    sh(sys.executable, "-m", "dvc", "init", "-q")  # the venv's DVC, whatever PATH holds
    (tmp_path / "metrics").mkdir()
    path = tmp_path / "metrics" / "headline.json"
    path.write_text(json.dumps({"headline": _head("eft_late", 0.71)}))
    sh("git", "add", "-A")
    sh("git", "commit", "-qm", "baseline")
    path.write_text(json.dumps({"headline": _head("rollout_late", 0.66)}))
    monkeypatch.chdir(tmp_path)
    assert main(["compare", "workspace", "HEAD"]) == 0  # the documented command (the default revisions)
    assert "| best | rollout_late 0.66 (×1.32) | eft_late 0.71 (×1.42) |" in capsys.readouterr().out
    assert main(["compare", "nosuch"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("hybridsched compare: nosuch: no metrics/headline.json (") and "\n" not in err
