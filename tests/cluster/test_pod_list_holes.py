"""Cluster kind: faulty pod lists are refused or dropped and counted, never accepted silently or miscounted."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsched.errors import HybridschedError, WorkloadError
from hybridsched.kinds.cluster.runtime_model import load_pod_runtime, save_pod_runtime, train_pod_runtime
from hybridsched.kinds.cluster.trace import DROP_REASONS, read_node_list, read_pod_trace
from hybridsched.kinds.cluster.workload import load_workload
from tests.bad_input_catalogue import as_documented, assert_documented, assert_one_plain_line

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
GOOD = [
    "pod-a,4000,8192,1,1000,,LS,Running,100,700,110",
    "pod-b,2000,4096,1,250,,BE,Succeeded,200,260,200",
    "pod-c,8000,16384,0,0,,LS,Running,160,400,200",
    "pod-d,6000,8192,2,1000,V100M16,BE,Failed,300,1300,300",
]
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,8,V100M16\nn2,32000,131072,0,\n"


def write(tmp_path: Path, rows: list[str], name: str = "pods.csv", end: str = "\n") -> Path:
    p = tmp_path / name
    p.write_text("\n".join([HEADER, *rows]) + end)
    return p


def workload(tmp_path: Path, pods: Path, **kw) -> dict:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES)
    return {"name": "t", "path": str(pods), "nodes": {"path": str(nodes)}, "test_fraction": 0.5, **kw}


def test_a_pod_created_after_its_deletion_is_dropped_under_its_own_reason(tmp_path: Path) -> None:
    # kept before: duration 700 - 300 > 0, trace_wait 300 - 500 < 0
    pods, rep = read_pod_trace(write(tmp_path, [*GOOD, "pod-z,1000,1024,1,500,,BE,Failed,500,400,300"]))
    assert "pod-z" not in pods.name.tolist()
    assert rep.dropped["created_after_deleted"] == 1 and rep.dropped["deleted_before_scheduled"] == 0
    assert np.all(pods.trace_wait >= 0)


def test_a_pod_scheduled_before_its_creation_is_dropped(tmp_path: Path) -> None:
    pods, rep = read_pod_trace(write(tmp_path, [*GOOD, "pod-z,1000,1024,1,500,,BE,Failed,500,900,300"]))
    assert rep.dropped["scheduled_before_created"] == 1 and "pod-z" not in pods.name.tolist()


def test_duplicate_pod_names_are_dropped_and_counted(tmp_path: Path) -> None:
    pods, rep = read_pod_trace(write(tmp_path, [*GOOD, "pod-a,1000,1024,1,500,,BE,Running,250,400,260"]))
    assert pods.name.tolist().count("pod-a") == 1
    assert pods.duration[pods.name.tolist().index("pod-a")] == 590  # the first row is the one kept
    assert rep.dropped["duplicate_name"] == 1 and rep.duplicate_names == ["pod-a"]


def test_a_truncated_last_line_is_reported_as_truncation(tmp_path: Path) -> None:
    path = write(tmp_path, [*GOOD, "pod-z,1000,1024,1,500,,BE,Runn"], end="")  # download cut mid-line
    pods, rep = read_pod_trace(path)
    assert rep.dropped["truncated_last_line"] == 1 and rep.dropped["never_scheduled"] == 0
    assert rep.truncated_line == 6 and len(pods) == 4 and rep.rows_read == 5
    # a cut inside the resource columns is a truncation too, not an "empty value" error
    _, rep = read_pod_trace(write(tmp_path, [*GOOD, "pod-z,1000"], end=""))
    assert rep.dropped["truncated_last_line"] == 1


def test_a_short_line_inside_the_file_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, [GOOD[0], "pod-z,1000,1024", *GOOD[1:]])
    with pytest.raises(WorkloadError) as e:
        read_pod_trace(path)
    check(e, path, "FILE: line 3 has 3 of 11 fields (1 short line(s))")


def test_a_truncated_node_list_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text(NODES + "n3,32000")
    with pytest.raises(WorkloadError) as e:
        read_node_list(path)
    check(e, path, "FILE: the last line (4) is truncated (fewer fields than the header); the file is incomplete")


def check(e: pytest.ExceptionInfo, path: Path, message: str) -> None:
    got = as_documented(e.value, path)
    assert got == message
    assert_one_plain_line(got)
    assert_documented(message)


def test_an_empty_pod_list_says_no_pods(tmp_path: Path) -> None:
    path = write(tmp_path, [])
    with pytest.raises(WorkloadError) as e:
        load_workload(workload(tmp_path, path))
    check(e, path, "no pods in FILE (the file has a header and no rows)")


def test_too_few_pods_left_names_the_drops(tmp_path: Path) -> None:
    path = write(tmp_path, [GOOD[0], "pod-y,99000,1024,1,500,,BE,Running,150,400,160"])
    with pytest.raises(WorkloadError) as e:
        load_workload(workload(tmp_path, path))
    check(e, path, "FILE: only 1 of 2 pod(s) left to schedule (dropped: fits_no_sampled_node 1)")


def test_an_untimed_list_without_a_duration_names_the_setting(tmp_path: Path) -> None:
    p = tmp_path / "untimed.csv"
    p.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\npod-a,1000,1024,1,1000\npod-b,1000,1024,0,0\n")
    with pytest.raises(WorkloadError) as e:
        load_workload(workload(tmp_path, p))
    check(e, p, "FILE: no time columns (creation_time, deletion_time, scheduled_time), so no pod has a duration; "
                "set workload.untimed_duration_s (seconds every pod runs) to use it")
    train, test, _, rep = load_workload(workload(tmp_path, p, untimed_duration_s=60.0))
    assert rep["timed"] is False and np.all(train.duration == 60.0)


def test_validate_names_the_setting_for_missing_durations(tmp_path: Path) -> None:
    from hybridsched.kinds.cluster.validation import validate_pod_files
    from hybridsched.validation import failure_summary

    p = tmp_path / "untimed.csv"
    p.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\npod-a,1000,1024,1,1000\npod-b,1000,1024,0,0\n")
    pods, _ = read_pod_trace(p)  # importable without durations, not usable
    (tmp_path / "w").mkdir()
    pods.to_frame().to_parquet(tmp_path / "w" / "train.parquet")
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES)
    report = validate_pod_files({"train": tmp_path / "w" / "train.parquet"}, read_node_list(nodes))
    assert "workload.untimed_duration_s" in failure_summary(report)


# --- the import report adds up ---------------------------------------------------------------------


def assert_report_adds_up(rep: dict) -> None:
    kept = rep["rows_kept"]
    for key in ("kept_by_kind", "kept_by_qos", "kept_by_phase"):
        assert sum(rep[key].values()) == kept, (key, rep[key], kept)
    assert rep["rows_read"] == kept + sum(rep["dropped"].values()) + rep["rows_over_max_tasks"]


def test_breakdowns_sum_to_rows_kept_after_the_node_fit_drop(tmp_path: Path) -> None:
    no_fit = [f"pod-x{i},99000,1024,1,500,,BE,Running,{150 + i},400,{160 + i}" for i in range(5)]
    _, _, _, rep = load_workload(workload(tmp_path, write(tmp_path, [*GOOD, *no_fit])))
    assert rep["dropped"]["fits_no_sampled_node"] == 5 and rep["rows_kept"] == 4
    assert_report_adds_up(rep)


ROW = st.tuples(
    st.sampled_from(["pod-a", "pod-b", "pod-c", "pod-d", "pod-e"]),  # names repeat: duplicates
    st.sampled_from([1000, 99000]),  # 99000 millicores fit no node
    st.sampled_from(["LS", "BE", ""]),
    st.sampled_from(["Running", "Failed"]),
    st.integers(0, 50), st.integers(0, 50), st.one_of(st.none(), st.integers(0, 50)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(ROW, min_size=1, max_size=12), max_tasks=st.one_of(st.none(), st.integers(1, 6)))
def test_every_breakdown_sums_to_rows_kept(tmp_path: Path, rows, max_tasks) -> None:
    lines = [f"{n},{cpu},1024,1,500,,{q},{ph},{c},{d},{'' if s is None else s}" for n, cpu, q, ph, c, d, s in rows]
    path = write(tmp_path, lines)
    nodes = read_node_list(tmp_path / "nodes.csv") if (tmp_path / "nodes.csv").exists() else None
    if nodes is None:
        (tmp_path / "nodes.csv").write_text(NODES)
        nodes = read_node_list(tmp_path / "nodes.csv")
    from hybridsched.kinds.cluster.nodes import fits_some_node

    _, rep = read_pod_trace(path, max_tasks=max_tasks,
                            keep_pods=("fits_no_sampled_node", lambda p: fits_some_node(p, nodes)))
    assert set(DROP_REASONS) <= set(rep.dropped)
    assert_report_adds_up(rep.to_dict())


# --- constant durations: the learned policy falls back, and says so -------------------------------


def test_a_constant_duration_target_falls_back_to_fifo_with_a_warning(tmp_path: Path) -> None:
    from hybridsched.io import write_json
    from hybridsched.kinds.cluster.hybrid_ml import HybridML

    p = tmp_path / "untimed.csv"
    rows = [f"pod-{i},{1000 * (1 + i % 4)},{1024 * (1 + i % 3)},{i % 2},{1000 * (i % 2)}" for i in range(40)]
    p.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "\n".join(rows) + "\n")
    pods, _ = read_pod_trace(p, untimed_duration_s=3600.0)
    cfg = {"model": "random_forest", "seed": 0, "random_forest": {"n_estimators": 5}}
    model, metrics = train_pod_runtime(pods, cfg)
    assert metrics["r2"] is None and metrics["spearman"] is None and metrics["constant_target"] is True
    assert set(metrics["importance"].values()) == {0.0} and "FIFO" in metrics["warning"]
    write_json(tmp_path / "train_rf.json", metrics)
    assert "NaN" not in (tmp_path / "train_rf.json").read_text()
    save_pod_runtime(model, tmp_path / "rf")
    est = load_pod_runtime(tmp_path / "rf").predict_seconds(pods)
    assert np.all(est == 3600.0)  # equal keys: the queue keeps arrival order (FIFO)
    policy = HybridML(model_dir=str(tmp_path / "rf"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        policy.fit(pods)
    assert policy.warning and any("FIFO" in str(w.message) for w in caught)


def test_training_on_pods_without_durations_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "untimed.csv"
    p.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\npod-a,1000,1024,1,1000\npod-b,1000,1024,0,0\n")
    pods, _ = read_pod_trace(p)
    with pytest.raises(HybridschedError) as e:
        train_pod_runtime(pods, {"model": "random_forest"})
    msg = str(e.value)
    assert_one_plain_line(msg)
    assert_documented(msg)


def test_an_empty_split_is_refused_by_the_reader_and_validate(tmp_path: Path) -> None:
    from hybridsched.kinds.cluster.validation import validate_pod_files
    from hybridsched.kinds.cluster.workload import read_split
    from hybridsched.validation import failure_summary

    pods, _ = read_pod_trace(write(tmp_path, GOOD))
    (tmp_path / "w").mkdir()
    pods.subset(np.zeros(0, dtype=np.int64)).to_frame().to_parquet(tmp_path / "w" / "test.parquet")
    path = tmp_path / "w" / "test.parquet"
    with pytest.raises(WorkloadError) as e:
        read_split(tmp_path / "w", "test")
    check(e, path, "FILE: 0 pods (an empty workload has nothing to schedule)")
    (tmp_path / "nodes.csv").write_text(NODES)
    report = validate_pod_files({"test": path}, read_node_list(tmp_path / "nodes.csv"))
    assert report["success"] is False and "0 tasks" in failure_summary(report)


def test_a_gpu_spec_naming_an_unknown_model_has_its_own_reason(tmp_path: Path) -> None:
    """Counted as unknown_gpu_model, not as fits_no_sampled_node like a pod the sample cannot hold."""
    rows = [*GOOD, "pod-u,1000,1024,1,500,A100X99,BE,Running,150,400,160",
            "pod-y,99000,1024,1,500,,BE,Running,150,400,160"]
    _, _, _, rep = load_workload(workload(tmp_path, write(tmp_path, rows)))
    assert rep["dropped"]["unknown_gpu_model"] == 1 and rep["dropped"]["fits_no_sampled_node"] == 1
    assert_report_adds_up(rep)
