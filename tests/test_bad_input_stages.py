"""Bad inputs around the stages themselves: Hydra override errors in one line, a
multirun validated whole before it runs, an unwritable metrics/ in one line, and the temp
folders of a killed run removed by the next one."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

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
    """`-m policy=eft,nosuch` fails on nosuch before any job simulates eft."""
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
    """The data/.workload.* temp folders a killed generate leaves are removed by the next run."""
    target = tmp_path / "workload"
    dead = tmp_path / ".workload.tmp-999999999-abcd"      # pid that does not exist
    legacy = tmp_path / ".workload._k2b9x1q"               # an mkdtemp name (8 characters)
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


def test_generate_refuses_a_plus_added_key(tmp_path):
    """`python -m stages.generate +workload.rte=5` fails in one line instead of ignoring the key:
    every stage checks every setting first."""
    r = _stage("generate", "+workload.rte=5", f"hydra.run.dir={tmp_path}", f"paths.workload_dir={tmp_path / 'w'}",
               f"paths.metrics_dir={tmp_path / 'm'}")
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: workload.rte: unknown setting (no stage reads it); "), r.stderr
    assert not (tmp_path / "w").exists()


def _in_process(stage, *overrides: str):
    """Run ``stage`` through stages.common.run_stage in this process: (exit code, stderr line)."""
    from stages.common import run_stage

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=["tracking.enabled=false", *overrides])
    with pytest.raises(SystemExit) as e:
        run_stage(stage, cfg)
    return e.value.code


def test_generate_refuses_text_for_time_compression(tmp_path, capsys):
    """`workload.time_compression=fast` is one line naming the setting, not a ValueError in generate."""
    code = _in_process("generate", "workload=alibaba_gpu_2023", "workload.time_compression=fast",
                       f"paths.workload_dir={tmp_path / 'w'}", f"paths.metrics_dir={tmp_path / 'm'}")
    assert code == 1
    assert capsys.readouterr().err.strip() == "error: workload.time_compression: must be a number > 0, got 'fast'"
    assert not (tmp_path / "w").exists()


def test_fgd_atc23_refuses_a_bad_coverage_before_its_workers_start(tmp_path, capsys):
    """`fgd.policies.fgd.coverage=2` raised in the worker processes, with their tracebacks."""
    from stages.fgd_atc23 import fgd_atc23

    code = _in_process(fgd_atc23, "fgd.policies.fgd.coverage=2", f"paths.metrics_dir={tmp_path}")
    assert code == 1
    assert capsys.readouterr().err.strip() == "error: fgd.policies.fgd.coverage: must be a number in (0, 1], got 2"
    assert not list(tmp_path.iterdir())


def test_fgd_atc23_names_fgd_pod_list_when_it_is_missing(tmp_path, capsys):
    """It named workload.path, the cluster kind's setting."""
    from stages.fgd_atc23 import fgd_atc23

    missing = tmp_path / "nope.csv"
    code = _in_process(fgd_atc23, f"fgd.pod_list={missing}", f"paths.metrics_dir={tmp_path / 'm'}")
    assert code == 1
    line = capsys.readouterr().err.strip().removeprefix("error: ").replace(str(missing), "FILE")
    assert line == ("fgd.pod_list: file 'FILE' not found (the public traces are under paths.traces or "
                    "$HYBRIDSCHED_TRACES, see docs/traces.md)")
    assert_documented(line)
