"""Settings and files that were accepted but crashed or misled later: each is refused (or
warned about) in one line.  Tracking URIs, the cluster's noise, node lists, replay traces, a
full disk, Ctrl-C and an old experiment name."""

from __future__ import annotations

import errno
import os
import pathlib
import time

import pytest
from hydra import compose, initialize_config_dir

from hybridsched.errors import HybridschedError
from hybridsched.io import write_json
from hybridsched.settings_schema import check_settings
from hybridsched.tracking import log_run
from stages.common import INTERRUPTED, run_stage
from tests.bad_input_catalogue import as_documented, assert_documented, assert_refused
from tests.runs import CONF, compose_run

NODES = "sn,cpu_milli,memory_mib,gpu,model\n"


# --- MLflow tracking: a bad URI is one warning line, in seconds --------------------------


@pytest.mark.parametrize("uri, expected", [
    ("foo://x", "warning: MLflow tracking of stage 'train_rf' skipped: MLFLOW_TRACKING_URI 'foo://x': unknown "
                "scheme 'foo' (use a folder or a file://, http://, https://, sqlite://, postgresql://, mysql:// URI); "
                "the stage's outputs are written"),
    ("http://127.0.0.1:1", "warning: MLflow tracking of stage 'train_rf' skipped: cannot reach the MLflow tracking "
                           "server at 127.0.0.1:1 (Connection refused); the stage's outputs are written"),
])
def test_a_bad_tracking_uri_is_one_warning_line_in_seconds(monkeypatch, capsys, uri, expected):
    """An unknown scheme was a 65-line traceback; an unreachable server retried for minutes."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    t0 = time.perf_counter()
    assert log_run("train_rf", {"a": 1}, {"m": 1.0}) is None
    assert time.perf_counter() - t0 < 10
    err = capsys.readouterr().err
    assert err == expected + "\n"
    assert_documented(expected.removeprefix("warning: "))


# --- settings and input files ---------------------------------------------------------


def test_a_noise_sigma_that_zeroes_every_run_time_isassert_refused():
    """cluster.noise_sigma=1000 gave exit 0 with every latency 0.0."""
    with pytest.raises(HybridschedError) as e:
        check_settings(compose_run("cluster.noise_sigma=1000").cfg)
    assert str(e.value) == "cluster.noise_sigma: must be a number in [0, 3], got 1000"
    assert_documented(str(e.value))
    check_settings(compose_run("cluster.noise_sigma=3").cfg)


def test_a_node_list_without_gpus_isassert_refused(tmp_path):
    """It crashed evaluate with a ZeroDivisionError."""
    from hybridsched.kinds.cluster.trace import read_node_list

    path = tmp_path / "nodes.csv"
    path.write_text(NODES + "n0,32000,262144,0,\nn1,64000,262144,0,\n")
    assert_refused(lambda: read_node_list(path), path,
             "FILE: no node has a GPU (gpu = 0 on all 2 rows); the cluster kind needs at least one GPU node")


def test_repeated_node_names_areassert_refused(tmp_path):
    from hybridsched.kinds.cluster.trace import read_node_list

    path = tmp_path / "nodes.csv"
    path.write_text(NODES + "n0,32000,262144,8,G2\nn1,64000,262144,0,\nn0,96000,786432,8,G2\n")
    assert_refused(lambda: read_node_list(path), path,
             "FILE: column 'sn', row 3 (line 4): node name 'n0' repeats row 1; node names must be unique")


def test_a_replay_trace_whose_times_are_all_equal_isassert_refused(tmp_path):
    """It was replayed as a uniform stream at workload.rate without a word."""
    from hybridsched.kinds.serving.workload import read_arrival_trace

    path = tmp_path / "trace.csv"
    path.write_text("TIMESTAMP,ContextTokens\n" + "2023-11-16 18:15:46,100\n" * 3)
    assert_refused(lambda: read_arrival_trace(path, "TIMESTAMP", "ContextTokens"), path,
             "FILE: every TIMESTAMP is the same (2023-11-16 18:15:46), so there are no gaps to replay; "
             "use a trace whose times differ, or workload.arrival=poisson")


def test_the_old_experiment_name_fgd_atc23_selects_the_default_pipeline():
    """`experiment=fgd_atc23` was DVC's 9-line 'Could not find' error (the same composition)."""
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        assert compose(config_name="config", overrides=["experiment=fgd_atc23"]) == compose(config_name="config")


# --- the stage runner: a full disk, Ctrl-C --------------------------------------------


def _cfg():
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return compose(config_name="config")


def test_a_full_disk_names_the_file(tmp_path, monkeypatch, capsys):
    """It reported `error: None: cannot write (No space left on device)`."""
    target = tmp_path / "summary.json"

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pathlib.Path, "write_text", full)
    with pytest.raises(SystemExit) as e:
        run_stage(lambda run: write_json(target, {"a": 1}), _cfg())
    assert e.value.code == 1
    line = capsys.readouterr().err
    assert line == f"error: {target}: cannot write (No space left on device)\n"
    assert_documented(as_documented(line.removeprefix("error: ").strip(), target))
    assert not list(tmp_path.iterdir())  # no half-written file, no temp file


def test_ctrl_c_is_one_line_and_exit_130(capsys):
    def interrupted(run):
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as e:
        run_stage(interrupted, _cfg())
    assert e.value.code == INTERRUPTED == 130
    assert capsys.readouterr().err == "interrupted\n"
