"""The learned late dispatcher ``cem_late``: the base late heuristic at its start (bit for bit),
a reproducible search, the train_cem stage in late mode, the audit, and one clear line
without a trained model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.bounds import lower_bound
from hybridsched.kinds.machine.cem_train import MachineCEMSettings
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.late_cem_train import model_from_theta, n_theta, train_late_scorer
from hybridsched.kinds.machine.metrics import check_trace
from hybridsched.kinds.machine.policies.late import EFTLate, HEFTLate
from hybridsched.kinds.machine.policies.late_scorer import CEMLate, base_from_spec
from hybridsched.rl.cem import CEMSettings
from tests.conftest import small_workload
from tests.machine.sim_helpers import parents_of, run
from tests.runs import compose_run

EFT_LATE = {"_target_": "hybridsched.kinds.machine.policies.late.EFTLate", "aging": 0.2, "beta_cpu": 11.0,
            "beta_gpu": 7.1, "backlog_s": 1.6}
TINY = MachineCEMSettings(scenarios=2, tasks=150, validation_scenarios=0, hidden=1, dispatch="late")


@pytest.mark.parametrize("spec", [dict(rate=8.0, dag_job_size=6), dict(rate=4.0, intensity_range=(0.0, 0.35))])
@pytest.mark.parametrize("hidden", [0, 2])
def test_theta_zero_is_the_base_late_heuristic_exactly(spec, hidden):
    cluster = Cluster(n_gpus=4)
    tasks = small_workload(400, seed=5, **spec)
    settings = MachineCEMSettings(hidden=hidden)
    model = model_from_theta(np.zeros(n_theta(settings)), base_from_spec(EFT_LATE), settings)
    ref = run(tasks, cluster, EFTLate(aging=0.2, beta_cpu=11.0, beta_gpu=7.1, backlog_s=1.6))
    got = run(tasks, cluster, CEMLate(model=model))
    np.testing.assert_array_equal(got["fraction"].to_numpy(), ref["fraction"].to_numpy())
    np.testing.assert_array_equal(got["end"].to_numpy(), ref["end"].to_numpy())
    heft = {"_target_": "hybridsched.kinds.machine.policies.late.HEFTLate", "w_fin": 0.8}
    model = model_from_theta(np.zeros(n_theta(settings)), base_from_spec(heft), settings)
    np.testing.assert_array_equal(run(tasks, cluster, CEMLate(model=model))["end"].to_numpy(),
                                  run(tasks, cluster, HEFTLate(w_fin=0.8))["end"].to_numpy())


def test_random_weights_keep_the_invariants_and_the_bound_and_match_the_reference():
    cluster = Cluster(n_gpus=3, noise_sigma=0.3)
    tasks = small_workload(120, seed=4, rate=9.0, dag_job_size=5, memory_range=(50.0, 20000.0))
    real = cluster.sample_noise(len(tasks), np.random.default_rng(4))
    lb = lower_bound(tasks, cluster, real)
    settings = MachineCEMSettings(hidden=2)
    for seed in range(3):
        theta = np.random.default_rng(seed).normal(0, 1.0, n_theta(settings))
        model = model_from_theta(theta, base_from_spec(EFT_LATE), settings)
        a = run(tasks, cluster, CEMLate(model=model), seed=4)
        assert check_trace(a, cluster, parents_of(tasks)) == []
        assert lb.mean_latency <= (a["end"] - a["arrival"]).mean() * (1 + 1e-9)
        b = run(tasks, cluster, CEMLate(model=model), seed=4, compiled=False)
        np.testing.assert_array_equal(a["end"].to_numpy(), b["end"].to_numpy())


def test_late_search_is_reproducible_and_starts_at_the_base():
    cluster = Cluster(n_gpus=4)
    search = CEMSettings(generations=3, population=6, seed=3, antithetic=True)
    base0 = base_from_spec(EFT_LATE)
    a, _, _ = train_late_scorer(base0, search, TINY, cluster)
    b, _, _ = train_late_scorer(base0, search, TINY, cluster)
    assert np.array_equal(a.theta, b.theta)
    assert a.history[0]["mean_cost"] == 1.0  # row 0 of generation 0 is the base heuristic itself


def test_train_cem_stage_in_late_mode_is_byte_identical_and_its_policy_passes_the_audit(tmp_path):
    from hybridsched.kinds import get_kind

    outs = []
    for k in range(2):
        r = compose_run(f"cem.model_dir={tmp_path}/cl{k}", f"paths.metrics_dir={tmp_path}/m{k}", "cem.generations=2",
                        "cem.population=4", "cem.machine.scenarios=1", "cem.machine.tasks=100",
                        "cem.machine.validation_scenarios=1", "cem.machine.select_from=2", "cem.machine.hidden=1",
                        "cem.machine.dispatch=late")
        get_kind("machine").train_cem(r)
        outs.append(((tmp_path / f"cl{k}" / "model.json").read_bytes(), (tmp_path / f"m{k}" / "train_cem.json").read_bytes()))
    assert outs[0] == outs[1]
    model = json.loads(outs[0][0])
    assert model["start"] == "eft_late" and model["machine"]["dispatch"] == "late"
    assert set(json.loads(outs[0][1])["validation_cost"]) == {"base", "final_mean", "cem_late"}
    cluster = Cluster(n_gpus=4)
    tasks = small_workload(300, seed=2, rate=8.0, dag_job_size=5)
    assert check_trace(run(tasks, cluster, CEMLate(model_dir=str(tmp_path / "cl0"))), cluster, parents_of(tasks)) == []


def test_bad_late_settings_and_missing_model_are_one_line(tmp_path, cluster):
    with pytest.raises(HybridschedError, match="cem.machine.dispatch: soon is out of range"):
        MachineCEMSettings.from_dict({"dispatch": "soon"})
    with pytest.raises(HybridschedError, match="is not a late-dispatch heuristic"):
        base_from_spec({"_target_": "hybridsched.kinds.machine.policies.eft.EarliestFinishTime"})
    with pytest.raises(HybridschedError, match=f"no trained model at {tmp_path}/model.json"):
        run(small_workload(10), cluster, CEMLate(model_dir=str(tmp_path)))
    assert "dispatch" not in MachineCEMSettings().to_dict()  # the arrival cem model's record is unchanged


def test_the_train_late_stage_writes_the_same_bytes_on_rerun(tmp_path):
    """``train_cem_late`` (the train_late stage's trainer): its model and report are DVC outputs,
    so no wall-clock time is written into them (it is printed and tracked instead)."""
    from hybridsched.devices import Cluster
    from hybridsched.kinds.machine.cem_train import MachineCEMSettings
    from hybridsched.kinds.machine.late_train import train_cem_late
    from tests.machine.late_models import EFT_LATE

    mix = MachineCEMSettings(scenarios=1, tasks=100, validation_scenarios=0, select_from=1, selection_scenarios=1,
                             hidden=2, dispatch="late")
    out = {}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        got = train_cem_late({"generations": 2, "population": 4, "seed": 0}, EFT_LATE, mix, Cluster(n_gpus=2),
                             tmp_path / name)
        assert "wall_s" in got["report"]
        out[name] = {p.name: p.read_bytes() for p in sorted((tmp_path / name).iterdir())}
    assert "train_cem_late.json" in out["a"] and out["a"] == out["b"]
