"""Issue 26's bad inputs around the stages themselves: Hydra override errors in one line, a
multirun validated whole before it runs, an unwritable metrics/ in one line, and the temp
folders of a killed run removed by the next one."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from hybridsched.io import atomic_dir
from tests.bad_input_catalogue import assert_documented, assert_one_plain_line
from tests.runs import CONF, ROOT


def _stage(name: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'src'}"}
    return subprocess.run([sys.executable, "-m", f"stages.{name}", *args, "hydra.output_subdir=null",
                           "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("override, message", [
    ("workload.rte=5", "Could not override 'workload.rte'; To append to your config use +workload.rte=5; "
                       "Key 'rte' is not in struct"),
    ("workload.rate=[1,2", "no viable alternative at input '[1,2'"),
])
def test_a_hydra_override_error_is_one_line(tmp_path, override, message):
    """Hydra printed five lines (the message, its details, the HYDRA_FULL_ERROR advice)."""
    r = _stage("generate", override, f"hydra.run.dir={tmp_path}")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [f"error: {message}"], r.stderr
    assert_documented(message)


def test_a_multirun_is_validated_whole_before_any_job_runs(tmp_path):
    """`-m policy=eft,nosuch` used to simulate eft and then fail on nosuch."""
    sweep = tmp_path / "sweep"
    r = _stage("simulate", "-m", "policy=eft,nosuch", "workload.n_test=20", f"hydra.sweep.dir={sweep}")
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: sweep job policy=nosuch workload.n_test=20: policy: unknown machine policy name(s) ['nosuch']; "
        "known: "), r.stderr
    assert lines[0].endswith(" (nothing of the sweep ran)")
    assert not sweep.exists(), "a job ran before the sweep was refused"


def test_an_unwritable_metrics_dir_is_one_line(tmp_path, capsys):
    """A read-only metrics/ raised PermissionError with a traceback."""
    from stages.common import run_stage

    def writes(run):  # noqa: ANN001
        raise PermissionError(errno.EACCES, "Permission denied", "metrics/config_check.json")

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=["tracking.enabled=false"])
    with pytest.raises(SystemExit) as e:
        run_stage(writes, cfg)
    assert e.value.code == 1
    line = capsys.readouterr().err.strip()
    assert line == "error: metrics/config_check.json: cannot write (Permission denied)"
    assert_one_plain_line(line)
    assert_documented(line.removeprefix("error: "))


def test_a_killed_runs_temp_folders_are_removed_by_the_next_run(tmp_path):
    """A killed generate left data/.workload._* behind that nothing removed."""
    target = tmp_path / "workload"
    dead = tmp_path / ".workload.tmp-999999999-abcd"      # pid that does not exist
    legacy = tmp_path / ".workload._k2b9x1q"               # the old mkdtemp name (8 characters)
    live = tmp_path / f".workload.tmp-{os.getpid()}-live"  # a run still going: left alone
    for d in (dead, legacy, live):
        d.mkdir()
        (d / "train.parquet").write_bytes(b"half")
    with atomic_dir(target) as tmp:
        (tmp / "x").write_text("x")
    assert not dead.exists() and not legacy.exists()
    assert live.exists()
    assert (target / "x").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "workload"])
