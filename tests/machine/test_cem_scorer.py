"""The learned ``cem`` scorer: eft_rank at its start, a reproducible search that improves on
its own training draws, an auditable trace, and one clear line without a trained model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.cem_train import (MachineCEMSettings, check_seed, draw_set, model_from_theta, n_theta,
                                                 relative_costs, train_scorer)
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.metrics import check_trace
from hybridsched.kinds.machine.policies.scorer import CEMScorer, base_from_eft_rank
from hybridsched.kinds.machine.policies.weighted import RankEFT
from hybridsched.kinds.machine.scenarios import HELDOUT_SEED
from hybridsched.rl.cem import CEMSettings
from tests.conftest import small_workload
from tests.machine.sim_helpers import parents_of, run
from tests.runs import compose_run

EFT_RANK = {"beta_cpu": 14.3, "beta_gpu": 1.7, "backlog_s": 7.26, "kappa": 0.62}
TINY = MachineCEMSettings(scenarios=2, tasks=150, validation_scenarios=0, hidden=1)


@pytest.mark.parametrize("spec", [dict(rate=8.0, dag_job_size=6),
                                  dict(rate=4.0, intensity_range=(0.0, 0.35), memory_range=(2000.0, 16000.0))])
@pytest.mark.parametrize("hidden", [0, 2])
def test_theta_zero_is_eft_rank_exactly(spec, hidden):
    cluster = Cluster(n_gpus=4)
    tasks = small_workload(400, seed=5, **spec)
    settings = MachineCEMSettings(hidden=hidden)
    model = model_from_theta(np.zeros(n_theta(settings)), base_from_eft_rank(EFT_RANK), settings)
    ref = run(tasks, cluster, RankEFT(**EFT_RANK))
    got = run(tasks, cluster, CEMScorer(model=model))
    np.testing.assert_array_equal(got["fraction"].to_numpy(), ref["fraction"].to_numpy())
    np.testing.assert_array_equal(got["end"].to_numpy(), ref["end"].to_numpy())


def test_nonzero_extra_weights_change_decisions():
    cluster = Cluster(n_gpus=4)
    tasks = small_workload(400, seed=5, rate=8.0)
    theta = np.zeros(n_theta(TINY))
    theta[4] = 20.0  # a heavy extra price on CPU seconds
    moved = run(tasks, cluster, CEMScorer(model=model_from_theta(theta, base_from_eft_rank(EFT_RANK), TINY)))
    ref = run(tasks, cluster, RankEFT(**EFT_RANK))
    assert moved["fraction"].mean() > ref["fraction"].mean()


def test_search_is_reproducible_and_improves_on_its_first_draws():
    cluster = Cluster(n_gpus=4)
    search = CEMSettings(generations=4, population=8, seed=3)
    base0 = base_from_eft_rank(EFT_RANK)
    a, _, _ = train_scorer(base0, search, TINY, cluster)
    b, _, _ = train_scorer(base0, search, TINY, cluster)
    assert np.array_equal(a.theta, b.theta)
    assert a.history[0]["mean_cost"] == 1.0  # row 0 of generation 0 is eft_rank itself
    first = draw_set(search.seed, 1, 0, TINY, cluster, TINY.scenarios)
    start, final = relative_costs(np.stack([np.zeros_like(a.theta), a.theta]), first, base0, TINY, cluster)
    assert start == 1.0 and final <= start


def test_selection_keeps_the_cheapest_recent_mean_on_its_own_stream():
    cluster = Cluster(n_gpus=4)
    search = CEMSettings(generations=3, population=6, seed=3, antithetic=True)
    settings = MachineCEMSettings(scenarios=1, tasks=150, validation_scenarios=1, hidden=0, select_from=3,
                                  selection_scenarios=2)
    base0 = base_from_eft_rank(EFT_RANK)
    result, valid, sel = train_scorer(base0, search, settings, cluster)
    plain, _, none = train_scorer(base0, search, MachineCEMSettings(**{**settings.to_dict(), "select_from": 0}), cluster)
    assert none == {} and len(plain.means) == search.generations + 1
    assert np.array_equal(plain.theta, plain.means[-1])  # no selection: the final mean
    k = sel["selected_generation"]
    assert len(sel["selection_costs"]) == 3 and 1 <= k <= search.generations
    assert np.array_equal(result.theta, result.means[k])
    assert sel["selection_costs"][k - 1] == min(sel["selection_costs"])
    assert set(valid) == {"eft_rank", "final_mean", "cem"} and valid["eft_rank"] == 1.0


def test_training_draws_cover_the_ranges_and_never_use_the_heldout_seed():
    cluster = Cluster(n_gpus=4)
    draws = draw_set(0, 1, 0, MachineCEMSettings(scenarios=30, tasks=20, dag_share=0.5), cluster, 30)
    loads = [w["offered_load"] for w, _, _ in draws]
    assert 0.3 <= min(loads) and max(loads) <= 1.15 and max(loads) - min(loads) > 0.4
    assert any(w.get("dag_job_size", 0) for w, _, _ in draws) and not all(w.get("dag_job_size", 0) for w, _, _ in draws)
    with pytest.raises(HybridschedError, match=f"cem.seed: {HELDOUT_SEED}"):
        check_seed(HELDOUT_SEED)


def test_bad_machine_settings_fail_with_one_line():
    with pytest.raises(HybridschedError, match=r"cem.machine.load: \[1.2, 0.5\]"):
        MachineCEMSettings.from_dict({"load": [1.2, 0.5]})
    with pytest.raises(HybridschedError, match="unknown key"):
        MachineCEMSettings.from_dict({"scenarioz": 3})


def test_train_cem_stage_is_byte_identical_and_its_policy_passes_the_audit(tmp_path):
    from hybridsched.kinds import get_kind

    outs = []
    for k in range(2):
        r = compose_run(f"cem.model_dir={tmp_path}/cem{k}", f"paths.metrics_dir={tmp_path}/m{k}", "cem.generations=2",
                        "cem.population=4", "cem.machine.scenarios=1", "cem.machine.tasks=100",
                        "cem.machine.validation_scenarios=1", "cem.machine.hidden=1")
        get_kind("machine").train_cem(r)
        outs.append(((tmp_path / f"cem{k}" / "model.json").read_bytes(), (tmp_path / f"m{k}" / "train_cem.json").read_bytes(),
                     (tmp_path / f"m{k}" / "plots" / "train_cem.csv").read_text()))
    assert outs[0] == outs[1]
    assert "wall_s" not in json.loads(outs[0][1]) and outs[0][2].startswith("generation,mean_cost")
    cluster = Cluster(n_gpus=4)
    tasks = small_workload(300, seed=2, rate=8.0, dag_job_size=5)
    trace = run(tasks, cluster, CEMScorer(model_dir=str(tmp_path / "cem0")))
    assert check_trace(trace, cluster, parents_of(tasks)) == []


def test_missing_model_is_one_line_naming_the_path(tmp_path, cluster):
    tasks = small_workload(10)
    with pytest.raises(HybridschedError, match=f"{tmp_path}/model.json: no trained cem model") as e:
        run(tasks, cluster, CEMScorer(model_dir=str(tmp_path)))
    assert "\n" not in str(e.value)
    (tmp_path / "skipped.json").write_text('{"skipped": "x"}')
    with pytest.raises(HybridschedError, match="skipped.json"):
        run(tasks, cluster, CEMScorer(model_dir=str(tmp_path)))
