"""Bad input is one line naming the setting/file and value; the predictor beats a per-model mean."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hybridsched.errors import HybridschedError, WorkloadError
from hybridsched.kinds.serving.latency import dense_latency
from hybridsched.kinds.serving.predictor import held_out_scores
from hybridsched.kinds.serving.settings import ServingSettings
from hybridsched.kinds.serving.workload import generate_stream, read_arrival_trace, to_requests
from tests.serving.conftest import linear_table

S = ServingSettings()


def _df(**over):
    row = {"request_id": 0, "arrival": 0.0, "model": "resnet18", "cls": "interactive", "backend": "torch",
           "precision": "fp32", "size": 1, "slo_s": 0.1}
    row.update(over)
    return pd.DataFrame([row])


@pytest.mark.parametrize("over, needle", [
    ({"model": "bert"}, "unknown model 'bert'"),
    ({"cls": "bulk"}, "unknown class 'bulk'"),
    ({"size": 0}, "size 0.0 must be >= 1"),
    ({"slo_s": 0.0}, "slo_s 0.0 must be > 0"),
    ({"slo_s": -1.0}, "slo_s -1.0 must be > 0"),
])
def test_bad_request_is_one_line(over, needle):
    with pytest.raises(HybridschedError) as e:
        to_requests(_df(**over), S, "req.csv")
    assert needle in str(e.value) and "req.csv" in str(e.value) and "\n" not in str(e.value)


def test_slo_setting_must_be_positive():
    with pytest.raises(HybridschedError, match=r"workload.slo.batch: SLO must be > 0, got -5.0"):
        generate_stream({"slo": {"rule": "absolute_ms", "batch": -5}}, S, 10, 0)


def test_model_whose_smallest_batch_exceeds_capacity():
    with pytest.raises(HybridschedError, match=r"serving.token_capacity: 200 is below the 264 tokens of one sample of vit_b16"):
        ServingSettings(token_capacity=200)


@pytest.mark.parametrize("text, needle", [
    ("TIMESTAMP,ContextTokens\n2.0,5\n1.0,6\n3.0,7\n", "not sorted: row 3"),
    ("TIMESTAMP,ContextTokens\n1.0,5\nsoon,6\n3.0,7\n", "row 3 TIMESTAMP 'soon' is neither a number nor a timestamp"),
])
def test_bad_arrival_file(tmp_path, text, needle):
    p = tmp_path / "arr.csv"
    p.write_text(text)
    with pytest.raises(HybridschedError) as e:
        read_arrival_trace(p, "TIMESTAMP", "ContextTokens")
    assert needle in str(e.value) and str(p) in str(e.value) and "\n" not in str(e.value)


def test_real_azure_trace_replays_at_the_target_rate():
    w = {"arrival": "replay", "rate": 5.0, "size_column": "ContextTokens",
         "trace_path": "/work/shared/traces/azure-llm-2023/AzureLLMInferenceTrace_code.csv"}
    df = generate_stream(w, S, 2000, 0)
    assert df["arrival"].is_monotonic_increasing
    assert 2000 / df["arrival"].iloc[-1] == pytest.approx(5.0, rel=0.5)
    assert df["size"].between(1, 8).all() and df["size"].nunique() > 1


def test_profile_table_missing_a_batch_the_workload_needs():
    table = linear_table(S, batches=(1, 2, 4, 8, 16))  # no row at or above max_batch 128
    with pytest.raises(HybridschedError, match=r"prof.csv: the rows of \('resnet18', 'torch', "
                                               r"'fp32'\) stop at batch 16, below serving.max_batch 128"):
        dense_latency(table, S, np.array([0]), "prof.csv")
    with pytest.raises(HybridschedError, match="no rows for"):
        dense_latency(table[table["model"] != "vit_b16"], S, np.array([S.n_variants - 1]), "prof.csv")


def test_clockwork_table_reads_and_says_where_from():
    from hybridsched.kinds.serving.latency import load_latency, table_source

    s = ServingSettings(models={"resnet50": 160.0}, backends=("tvm",), max_batch=16, latency_table="clockwork_v100")
    lat, table = load_latency(s, np.array([0]))
    assert lat[0, 1] == pytest.approx(2.73e-3) and lat[0, 16] == pytest.approx(17.30e-3)
    assert lat[0, 3] == pytest.approx((4.05e-3 + 5.87e-3) / 2)  # interpolated
    assert table_source(s).name == "clockwork_v100.csv"


def test_predictor_beats_per_model_mean_on_held_out_batches():
    rng = np.random.default_rng(0)
    t = linear_table(S)
    t["latency_ms"] *= np.exp(rng.normal(0, 0.03, len(t)))  # measurement noise
    sc = held_out_scores(t, S, [2, 8, 32], "random_forest", 0, 50)
    assert sc["mape"] < sc["baseline_mape"] and sc["r2_log"] > sc["baseline_r2_log"]
    assert sc["mape"] < 0.2


def test_offered_rate_from_load_rate_wins_and_neither_is_an_error():
    from hybridsched.kinds.serving.workload import offered_rate

    s = ServingSettings(models={"resnet18": 80.0, "resnet50": 160.0}, backends=("torch",), lanes=2)
    b1 = np.array([0.1, 0.3])  # batch-1 latency per variant
    mix = {"models": {"resnet18": 0.5, "resnet50": 0.5}}
    # load 1 = the lanes' batch-1 capacity: 2 lanes / 0.2 s mean = 10 req/s
    assert np.isclose(offered_rate({"rate": None, "load": 1.0, "mix": mix}, s, b1), 10.0)
    assert np.isclose(offered_rate({"rate": None, "load": 0.5, "mix": {"models": {"resnet50": 1.0}}}, s, b1), 2 * 0.5 / 0.3)
    assert offered_rate({"rate": 3.0, "load": 1.0, "mix": mix}, s, b1) == 3.0
    with pytest.raises(WorkloadError, match="workload.rate / workload.load"):
        offered_rate({"rate": None, "load": None}, s, b1)
    with pytest.raises(WorkloadError, match="workload.load"):
        offered_rate({"rate": None, "load": 1.0}, s, None)
