"""``late_imitation``: the rollout asked about the learner's candidates picks what the rollout
itself picks, and ``pg_late``'s trainer started from an imitation (``imitate``) is seeded,
reports its DAgger iterations and refuses an imitation without an expert."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hybridsched.devices import Cluster
from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.cem_train import MachineCEMSettings
from hybridsched.kinds.machine.engine import task_matrix
from hybridsched.kinds.machine.late_imitation import move_costs
from hybridsched.kinds.machine.late_pg_train import LatePGSettings, train
from hybridsched.kinds.machine.policies.late import _BACKLOG, least_free_gpu, load_scale
from hybridsched.kinds.machine.policies.late_rollout import RolloutLate, _rollout_pick, base_order
from hybridsched.kinds.machine.workload import WorkloadSpec, generate
from tests.bad_input_catalogue import assert_documented
from tests.runs import compose_run, outputs_in

EXPERT = {"_target_": "hybridsched.kinds.machine.policies.late_rollout.RolloutLate", "candidates": 2, "shares": 1,
          "base": {"_target_": "hybridsched.kinds.machine.policies.late.HEFTLate"}}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_rollouts_cost_of_each_candidate_picks_the_rollouts_own_move(seed):
    """On a pool of waiting tasks with believed busy devices, the candidate of least
    ``move_costs`` among every task at the base's split is the move ``_rollout_pick`` starts
    (every task a candidate, no share search), and the costs are the rollout's full scores."""
    cluster = Cluster(n_gpus=2)
    rng = np.random.default_rng(seed)
    tasks = generate(WorkloadSpec(rate=50.0), 30, rng, cpu_gflops=cluster.cpu_gflops)
    X = task_matrix(tasks, cluster)
    policy = RolloutLate(base=EXPERT["base"], candidates=30, shares=0)
    policy.prepare(tasks, cluster, X)
    pdata, params = policy.kernel_data()
    pool = rng.permutation(30)[:12].astype(np.int64)
    t = 1.0
    est = t + rng.uniform(0.0, 0.5, cluster.n_devices)
    idle = np.ones(cluster.n_devices, dtype=np.int64)
    ready = np.zeros(len(tasks))
    qlen = np.zeros(cluster.n_devices)
    k, _, f, _ = _rollout_pick(t, pool, len(pool), idle, est, qlen, X, ready, pdata, params)
    g = least_free_gpu(est)
    split, _, _ = base_order(t, pool, len(pool), idle, est, g, X, ready, pdata, params,
                             load_scale(t, pool, len(pool), est, pdata, params[_BACKLOG]))
    ck = np.arange(len(pool), dtype=np.int64)
    costs = move_costs(t, pool, len(pool), idle, est, X, ready, pdata, params, ck, split, len(pool))
    assert int(np.argmin(costs)) == k and split[k] == f
    assert np.isfinite(costs).all() and (costs >= costs[k]).all()


def _imitated(tmp_path, **over):
    s = LatePGSettings(**{**dict(iterations=1, episodes=1, rollouts=2, tasks=60, hidden=3, selection_draws=1,
                                 validation_draws=0, c_option=1, reserved_order="rank", imitate=2, imitate_episodes=1,
                                 imitate_steps=5, expert=EXPERT), **over})
    return train(s, MachineCEMSettings(tasks=60), Cluster(n_gpus=2), tmp_path, log=lambda *_: None)


def test_an_imitation_start_is_seeded_and_reported(tmp_path):
    report = _imitated(tmp_path / "a")
    assert [r["iteration"] for r in report["imitation"]] == [0, 1]
    assert all(r["decisions"] > 0 and 0.0 <= r["agreement"] <= 1.0 for r in report["imitation"])
    assert report["settings"]["imitate"] == 2 and report["settings"]["expert"] == EXPERT
    assert json.loads((tmp_path / "a" / "train_pg_late.json").read_text()) == json.loads(json.dumps(report))
    _imitated(tmp_path / "b")
    assert (tmp_path / "a" / "model.json").read_bytes() == (tmp_path / "b" / "model.json").read_bytes()
    # no imitation: the report says nothing of it (the pipeline's pg_late report keeps its keys)
    plain = _imitated(tmp_path / "c", imitate=0, expert=None)
    assert "imitation" not in plain and not any(k.startswith("imitate") or k == "expert" for k in plain["settings"])


def test_an_imitation_needs_a_known_expert(tmp_path):
    with pytest.raises(HybridschedError) as e:
        LatePGSettings(imitate=1)
    assert str(e.value) == "pg_late training: imitate=1 needs an expert (a rollout_late policy config)"
    assert_documented(str(e.value))
    from stages.train_late import train_late

    with pytest.raises(HybridschedError) as e:
        train_late(compose_run(*outputs_in(tmp_path), "train_late.pg_late.expert=rollout", "train_late.policies=[pg_late]"))
    assert str(e.value) == "train_late.pg_late.expert: unknown machine policy 'rollout'"
    assert_documented(str(e.value))
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").rglob("model.json"))


def test_documented_stage_command_trains_pg_late_from_an_imitation(tmp_path):
    """docs/machine.md's ``python -m stages.train_late train_late.policies=[pg_late]
    train_late.pg_late.imitate=3 ...``, shrunk: the stage resolves the expert's name to its
    config (tuned values in) and ``pg_late``'s report carries the DAgger iterations."""
    from stages.train_late import train_late

    shrink = [f"train_late.pg_late.{k}={v}" for k, v in dict(iterations=1, episodes=1, rollouts=2, hidden=3,
                                                             imitate_episodes=1, imitate_steps=5).items()]
    shrink += [f"+train_late.pg_late.{k}={v}" for k, v in dict(tasks=60, selection_draws=1, validation_draws=0).items()]
    m = train_late(compose_run(*outputs_in(tmp_path), "train_late.policies=[pg_late]", "train_late.pg_late.imitate=1",
                               "cem.machine.tasks=60", *shrink))
    assert list(m["policies"]) == ["pg_late"]
    report = json.loads((tmp_path / "models" / "late" / "pg_late" / "train_pg_late.json").read_text())
    assert len(report["imitation"]) == 1 and report["settings"]["expert"]["_target_"].endswith("RolloutLate")
    assert (tmp_path / "models" / "late" / "pg_late" / "model.json").is_file()
