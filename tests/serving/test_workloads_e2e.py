"""`workload=serving_bursty` and `workload=serving_azure` through every stage but profile and the
real mode, on a measured-format profile (served rows, sigma per variant) written
here: the bound (clairvoyant and contention), the held-out table of `cem`, the load report and
the per-variant sigma the simulator used all come out. Tiny sizes; no timing asserted."""

from __future__ import annotations

import json

import pytest

from hybridsched.kinds import get_kind
from hybridsched.kinds.base import STAGES
from hybridsched.kinds.serving.settings import settings_of
from tests.runs import compose_run, outputs_in
from tests.serving.conftest import linear_table, traces_dir


@pytest.mark.parametrize("workload", ["serving_bursty", "serving_azure"])
def test_serving_workload_stages_write_bound_heldout_and_sigma(workload, tmp_path):
    run = compose_run(f"workload={workload}", *outputs_in(tmp_path), f"serving.tune.dir={tmp_path / 'models' / 'tune'}",
                      f"paths.traces={traces_dir()}", "workload.n_train=300", "workload.n_test=300",
                      "serving.max_batch=8", "serving.load_sweep=[0.5,1.5]", "serving.predictor.n_estimators=10",
                      "serving.predictor.test_batches=[2]", "serving.dqn.episodes=1", "serving.dqn.learning_starts=20",
                      "serving.dqn.batch_size=16", "serving.dqn.hidden=8", "serving.tune.n_trials=2",
                      "cem.generations=2", "cem.population=4", "cem.serving.scenarios=1", "cem.serving.requests=200",
                      "cem.serving.select_from=2", "cem.serving.selection_scenarios=1",
                      "cem.serving.heldout_requests=200")
    s = settings_of(run)
    # the profile stage's format with lanes 1 and 2 and a sigma per variant (measuring takes minutes)
    one = linear_table(s).assign(lanes=1, source="measured")
    two = linear_table(s).assign(lanes=2, source="served")
    two["latency_ms"] *= 1.3
    sigma = {f"{m}/{b}": 0.1 + 0.05 * i for i, (m, b) in enumerate((m, b) for m in s.model_names for b in s.backends)}
    profile = tmp_path / "data" / "cluster_profile.json"
    profile.parent.mkdir(parents=True)
    profile.write_text(json.dumps({"table": [*one.to_dict("records"), *two.to_dict("records")], "lanes": 2,
                                   "sigma": sigma}))
    kind = get_kind("serving")
    results = {name: getattr(kind, name)(run) for name in STAGES if name != "profile"}
    m = tmp_path / "metrics"
    report = json.loads((m / "import_report.json").read_text())
    assert report["workload"] == workload and "offered_load" in report and "load_warnings" in report
    bound = json.loads((tmp_path / "data" / "traces" / "bound.json").read_text())
    assert {"clairvoyant.slo_attainment", "contention.slo_attainment"} <= set(bound)
    assert bound["sigma_source"] == "profile"
    assert bound["service_sigma"]["resnet18/torch/fp32"] == pytest.approx(0.1)
    assert bound["service_sigma"]["vit_b16/onnx/fp32"] == pytest.approx(0.35)
    table = results["evaluate"]
    assert (table["slo_attainment"] <= bound["slo_attainment"] + 1e-12).all()
    cem = json.loads((m / "train_cem.json").read_text())
    assert len(cem["heldout"]) == 5 and {"cem", "predictive"} <= set(cem["heldout"][0])
    sweep = (m / "plots" / "kind" / "attainment_vs_load.csv").read_text()
    assert "contention_bound" in sweep
