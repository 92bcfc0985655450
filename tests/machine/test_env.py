"""The machine kind's late dispatch as a Gymnasium env (``kinds/machine/env.py``), and the
``callable_late`` adapter that runs an outside policy in ``simulate``.

The env steps the late engine decision by decision (``late_steps.py``): driven by a late
heuristic's own picks it must give that heuristic's schedule, task for task, and its rewards
must be the late learners' (``late_dqn_train.decision_rewards``)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields

import gymnasium as gym
import numpy as np
import pytest

import hybridsched.envs  # noqa: F401  (registers the id)
from hybridsched.devices import Cluster
from hybridsched.kinds.base import instantiate
from hybridsched.kinds.machine.env import DEFAULT_WORKLOAD, ENV_ID, MachineLateEnv, env_kwargs_from_config
from hybridsched.kinds.machine.late_choice import N_OBS
from hybridsched.kinds.machine.late_dqn_train import decision_rewards
from hybridsched.kinds.machine.policies.late import EFTLate, SPTLate
from hybridsched.kinds.machine.policies.late_callable import CallableLate
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.workload import WorkloadSpec, generate, spec_from_config
from tests.machine.env_agents import eft_plain, first_feasible
from tests.env_checks import check_env_warnings, drive, sync_and_async_agree

CLUSTER = Cluster(n_gpus=2)


def _tasks(n: int = 400, seed: int = 3, **spec):
    """A loaded workload of DAG jobs with priorities: pools of several tasks, released children."""
    return generate(WorkloadSpec(**{"rate": 7.0, "dag_job_size": 6, "priority_levels": 3, **spec}), n,
                    np.random.default_rng(seed), 0, CLUSTER.cpu_gflops)


def _same_schedule(a, b) -> None:
    """Every per-task column of two traces equal (NaN where a part did not run)."""
    for f in fields(a):
        if f.name != "policy":
            np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name), err_msg=f.name)


def test_env_passes_gymnasium_check_env_without_warnings():
    for kw in ({}, {"allow_wait": True, "max_candidates": 4}):
        env = gym.make(ENV_ID, n_tasks=40, **kw)
        assert not check_env_warnings(env.unwrapped), kw
        assert env.observation_space.shape == (env.unwrapped.max_candidates, N_OBS)
        assert env.action_space.n == env.unwrapped.max_candidates + (1 if kw else 0)


def test_make_finds_the_id_in_a_fresh_process():
    """Gymnasium 1.x reads no plugin entry points: the id is known after ``import hybridsched.envs``,
    or with the module in the id; ``make`` with no arguments is the small default episode."""
    code = ("import gymnasium as gym\n"
            "e = gym.make('hybridsched.envs:hybridsched/machine-late-v0')\n"
            "assert e.unwrapped.n_tasks == 200 and e.unwrapped._tasks is None, e\n"
            "e = gym.make('hybridsched/machine-late-v0', max_candidates=8)\n"
            "assert e.action_space.n == 8\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_default_episode_draws_the_default_workload():
    """The env's default distribution is conf/workload/default.yaml's (its test split)."""
    from tests.runs import compose_run

    cfg = compose_run().cfg
    assert MachineLateEnv()._spec == spec_from_config(cfg["workload"], "test") == spec_from_config(DEFAULT_WORKLOAD)


@pytest.mark.parametrize("policy", [EFTLate, SPTLate], ids=["eft_late", "spt_late"])
def test_driven_by_a_heuristic_the_env_gives_its_simulated_schedule(policy):
    """Each step takes the action the heuristic's kernel picks in the env's state: the episode's
    schedule is the simulator's for that heuristic, task for task (start, end, device, split)."""
    tasks = _tasks()
    env = MachineLateEnv(tasks=tasks, cluster=CLUSTER, noise_seed=5, max_candidates=2 * len(tasks))
    p = policy()
    times, rewards, info = drive(env, lambda e, obs, info: e.policy_action(p))
    ref = simulate(tasks, CLUSTER, policy(), env.realization)
    _same_schedule(env.trace(), ref)
    assert info["mean_latency"] == pytest.approx(float(np.mean(ref.end - ref.arrival)), abs=1e-9)
    assert len(times) == len(tasks)  # no wait action: one decision per task


def test_rewards_are_the_late_learners_and_return_is_minus_total_latency_over_m():
    env = MachineLateEnv(tasks=_tasks(300), cluster=CLUSTER, noise_seed=1, max_candidates=6)
    rng = np.random.default_rng(0)
    times, rewards, info = drive(env, lambda e, obs, info: rng.choice(np.flatnonzero(info["action_mask"])))
    tr = env.trace()
    np.testing.assert_allclose(rewards, decision_rewards(np.asarray(times), tr.arrival, tr.end, env._m),
                               rtol=1e-9, atol=1e-9)
    # the first decision is at the first arrival: the return covers every task's whole latency
    assert times[0] == tr.arrival[0]
    assert sum(rewards) == pytest.approx(-float(np.sum(tr.end - tr.arrival)) / env._m, rel=1e-9)


def test_mask_info_and_an_infeasible_action():
    env = MachineLateEnv(tasks=_tasks(200), cluster=CLUSTER, noise_seed=1, max_candidates=5, allow_wait=True)
    obs, info = env.reset(seed=0)
    mask = env.action_masks()
    assert mask.dtype == bool and mask.shape == (6,) and np.array_equal(mask, info["action_mask"])
    assert mask[: min(info["candidates"], 5)].all() and not mask[info["candidates"]:5].any()
    assert not mask[5]  # every device idle at the first arrival: waiting could stall the run
    assert obs in env.observation_space and not obs[min(info["candidates"], 5):].any()
    masked_out = int(np.flatnonzero(~mask)[0])
    after_bad = env.step(masked_out)
    env.reset(seed=0)
    after_0 = env.step(0)
    assert after_bad[4]["action_valid"] is False and after_0[4]["action_valid"] is True
    np.testing.assert_array_equal(after_bad[0], after_0[0])  # an infeasible action runs candidate 0
    seen_wait = False
    while True:  # the wait action, while a device is busy, leaves the idle ones idle
        mask = env.action_masks()
        obs, r, done, _, info = env.step(5 if mask[5] else 0)
        seen_wait |= bool(mask[5])
        if done:
            break
    assert seen_wait and info["tasks_done"] == 200 and not env.action_masks().any()
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


def test_reset_seed_reproduces_an_episode_and_other_seeds_differ():
    env = MachineLateEnv(n_tasks=60, cluster=CLUSTER)

    def episode(seed):
        obs, info = env.reset(seed=seed)
        total = 0.0
        while True:
            obs, r, done, _, info = env.step(0)
            total += r
            if done:
                return total, env.trace().end.copy()

    a, b, c = episode(7), episode(7), episode(8)
    assert a[0] == b[0] and np.array_equal(a[1], b[1])
    assert a[0] != c[0]


def test_sync_and_async_vector_envs_run_two_envs_alike():
    sync_and_async_agree(lambda: gym.make(ENV_ID, n_tasks=25, max_candidates=8), 80)

def test_env_from_the_composed_config_replays_the_simulate_stage(tmp_path):
    """``env_kwargs_from_config`` gives the simulate stage's inputs (its test split, cluster and
    noise): the env driven by the stage's eft_late is the stage's eft_late trace."""
    import pandas as pd

    from hybridsched.kinds.machine.stages import simulate as simulate_stage
    from tests.runs import compose_run, outputs_in

    run = compose_run(*outputs_in(tmp_path), "workload.n_test=300", "sim.bound_lp.enabled=false",
                      in_memory=True, policy="eft_late")
    simulate_stage(run)
    stage = pd.read_parquet(tmp_path / "data" / "traces" / "eft_late.parquet")
    env = MachineLateEnv(**env_kwargs_from_config(run.cfg), max_candidates=1000)
    p = run.build_policies()["eft_late"]
    drive(env, lambda e, obs, info: e.policy_action(p))
    tr = env.trace().to_frame()
    for col in ("gpu", "fraction", "cpu_start", "gpu_start", "end", "energy_j"):
        np.testing.assert_array_equal(tr[col].to_numpy(), stage[col].to_numpy(), err_msg=col)
    gen = env_kwargs_from_config(run.cfg, generated=True, n_tasks=50)
    assert MachineLateEnv(**gen)._spec == spec_from_config(run.cfg["workload"], "test") and gen["n_tasks"] == 50


def test_a_heuristic_pick_outside_the_candidates_window_is_refused():
    env = MachineLateEnv(tasks=_tasks(400, rate=14.0), cluster=CLUSTER, noise_seed=1, max_candidates=1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="not among the first 1"):
        while True:
            env.step(env.policy_action(SPTLate()))


def test_callable_adapter_runs_an_outside_policy_in_simulate():
    """A callable reading eft_late's choice off the observation is eft_late in ``simulate``; the
    adapter built from a YAML node (an import path; one plain function, one factory with
    ``policy_kwargs``) gives the schedule the same callable gives driving the env."""
    tasks = _tasks(300)
    real = CLUSTER.sample_noise(len(tasks), np.random.default_rng(9))
    ref = simulate(tasks, CLUSTER, EFTLate(), real)
    _same_schedule(simulate(tasks, CLUSTER, CallableLate(eft_plain, max_candidates=1000), real), ref)
    for node in ({"policy": "tests.machine.env_agents:first_feasible", "max_candidates": 4, "allow_wait": True},
                 {"policy": "tests.machine.env_agents:make_eft_plain", "policy_kwargs": {"scale": 2.0},
                  "max_candidates": 6}):
        adapter = instantiate({"_target_": "hybridsched.kinds.machine.policies.late_callable.CallableLate", **node})
        assert adapter.dispatch == "late"
        act = first_feasible if "first" in node["policy"] else eft_plain
        env = MachineLateEnv(tasks=tasks, cluster=CLUSTER, noise_seed=9, max_candidates=node["max_candidates"],
                             allow_wait=node.get("allow_wait", False))
        drive(env, lambda e, obs, info: act(obs, info["action_mask"]))
        _same_schedule(simulate(tasks, CLUSTER, adapter, real), env.trace())


def test_callable_adapter_refuses_a_bad_path():
    from hybridsched.errors import HybridschedError

    with pytest.raises(HybridschedError, match="module:attribute"):
        CallableLate("no_colon").load()
    with pytest.raises(HybridschedError, match="cannot import"):
        CallableLate("tests.machine.env_agents:missing").load()


def test_bench_env_steps_run():
    """The benchmark's loop (``--smoke`` runs it under ``make bench``), on a tiny episode."""
    from benchmarks.bench_env import run_steps

    wall, cpu, episodes = run_steps(MachineLateEnv(n_tasks=20, cluster=CLUSTER), 100)
    assert episodes >= 4 and wall > 0 and cpu >= 0
