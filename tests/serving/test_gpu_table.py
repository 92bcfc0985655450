"""The clockwork_v100 latency-table path end to end: every stage but profile (the table is
published, no measurement) on a tiny ResNet-50 / TVM stream at GPU speed."""

from __future__ import annotations

import json

import pandas as pd

from hybridsched.kinds import get_kind
from hybridsched.kinds.base import STAGES, Run
from tests.serving.conftest import serving_cfg, traces_dir


def test_clockwork_v100_table_end_to_end(tmp_path):
    cfg = serving_cfg(tmp_path, latency_table="clockwork_v100", backends=["tvm"], max_batch=16, load_sweep=[0.5, 1.5])
    cfg["workload"].update(n_train=400, n_test=400, slo={"rule": "absolute_ms", "interactive": 100.0, "batch": 1000.0},
                           mix={"models": {"resnet50": 1.0}, "classes": {"interactive": 0.7, "batch": 0.3},
                                "backends": {"tvm": 1.0}, "precisions": {"fp32": 1.0}})
    cfg["serving"]["predictor"].update(n_estimators=10, test_batches=[2])
    cfg["serving"]["dqn"].update(episodes=1, learning_starts=20, batch_size=16, hidden=8)
    cfg["serving"]["tune"].update(n_trials=2)
    cfg["cem"].update(generations=2, population=4)
    cfg["cem"]["serving"].update(scenarios=1, requests=200, select_from=2, selection_scenarios=1, heldout_requests=200,
                                 heldout_trace=str(traces_dir() / "azure-llm-2023" / "AzureLLMInferenceTrace_code.csv"))
    kind = get_kind("serving")
    run = Run(cfg, tracking=False)
    results = {name: getattr(kind, name)(run) for name in STAGES if name != "profile"}
    m = tmp_path / "metrics"
    report = json.loads((m / "import_report.json").read_text())
    assert report["latency_table"] == "clockwork_v100" and report["latency_table_file"].endswith("clockwork_v100.csv")
    # load 1.1 in samples at GPU speed: hundreds of requests/s, batching within the 10 ms window counted
    assert report["rate"] > 2 * 1.1 / 0.00273 * 0.9 and abs(report["offered_load"]["test"] - 1.1) < 0.11
    summary = json.loads((m / "summary.json").read_text())
    assert summary["latency_table"] == "clockwork_v100" and summary["bound"]["latency_table"] == "clockwork_v100"
    table = results["evaluate"]
    assert set(table.index) == set(cfg["policies"]["serving"])  # sim.policies.serving: null, every policy
    assert (table["slo_attainment"] <= summary["bound"]["slo_attainment"] + 1e-12).all()
    trace = pd.read_parquet(tmp_path / "data" / "traces" / "predictive.parquet")
    served = trace[~trace["dropped"]]
    assert (served["backend"] == "tvm").all() and served["service"].max() < 0.03  # V100 ms, not CPU seconds
    assert served.groupby("batch_id").size().max() > 1  # requests share batches at this rate
