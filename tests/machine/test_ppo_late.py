"""The ``train_ppo`` stage (sb3-contrib's MaskablePPO on the late-dispatch env, episodes of the
training mixture) and its policy ``ppo_late``, at a tiny budget: the stage's outputs, a seeded
rerun's identical model and figures, and the saved model run through ``simulate`` as the
conf entry builds it, acting as MaskablePPO's deterministic ``predict`` does in the env."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pandas as pd
import pytest

from tests.runs import compose_run, outputs_in

TINY = ["train_ppo.total_timesteps=128", "train_ppo.n_steps=64", "train_ppo.batch_size=32", "train_ppo.n_epochs=1",
        "train_ppo.tasks=40", "train_ppo.hidden=4", "train_ppo.select_every=1", "train_ppo.selection_draws=1",
        "train_ppo.validation_draws=1", "train_ppo.eval_tasks=60"]


def test_the_stage_trains_a_model_that_runs_in_simulate_and_a_rerun_is_identical(tmp_path):
    from sb3_contrib import MaskablePPO

    from hybridsched.devices import cluster_from_config
    from hybridsched.kinds.base import instantiate
    from hybridsched.kinds.machine.cem_train import MachineCEMSettings
    from hybridsched.kinds.machine.env import MachineLateEnv
    from hybridsched.kinds.machine.policies.ppo_late import load
    from hybridsched.kinds.machine.ppo_train import PPOSettings, train
    from hybridsched.kinds.machine.sim import simulate
    from hybridsched.kinds.machine.workload import WorkloadSpec, generate
    from stages.train_ppo import train_ppo

    run = compose_run(*outputs_in(tmp_path), *TINY)
    m = train_ppo(run)
    model_dir = tmp_path / "models" / "ppo_late"
    metrics = json.loads((tmp_path / "metrics" / "train_ppo.json").read_text())
    assert metrics["timesteps"] >= 128 and metrics["episodes"] >= 2 and metrics["validation_cost"] > 0
    assert "wall_s" in m and "wall_s" not in metrics  # timings stay out of the committed figures
    # checkpoints: the start, the end of each of the 2 rollouts, the end; the cheapest is the model
    assert [c["step"] for c in metrics["selection"]] == [0, 64, 128, 128]
    assert metrics["selected_step"] == min(metrics["selection"], key=lambda c: c["cost"])["step"]
    curve = pd.read_csv(tmp_path / "metrics" / "plots" / "train_ppo.csv")
    assert list(curve.columns) == ["step", "episode", "cost"] and len(curve) == metrics["episodes"]
    assert curve["step"].is_monotonic_increasing and (curve["cost"] > 0).all()

    # the same settings again: the same model file and the same figures
    cfg = run.cfg
    again = train(PPOSettings.from_dict(cfg["train_ppo"]), MachineCEMSettings.from_dict(cfg["cem"]["machine"]),
                  cluster_from_config(cfg["cluster"]), tmp_path / "again", log=lambda *_: None)
    assert (tmp_path / "again" / "model.zip").read_bytes() == (model_dir / "model.zip").read_bytes()
    with zipfile.ZipFile(model_dir / "model.zip") as z:  # nothing of the process (addresses) in it
        assert b" at 0x" not in z.read("data") and "system_info.txt" not in z.namelist()
    assert (tmp_path / "again" / "train_ppo.json").read_bytes() == (model_dir / "train_ppo.json").read_bytes()
    assert [round(r["cost"], 6) for r in again["curve"]] == curve["cost"].tolist()

    # the conf entry's policy in simulate, on a workload of its own
    cluster = cluster_from_config(cfg["cluster"])
    tasks = generate(WorkloadSpec(rate=6.0), 60, np.random.default_rng(3), 0, cluster.cpu_gflops)
    real = cluster.sample_noise(len(tasks), np.random.default_rng(7))
    policy = instantiate(cfg["policies"]["machine"]["ppo_late"])
    assert policy.dispatch == "late" and policy.model_dir == model_dir
    tr = simulate(tasks, cluster, policy, real)
    assert np.isfinite(tr.end).all() and (tr.end >= tr.arrival).all()

    # the agent is MaskablePPO's deterministic action; driving the env it gives simulate's schedule
    agent, model = load(model_dir), MaskablePPO.load(model_dir / "model.zip", device="cpu")
    env = MachineLateEnv(tasks=tasks, cluster=cluster, noise_seed=7, max_candidates=agent.max_candidates)
    obs, info = env.reset(seed=0)
    terminated = False
    while not terminated:
        a = agent(obs, info["action_mask"])
        assert a == int(model.predict(obs, action_masks=info["action_mask"], deterministic=True)[0])
        obs, _, terminated, _, info = env.step(a)
    np.testing.assert_array_equal(env.trace().end, tr.end)


@pytest.mark.parametrize(("stage", "model", "header"), [("train_ppo", "ppo_late", "step,episode,cost"),
                                                     ("train_late", "late", "policy,step,cost")])
def test_another_kind_gets_not_applicable_outputs(tmp_path, stage, model, header):
    import importlib

    fn = getattr(importlib.import_module(f"stages.{stage}"), stage)
    m = fn(compose_run(*outputs_in(tmp_path), "workload=serving"))
    assert m["skipped"].startswith("not applicable to workload.kind 'serving'")
    assert json.loads((tmp_path / "models" / model / "skipped.json").read_text()) == m
    assert json.loads((tmp_path / "metrics" / f"{stage}.json").read_text()) == m
    assert (tmp_path / "metrics" / "plots" / f"{stage}.csv").read_text() == header + "\n"
