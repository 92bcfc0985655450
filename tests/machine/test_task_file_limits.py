"""Machine kind task files that pandas would read silently wrong (a column named twice, a file
cut off), values past the simulator's finite limits, and metrics that must stay finite."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hybridsched.devices import Cluster
from hybridsched.errors import HybridschedError, WorkloadError
from hybridsched.io import check_finite
from hybridsched.kinds.machine import schema
from hybridsched.kinds.machine.metrics import summarize
from hybridsched.kinds.machine.policies.classic import Greedy
from hybridsched.kinds.machine.policies.eft import EarliestFinishTime
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.validation import validate_frame
from hybridsched.kinds.machine.workload import read_tasks
from hybridsched.evaluation import compare
from tests.bad_input_catalogue import as_documented, assert_documented, assert_one_plain_line
from tests.runs import ROOT

MAX_MB = 64000.0
HEADER = "task_id,arrival,size,intensity,memory_mb"
ROWS = ["0,0.0,10.0,0.5,100", "1,1.0,20.0,0.5,100", "2,2.0,300.0,0.5,1024"]


def refused(path, **kw) -> str:  # noqa: ANN001
    """read_tasks' one-line message for ``path``, FILE for the path, checked against the catalogue."""
    with pytest.raises(WorkloadError) as e:
        read_tasks(path, max_memory_mb=MAX_MB, **kw)
    line = as_documented(str(e.value), path)
    assert_one_plain_line(line)
    assert_documented(line)
    return line


def test_a_column_named_twice_is_refused(tmp_path):
    """pandas renamed the second `size` to `size.1` and the file loaded with the first one."""
    f = tmp_path / "t.csv"
    f.write_text("task_id,arrival,size,intensity,memory_mb,size\n0,0.0,10.0,0.5,100,99.0\n")
    assert refused(f) == ("FILE: column(s) 'size' named twice in the header (a column's values would be read "
                          "from one of them only)")


def test_a_frame_with_a_column_twice_is_refused():
    """A frame (what a parquet file is read into) can hold two columns of one name."""
    from hybridsched.kinds.machine.workload import from_frame

    df = pd.DataFrame([[0, 0.0, 10.0, 0.5, 100.0, 99.0]], columns=[*HEADER.split(","), "size"])
    with pytest.raises(WorkloadError) as e:
        from_frame(df, source="FILE", max_memory_mb=MAX_MB)
    assert str(e.value) == ("FILE: column(s) 'size' named twice in the header (a column's values would be read "
                            "from one of them only)")


def test_a_file_cut_inside_its_last_value_is_refused_as_truncated(tmp_path):
    """`2,2.0,300.0,0.5,10` (cut from `1024`, no final newline) loaded with memory_mb 10."""
    f = tmp_path / "t.csv"
    f.write_text("\n".join([HEADER, *ROWS])[:-2])
    assert refused(f) == ("FILE: the last line (4) is truncated (no newline at its end, so its last value may be "
                          "cut short); the file is incomplete (a complete csv file ends with a newline)")


def test_a_file_cut_inside_its_last_line_is_refused_as_truncated(tmp_path):
    """A last line with fewer fields was reported as a NaN in the last row (or, cut before an
    optional column, loaded)."""
    f = tmp_path / "t.csv"
    f.write_text("\n".join([HEADER, *ROWS[:2], "2,2.0,30"]))
    assert refused(f) == "FILE: the last line (4) is truncated (fewer fields than the header); the file is incomplete"
    f.write_text("\n".join([HEADER + ",priority,deadline", "0,0.0,10.0,0.5,100,0,5.0", "1,1.0,20.0,0.5,100,0,6.0",
                            "2,2.0,30.0,0.5,100"]) + "\n")
    assert refused(f) == "FILE: the last line (4) is truncated (fewer fields than the header); the file is incomplete"


def test_a_short_line_inside_the_file_is_refused(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("\n".join([HEADER + ",deadline", "0,0.0,10.0,0.5,100,5.0", "1,1.0,20.0,0.5,100",
                            "2,2.0,30.0,0.5,100,9.0"]) + "\n")
    assert refused(f) == "FILE: line 3 has 5 of 6 fields (1 short line(s))"


def test_a_complete_file_still_loads(tmp_path):
    """The checks leave a whole file (final newline, CRLF too, blank lines) as it was read."""
    f = tmp_path / "t.csv"
    for text in ("\n".join([HEADER, *ROWS]) + "\n", "\r\n".join([HEADER, *ROWS]) + "\r\n",
                 "\n".join([HEADER, ROWS[0], "", *ROWS[1:]]) + "\n\n"):
        f.write_text(text, newline="")
        t = read_tasks(f, max_memory_mb=MAX_MB)
        assert t.memory_mb.tolist() == [100.0, 100.0, 1024.0]


@pytest.mark.parametrize("column, values, row, shown, limit", [
    ("arrival", [0.0, 1.0, 1e308], 2, "1e+308", "1e+12"),
    ("size", [1e308, 1e308, 1e308], 0, "1e+308", "1e+15"),
    ("deadline", [5.0, 2e12, 9.0], 1, "2000000000000.0", "1e+12"),
])
def test_values_past_the_finite_limit_are_refused(tmp_path, column, values, row, shown, limit):
    """arrival 1e308 overflowed the simulator's times (NaN throughput); every size 1e308 gave
    infinite energy, written as null."""
    f = tmp_path / "t.csv"
    df = pd.DataFrame({"task_id": [0, 1, 2], "arrival": [0.0, 1.0, 2.0], "size": [10.0, 20.0, 30.0],
                       "intensity": 0.5, "memory_mb": 100.0, "deadline": [5.0, 6.0, 9.0]})
    df[column] = values
    df.to_csv(f, index=False)
    n = sum(v > float(limit) for v in values)
    assert refused(f) == (f"FILE: column '{column}': {n} value(s) above {limit}, the largest the simulator takes "
                          f"(its times and energies would overflow) (first at row {row}: {shown})")
    # validate's suite refuses the same frame (its range check carries the limit)
    entry = validate_frame(df, "t", MAX_MB)
    assert not entry["success"]
    label = schema.range_label(schema.RULES[column], MAX_MB)
    assert [e["check"] for e in entry["expectations"] if not e["success"]] == [label]


def test_an_infinite_value_keeps_its_message(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("\n".join([HEADER, "0,0.0,10.0,0.5,100", "1,1.0,inf,0.5,100"]) + "\n")
    assert refused(f) == "FILE: column 'size': 1 value(s) not > 0 (first at row 1: inf)"


def test_check_finite_names_the_metric_and_the_file():
    check_finite({"a": 1.0, "b": [2, None, "x"], "c": np.float64(3.0)}, "m.json")
    with pytest.raises(HybridschedError) as e:
        check_finite({"policies": {"eft": {"makespan": 1.0, "throughput": float("nan")}}}, "metrics/summary.json")
    assert str(e.value) == ("metrics/summary.json: metric policies.eft.throughput is nan (not a finite number; "
                            "nothing of it was written)")
    assert_documented(str(e.value).replace("policies.eft.throughput", "policies.NAME.throughput_tasks_per_s"))
    table = pd.DataFrame({"energy_j": [1.0, np.inf]}, index=pd.Index(["rr", "eft"], name="policy"))
    with pytest.raises(HybridschedError, match=r"^T: metric policies\.eft\.energy_j is inf "):
        check_finite(table, "T", "policies")


def _cluster() -> Cluster:
    cfg = yaml.safe_load((ROOT / "params.yaml").read_text())
    return Cluster.from_dict(cfg["cluster"])


def test_simulate_refuses_a_zero_makespan_before_writing_traces(tmp_path, capsys, monkeypatch):
    """A size so small that the task ends as it arrives: throughput 1/0 (NaN) was written
    into metrics/summary.json as null and policies.csv as an empty cell, exit code 0."""
    from hydra import compose, initialize_config_dir

    from stages.common import run_stage
    from tests.runs import CONF

    import hybridsched.parallel

    monkeypatch.setattr(hybridsched.parallel, "can_spawn", lambda: False)  # the bound inline: no spawn's imports
    w = tmp_path / "w"
    w.mkdir()
    pd.DataFrame({"task_id": [0], "arrival": [0.0], "size": [5e-324], "intensity": [0.0],
                  "memory_mb": [1.0]}).to_parquet(w / "test.parquet", index=False)
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=[
            "tracking.enabled=false", "policy=round_robin", "sim.bound_lp.enabled=false", "sim.compiled=false", f"paths.workload_dir={w}",
            f"paths.traces_dir={tmp_path / 't'}", f"paths.metrics_dir={tmp_path / 'm'}"])
    with pytest.raises(SystemExit) as e:
        run_stage("simulate", cfg)
    assert e.value.code == 1
    line = capsys.readouterr().err.strip().splitlines()[-1].removeprefix("error: ")
    assert line.startswith(f"{tmp_path / 't'}: metric round_robin."), line
    assert not (tmp_path / "t").exists() and not (tmp_path / "m").exists()


# --- property: extreme finite values give one refusal line or finite metrics ----------------

EXTREMES = st.sampled_from([1e308, -1e308, -0.0, 0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1e12, 1e15, 1.0,
                            0.5, 64000.0])
COLUMNS = ("task_id", "arrival", "size", "intensity", "memory_mb", "priority", "deadline", "deps")
CLUSTER = _cluster()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(column=st.sampled_from(COLUMNS), value=EXTREMES, row=st.integers(0, 2), everywhere=st.booleans())
@example(column="arrival", value=1e308, row=2, everywhere=False)  # overflowed the times
@example(column="size", value=1e308, row=0, everywhere=True)  # infinite energy
@example(column="size", value=5e-324, row=0, everywhere=True)
def test_extreme_values_give_one_refusal_or_finite_metrics(tmp_path, column, value, row, everywhere):
    """Any extreme but finite value in any column of a small task file: the reader refuses it in
    one line, or the simulator's metrics (and the comparison table the reports hold) are finite
    (or refused by the metrics check in one line)."""
    base = {"task_id": ["0", "1", "2"], "arrival": ["0.0", "1.0", "2.0"], "size": ["10.0", "20.0", "30.0"],
            "intensity": ["0.5", "0.5", "0.5"], "memory_mb": ["100.0", "100.0", "100.0"], "priority": ["0", "0", "0"],
            "deadline": ["50.0", "50.0", "50.0"], "deps": ["", "0", "1"]}
    for r in range(3) if everywhere else [row]:
        base[column][r] = repr(value)  # as text, the way a user writes it
    f = tmp_path / "t.csv"
    f.write_text(",".join(COLUMNS) + "\n" + "".join(",".join(base[c][r] for c in COLUMNS) + "\n" for r in range(3)))
    try:
        tasks = read_tasks(f, max_memory_mb=CLUSTER.max_task_memory_mb)
    except WorkloadError as e:
        assert_one_plain_line(str(e))
        return
    realization = CLUSTER.sample_noise(len(tasks), np.random.default_rng(0))
    summaries = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # an overflow on the way counts as a failure
        for policy in (Greedy(), EarliestFinishTime()):
            summaries[policy.name] = summarize(simulate(tasks, CLUSTER, policy, realization).to_frame(), CLUSTER)
        table = compare(summaries, {"makespan": 1.0, "mean_latency": 1.0}, baseline="greedy")
    try:
        check_finite(table, "T")
    except HybridschedError as e:
        assert_one_plain_line(str(e))
        return
    for s in summaries.values():
        assert all(math.isfinite(x) for x in s.values() if isinstance(x, float)), s
