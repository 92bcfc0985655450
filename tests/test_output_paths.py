"""Output folders that name an existing file are refused before anything is written, and an
unwritable output is reported by the file the user knows, not by its hidden temp name."""

from __future__ import annotations

import errno
import tempfile

import pytest
from hydra import compose, initialize_config_dir

from hybridsched.errors import HybridschedError
from hybridsched.io import atomic_dir, atomic_path, check_output_dir, staged_files, write_json
from tests.bad_input_catalogue import as_documented, assert_documented, assert_one_plain_line
from tests.runs import CONF


def _refused(stage: str, capsys: pytest.CaptureFixture[str], *overrides: str) -> str:
    """Run ``stage`` in this process through run_stage; its one error line (exit code 1 asserted)."""
    from stages.common import run_stage

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=["tracking.enabled=false", *overrides])
    with pytest.raises(SystemExit) as e:
        run_stage(stage, cfg)
    assert e.value.code == 1
    line = capsys.readouterr().err.strip()
    assert_one_plain_line(line)
    return line.removeprefix("error: ")


@pytest.mark.parametrize("stage, setting", [
    ("generate", "paths.workload_dir"),
    ("train_rf", "rf.model_dir"),
    ("train_cem", "cem.model_dir"),
    ("evaluate", "paths.metrics_dir"),
])
def test_an_output_folder_naming_an_existing_file_is_refused(tmp_path, capsys, stage, setting):
    """`paths.workload_dir=README.md` replaced README.md with a folder (keeping it only as
    `.README.md.old`) and exited 0; `rf.model_dir=Makefile` did the same."""
    victim = tmp_path / "README.md"
    victim.write_text("keep me\n")
    others = {"paths.workload_dir": tmp_path / "w", "paths.metrics_dir": tmp_path / "m", "rf.model_dir": tmp_path / "rf",
              "cem.model_dir": tmp_path / "cem"}
    overrides = [f"{k}={victim if k == setting else v}" for k, v in others.items()]
    line = _refused(stage, capsys, *overrides)
    assert line == f"{setting}: {victim} is an existing file, not a folder (a stage writes a folder there; choose another path)"
    assert_documented(as_documented(line, victim).replace(setting, "paths.workload_dir"))
    assert victim.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"], "something was written"


def test_an_output_folder_under_an_existing_file_is_refused(tmp_path, capsys):
    """`paths.workload_dir=README.md/w` ended in a NotADirectoryError traceback (or wrote into
    the folder that replaced README.md)."""
    victim = tmp_path / "README.md"
    victim.write_text("keep me\n")
    line = _refused("generate", capsys, f"paths.workload_dir={victim / 'w'}", f"paths.metrics_dir={tmp_path / 'm'}")
    assert line == (f"paths.workload_dir: {victim / 'w'} lies under {victim}, an existing file, not a folder "
                    f"(a stage writes a folder there; choose another path)")
    assert_documented(as_documented(line, victim))
    assert victim.read_text() == "keep me\n"


def test_check_output_dir(tmp_path):
    """The helper every writer of io.py calls: folders (existing or not) pass, files do not."""
    f = tmp_path / "f.txt"
    f.write_text("x")
    check_output_dir(tmp_path)
    check_output_dir(tmp_path / "new" / "deeper")
    with pytest.raises(HybridschedError, match=r"^out\.dir: .*f\.txt is an existing file"):
        check_output_dir(f, "out.dir")
    with pytest.raises(HybridschedError, match=r"f\.txt/sub lies under .*f\.txt, an existing file"):
        check_output_dir(f / "sub")
    # the writers refuse without the setting's name (a folder no setting names), the file intact
    for writer in (lambda: atomic_dir(f), lambda: staged_files(f), lambda: atomic_path(f / "x.json")):
        with pytest.raises(HybridschedError, match="an existing file, not a folder"), writer():
            pass
    assert f.read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


def test_an_unwritable_metrics_file_names_the_file_not_its_temp_name(tmp_path, monkeypatch, capsys):
    """A read-only metrics/ said `metrics/.config_check.json.k2j4x9.json: cannot write`: the
    hidden temp file mkstemp tried to create."""
    from stages.common import run_stage

    metrics = tmp_path / "metrics"
    metrics.mkdir()

    def read_only(prefix: str = "", suffix: str = "", dir: str = "", **kw: object) -> tuple[int, str]:  # noqa: A002
        raise PermissionError(errno.EACCES, "Permission denied", f"{dir}/{prefix}k2j4x9{suffix}")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=["tracking.enabled=false"])
    with pytest.raises(SystemExit):
        run_stage(lambda run: write_json(metrics / "config_check.json", {"ok": True}), cfg)
    line = capsys.readouterr().err.strip().removeprefix("error: ")
    assert line == f"{metrics}/config_check.json: cannot write (Permission denied)"
    assert_documented(line.replace(f"{tmp_path}/", ""))


def test_an_unwritable_file_in_the_working_folder_names_the_file(tmp_path, monkeypatch):
    """A relative target in the current folder: mkstemp names its temp file ./.x.json.XXXX.json."""
    monkeypatch.chdir(tmp_path)

    def read_only(prefix: str = "", suffix: str = "", dir: str = "", **kw: object) -> tuple[int, str]:  # noqa: A002
        raise PermissionError(errno.EACCES, "Permission denied", f"./{prefix}k2j4x9{suffix}")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.raises(PermissionError) as e:
        write_json("x.json", {})
    assert e.value.filename == "x.json"


@pytest.mark.parametrize("writer", ["atomic_path", "atomic_dir", "staged_files"])
def test_a_failed_write_names_the_target_not_the_temp(tmp_path, writer):
    """A full disk while writing the temp file (or folder) names the target."""
    target = tmp_path / "out.csv"
    ctx = {"atomic_path": atomic_path, "atomic_dir": atomic_dir, "staged_files": staged_files}[writer]
    with pytest.raises(OSError) as e, ctx(target) as tmp:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp / "a.csv" if tmp.is_dir() else tmp))
    inside = "" if writer == "atomic_path" else "/a.csv"
    assert e.value.filename == f"{target}{inside}"
    assert e.value.filename2 is None
