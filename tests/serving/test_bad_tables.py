"""Bad latency tables and replay traces: refused by the check stage (a given
table is read there, before the profile stage measures for minutes) with one line naming the
file, the variant and the real problem, as tests/bad_input_catalogue.py holds."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from hybridsched.kinds.base import Run
from hybridsched.kinds.serving import stages
from hybridsched.kinds.serving.workload import read_arrival_trace
from tests.bad_input_catalogue import assert_refused
from tests.serving.conftest import linear_table, serving_cfg


def _table(tmp_path: Path, edit=None, **serving) -> tuple[Run, Path]:
    """A serving run whose ``serving.latency_table`` is a csv of the linear table, edited."""
    path = tmp_path / "latency.csv"
    cfg = serving_cfg(tmp_path, latency_table=str(path), **serving)
    df = linear_table(stages.settings_of(Run(cfg=cfg)))
    (edit(df) if edit else df).to_csv(path, index=False)
    return Run(cfg=cfg), path


def _negative(df: pd.DataFrame) -> pd.DataFrame:
    df.loc[2, "latency_ms"] = -5.0
    return df


def _decreasing(df: pd.DataFrame) -> pd.DataFrame:
    df.loc[(df["model"] == "resnet50") & (df["batch"] == 4), "latency_ms"] = 1.0
    return df


@pytest.mark.parametrize("edit, serving, expected", [
    (lambda df: df.drop(columns="latency_ms"), {}, "FILE: latency table lacks column(s) ['latency_ms']"),
    (_negative, {}, "FILE: row 2 has batch 4 and latency_ms -5.0; need batch >= 1 and latency > 0"),
    (_decreasing, {}, "FILE: latency of ('resnet50', 'onnx', 'fp32') decreases from batch 2 (89.6 ms) to batch 4 "
                      "(1 ms); a larger batch cannot be faster"),
    (lambda df: df[df["model"] != "vit_b16"], {},
     "FILE: no rows for (model, backend, precision) ('vit_b16', 'torch', 'fp32'), which the workload uses (workload.mix)"),
    (lambda df: df[df["batch"] > 1], {},
     "FILE: (model, backend, precision, batch) ('resnet18', 'torch', 'fp32', 1) missing; the workload needs batches "
     "1..128 (serving.max_batch)"),
    (None, {"max_batch": 256},
     "FILE: the rows of ('resnet18', 'torch', 'fp32') stop at batch 128, below serving.max_batch 256 (the table must "
     "reach it; or lower serving.max_batch)"),
])
def test_check_refuses_a_bad_latency_table(tmp_path, edit, serving, expected):
    run, path = _table(tmp_path, edit, **serving)
    assert_refused(lambda: stages.check_config(run), path, expected)


def test_a_missing_latency_table_is_refused_by_check(tmp_path):
    """Refused by check, before the profile stage measures the models for 2 minutes."""
    path = tmp_path / "nope.csv"
    run = Run(cfg=serving_cfg(tmp_path, latency_table=str(path)))
    assert_refused(lambda: stages.check_config(run), path, "serving.latency_table: FILE not found")


def test_generate_names_the_table_not_a_missing_batch1_latency(tmp_path):
    """A table stopping at batch 128 with max_batch 256 is refused naming the file, the variant and
    the batch, not as "no batch-1 latency for a variant of the mix"."""
    run, path = _table(tmp_path, None, max_batch=256)
    assert_refused(lambda: stages.generate(run), path,
             "FILE: the rows of ('resnet18', 'torch', 'fp32') stop at batch 128, below serving.max_batch 256 (the table "
             "must reach it; or lower serving.max_batch)")
    assert not (tmp_path / "data" / "workload").exists()


@pytest.mark.parametrize("text, expected", [
    ("time,ContextTokens\n1.0,5\n2.0,6\n", "FILE: needs column(s) 'TIMESTAMP', 'ContextTokens'; has ['time', 'ContextTokens']"),
    ("TIMESTAMP,ContextTokens\n2.0,5\n1.0,6\n3.0,7\n", "FILE: TIMESTAMP not sorted: row 3 (1.0) is before row 2 (2.0)"),
    ("TIMESTAMP,ContextTokens\n1.0,5\n", "FILE: needs at least 2 rows, has 1"),
    ("TIMESTAMP,ContextTokens\n1.0,5\nsoon,6\n3.0,7\n", "FILE: row 3 TIMESTAMP 'soon' is neither a number nor a timestamp"),
    ("\x00\x01garbage;;\n\x02\x03", "FILE: needs column(s) 'TIMESTAMP', 'ContextTokens'; has ['\\x00\\x01garbage;;']"),
])
def test_a_bad_replay_trace_is_one_line(tmp_path, text, expected):
    path = tmp_path / "arrivals.csv"
    path.write_text(text)
    assert_refused(lambda: read_arrival_trace(path, "TIMESTAMP", "ContextTokens"), path, expected)
