"""Big inputs: a workload file's memory is estimated from its size before it is read, every
estimate keeps a margin below the available memory (or a container's limit), and train_rf's
forest is fitted on a bounded sample.  Small fake budgets ($HYBRIDSCHED_MEMORY_BYTES) stand
in for big files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hybridsched.devices import Cluster
from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.features import task_features
from hybridsched.kinds.machine.runtime_model import train_runtime_model
from hybridsched.kinds.machine.sim import task_matrix
from hybridsched.settings_schema import available_memory, cgroup_memory_room, check_settings, file_rows
from tests.bad_input_catalogue import assert_documented, assert_one_plain_line
from tests.conftest import small_workload
from tests.runs import compose_run

HEADER = "task_id,arrival,size,intensity,memory_mb\n"


def task_csv(path: Path, rows: int) -> Path:
    """A machine task file of ``rows`` rows (its values do not matter to the estimate)."""
    path.write_text(HEADER + "".join(f"{i},{i * 0.5},{100 + i % 7},0.5,{1000 + i % 13}\n" for i in range(rows)))
    return path


def test_csv_rows_are_estimated_from_the_file_size(tmp_path):
    assert file_rows(str(task_csv(tmp_path / "small.csv", 1000))) == 1000  # whole file in the sample
    big = file_rows(str(task_csv(tmp_path / "big.csv", 20_000)))  # > 64 KiB: estimated
    assert big is not None and abs(big - 20_000) < 2_000  # later lines are longer here
    assert file_rows(str(tmp_path / "missing.csv")) is None


def test_a_workload_file_too_big_for_memory_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = task_csv(tmp_path / "tasks.csv", 1000)
    monkeypatch.setenv("HYBRIDSCHED_MEMORY_BYTES", str(8 * 2**20))
    with pytest.raises(HybridschedError) as e:
        check_settings(compose_run("workload=file", f"workload.path={path}").cfg)
    message = str(e.value).replace(str(path), "FILE")
    assert message == ("workload.path='FILE' (about 1000 rows): needs about 9.1 MiB of memory, more than the "
                       "5.6 MiB usable (70% of the 8.0 MiB available); use a smaller file")
    assert_one_plain_line(message)
    assert_documented(message)
    monkeypatch.setenv("HYBRIDSCHED_MEMORY_BYTES", str(128 * 2**20))
    check_settings(compose_run("workload=file", f"workload.path={path}").cfg)  # fits


def test_a_stages_own_preflight_opens_no_workload_file(tmp_path, monkeypatch):
    """A stage may read only its declared deps: the file estimate is the check stage's (which
    declares the traces), not every stage's preflight."""
    cfg = compose_run("workload=file", f"workload.path={task_csv(tmp_path / 'big.csv', 6000)}").cfg
    monkeypatch.setenv("HYBRIDSCHED_MEMORY_BYTES", str(70 * 2**20))  # room for all but the file
    with pytest.raises(HybridschedError, match="^workload.path="):
        check_settings(cfg)
    check_settings(cfg, read_files=False)


def test_an_estimate_just_under_the_available_memory_is_refused(monkeypatch):
    """serving.max_batch=100000000 needs about 17.9 GiB: refused with 20 GiB available."""
    monkeypatch.setenv("HYBRIDSCHED_MEMORY_BYTES", str(20 * 2**30))
    with pytest.raises(HybridschedError) as e:
        check_settings(compose_run("workload=serving", "serving.max_batch=100000000").cfg)
    assert str(e.value) == ("serving.max_batch=100000000: needs about 17.9 GiB of memory, more than the 14.0 GiB "
                            "usable (70% of the 20.0 GiB available); use a smaller value")
    assert_documented(str(e.value))


def test_a_container_limit_counts_as_available_memory(tmp_path, monkeypatch):
    (tmp_path / "memory.max").write_text(f"{8 * 2**30}\n")
    (tmp_path / "memory.current").write_text(f"{2**30}\n")
    assert cgroup_memory_room(str(tmp_path)) == 7 * 2**30
    (tmp_path / "memory.max").write_text("max\n")
    assert cgroup_memory_room(str(tmp_path)) is None
    assert cgroup_memory_room(str(tmp_path / "none")) is None
    monkeypatch.delenv("HYBRIDSCHED_MEMORY_BYTES", raising=False)
    import hybridsched.settings_schema as schema

    monkeypatch.setattr(schema, "cgroup_memory_room", lambda: 2**30)
    assert available_memory() <= 2**30


RF = {"model": "random_forest", "seed": 0, "test_fraction": 0.25, "importance_repeats": 0,
      "random_forest": {"n_estimators": 5, "max_depth": 6, "min_samples_leaf": 3, "n_jobs": 1}}


def test_train_rf_fits_a_bounded_sample_and_says_so(capsys):
    cluster = Cluster()
    X = task_matrix(small_workload(400, seed=1, rate=6.0), cluster)
    model, metrics = train_runtime_model(X, cluster, {**RF, "max_train_rows": 100})
    assert metrics["n_train"] == 100 and metrics["sampled_from"] == 300 and metrics["n_test"] == 100
    assert capsys.readouterr().out == "rf: fitting on a sample of 100 of 300 training tasks (rf.max_train_rows=100)\n"
    assert model.config["max_train_rows"] == 100
    # under the bound: the whole split, and the recorded config as without the setting
    model, metrics = train_runtime_model(X, cluster, {**RF, "max_train_rows": 300})
    assert metrics["n_train"] == 300 and "sampled_from" not in metrics and "max_train_rows" not in model.config
    assert capsys.readouterr().out == ""
    same, _ = train_runtime_model(X, cluster, RF)
    F = task_features(X)
    np.testing.assert_array_equal(model.predict_log(F), same.predict_log(F))


def _outcome(report: dict) -> list[tuple]:
    return [(e["check"], e["success"], e["unexpected_count"]) for e in report["expectations"]]


def test_validation_in_slices_finds_what_the_whole_table_check_finds(monkeypatch):
    """A long table is checked a slice at a time (bounded memory); a duplicate id in two
    slices and an arrival that goes back across a slice boundary are still found."""
    from hybridsched import validation as runner
    from hybridsched.kinds.machine.validation import validate_frame

    good = small_workload(120, seed=3, dag_job_size=4).to_frame()
    bad = good.copy()
    bad.loc[100, "task_id"] = bad.loc[10, "task_id"]  # slices of 50 rows: rows 10 and 100 apart
    bad.loc[50, "arrival"] = bad.loc[49, "arrival"] - 1.0  # back in time at the boundary
    whole = {n: validate_frame(df, n, 64000.0) for n, df in (("good", good), ("bad", bad))}
    monkeypatch.setattr(runner, "CHUNK_ROWS", 50)
    for name, df in (("good", good), ("bad", bad)):
        sliced = validate_frame(df, f"{name}-sliced", 64000.0)
        assert _outcome(sliced) == _outcome(whole[name])
        assert (sliced["success"], sliced["n_rows"], sliced["n_failed"]) == (
            whole[name]["success"], whole[name]["n_rows"], whole[name]["n_failed"])
    assert not whole["bad"]["success"] and whole["good"]["success"]
