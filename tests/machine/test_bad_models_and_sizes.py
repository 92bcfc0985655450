"""Broken model files are one line and found before the LP bound; the LP bound says
its size up front and is skipped past ``sim.bound_lp.max_variables`` with one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine import bounds
from hybridsched.kinds.machine.bounds_lp import LPSettings, estimate_variables, lp_lower_bound
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.policies.scorer import load_model
from hybridsched.kinds.machine.runtime_model import FEATURE_NAMES, MODEL_FILES, TARGETS
from tests.bad_input_catalogue import assert_refused
from tests.conftest import small_workload
from tests.runs import compose_run, outputs_in


@pytest.mark.parametrize("text, expected", [
    ('{"base": {"alpha": 1.0, "be', "FILE: not a valid model file (JSONDecodeError at char 24); rerun the train_cem stage"),
    ("{}", "FILE: model lacks key(s) base, lin; rerun the train_cem stage"),
    ('{"base": {"alpha": 1.0}, "lin": []}',
     "FILE: model lacks key(s) base.beta_cpu, base.beta_gpu, base.beta_transfer, base.gamma, base.backlog_s, base.kappa; "
     "rerun the train_cem stage"),
])
def test_a_truncated_or_keyless_cem_model_is_one_line(tmp_path, text, expected):
    """They raised JSONDecodeError / KeyError with a traceback."""
    (tmp_path / "model.json").write_text(text)
    assert_refused(lambda: load_model(tmp_path), tmp_path / "model.json", expected)


def test_a_truncated_cluster_cem_model_is_one_line(tmp_path):
    from hybridsched.kinds.cluster.cem import MODEL_FILE, CEMPolicy

    (tmp_path / MODEL_FILE).write_text('{"kind": "clus')
    assert_refused(lambda: CEMPolicy(str(tmp_path)).fit(None), tmp_path / MODEL_FILE,
             "FILE: not a valid model file (JSONDecodeError at char 9); rerun the train_cem stage")


def test_simulate_reads_the_models_before_the_lp_bound(tmp_path, monkeypatch):
    """A truncated models/rf/model.skops was found only after a 141 s LP."""
    from hybridsched.kinds.machine import stages

    rf = tmp_path / "models" / "rf"
    rf.mkdir(parents=True)
    (rf / "meta.json").write_text(json.dumps({"kind": "random_forest", "model_file": MODEL_FILES["random_forest"],
                                              "features": list(FEATURE_NAMES), "targets": list(TARGETS)}))
    (rf / "model.skops").write_bytes(b"PK\x03\x04 cut off")
    run = compose_run(*outputs_in(tmp_path), "sim.policies.machine=[eft,hybrid_ml]")
    wd = tmp_path / "data" / "workload"
    wd.mkdir(parents=True)
    small_workload(50).to_frame().to_parquet(wd / "test.parquet")

    def no_bound(*a, **k):
        raise AssertionError("the lower bound ran before the models were read")

    monkeypatch.setattr(bounds, "lower_bound", no_bound)
    with pytest.raises(HybridschedError, match="model.skops"):
        stages.simulate(run)
    assert not (tmp_path / "data" / "traces").exists()


def _inputs(n: int):
    cfg = compose_run().cfg
    cluster = Cluster.from_dict(cfg["cluster"])
    tasks = small_workload(n)
    return tasks, cluster, cluster.sample_noise(n, np.random.default_rng(0))


def test_the_lp_bound_is_skipped_past_its_size_limit_with_one_line(capsys):
    tasks, cluster, real = _inputs(200)
    lb = bounds.lower_bound(tasks, cluster, real, lp=LPSettings(max_variables=1000))
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("LP bound skipped: about ") and out[0].endswith(
        " variables for 200 tasks, more than sim.bound_lp.max_variables 1,000; the bound is the solo bound "
        "(raise the limit to run it)"), out
    assert np.isnan(lb.mean_latency_lp) and lb.mean_latency == lb.mean_latency_solo


def test_the_lp_size_estimate_is_close_to_the_real_size(capsys):
    """The estimate printed before the LP is within a factor 2 of the columns it builds."""
    tasks, cluster, real = _inputs(200)
    d = bounds.best_alone_seconds(cluster.cpu_seconds(tasks.size) * real.cpu_factor,
                                  cluster.gpu_seconds(tasks.size, tasks.intensity, tasks.memory_mb) * real.gpu_factor,
                                  cluster.launch_s * real.gpu_factor, cluster.max_fraction(tasks.memory_mb))
    ef = bounds._earliest_finish(tasks, d)
    res = lp_lower_bound(tasks, cluster, real, ready=ef - d, best_alone=d)
    bounds.lower_bound(tasks, cluster, real)
    line = capsys.readouterr().out.strip().splitlines()[0]
    size = int(line.split("about ")[1].split(" variables")[0].replace(",", ""))
    assert res.n_variables / 2 <= size <= res.n_variables * 2, (size, res.n_variables)
    assert estimate_variables(1, 1.0, 1.0, LPSettings()) > 0


def test_a_missing_cem_model_names_the_file_and_the_stage_to_rerun(tmp_path):
    assert_refused(lambda: load_model(tmp_path), tmp_path / "model.json",
             "FILE: no trained cem model (run: dvc repro train_cem)")
