"""The machine kind's arrival dispatch as a Gymnasium env (``kinds/machine/arrival_env.py``).

The env steps a copy of the arrival engine's loop body one decision at a time: driven by an
arrival heuristic's own choices it must give ``simulate``'s schedule for that heuristic, task for
task, and its rewards must be the arrival DQN's (``dqn.reward``)."""

from __future__ import annotations

from dataclasses import fields

import gymnasium as gym
import numpy as np
import pytest

import hybridsched.envs  # noqa: F401  (registers the id)
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.arrival_env import ENV_ID, MachineArrivalEnv
from hybridsched.kinds.machine.dqn import DQNSettings, reward
from hybridsched.kinds.machine.engine import MAX_F
from hybridsched.kinds.machine.policies.classic import RoundRobin
from hybridsched.kinds.machine.policies.eft import EarliestFinishTime
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.workload import WorkloadSpec, generate
from tests.env_checks import check_env_warnings, drive, sync_and_async_agree

CLUSTER = Cluster(n_gpus=2)


def _tasks(n: int = 300, seed: int = 3, **spec):
    """A loaded workload of DAG jobs: released children join the arrivals in the event order."""
    return generate(WorkloadSpec(**{"rate": 7.0, "dag_job_size": 6, **spec}), n, np.random.default_rng(seed), 0,
                    CLUSTER.cpu_gflops)


def _same_schedule(a, b) -> None:
    """Every per-task column of two traces equal (NaN where a part did not run)."""
    for f in fields(a):
        if f.name != "policy":
            np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name), err_msg=f.name)


def test_env_passes_gymnasium_check_env_without_warnings():
    env = gym.make(ENV_ID, n_tasks=30)
    assert not check_env_warnings(env.unwrapped)
    env.reset(seed=0)
    spec = env.unwrapped.state_spec  # the arrival DQN's spaces
    n_gpus = env.unwrapped.cluster.n_gpus
    assert env.action_space.n == spec.n_actions == 1 + 4 * n_gpus
    assert env.observation_space.shape == (spec.n_state,)


# round_robin places tasks whole: on GPUs with room for every task, so each choice is an action
ROOMY = Cluster(n_gpus=2, gpu_mem_mb=64000.0)


@pytest.mark.parametrize("make_policy,cluster", [(lambda: EarliestFinishTime(fraction_step=0.25), CLUSTER),
                                                 (RoundRobin, ROOMY)], ids=["eft", "round_robin"])
def test_driven_by_a_heuristic_the_env_gives_its_simulated_schedule(make_policy, cluster):
    """Each step takes the action the heuristic chooses in the env's state: the episode's schedule
    is ``simulate``'s for that heuristic, task for task; its rewards are the DQN's of each task."""
    tasks = _tasks()
    env = MachineArrivalEnv(tasks=tasks, cluster=cluster, noise_seed=5)
    p = make_policy()
    order: list[int] = []  # the task of each decision

    def choose(e, obs, info):
        order.append(info["task"])
        return e.policy_action(p)

    times, rewards, info = drive(env, choose)
    ref = simulate(tasks, cluster, make_policy(), env.realization)
    _same_schedule(env.trace(), ref)
    assert len(times) == len(tasks) and info["tasks_placed"] == len(tasks)
    assert sorted(order) == list(range(len(tasks)))
    assert info["mean_latency"] == float(np.mean(ref.end - ref.arrival))
    np.testing.assert_array_equal(times, ref.ready[order])  # each task decided when it became ready
    np.testing.assert_allclose(rewards, reward(DQNSettings(), env.unwrapped.state_spec, (ref.end - ref.ready)[order],
                                               ref.energy_j[order]), rtol=1e-12)


def test_the_two_heuristics_give_different_schedules():
    tasks = _tasks(100)
    ends = []
    for p in (EarliestFinishTime(fraction_step=0.25), RoundRobin()):
        env = MachineArrivalEnv(tasks=tasks, cluster=ROOMY, noise_seed=5)
        drive(env, lambda e, obs, info: e.policy_action(p))
        ends.append(env.trace().end)
    assert not np.array_equal(*ends)


def test_mask_refuses_fractions_past_gpu_memory_and_a_masked_action_runs_cpu():
    """Tasks larger than GPU memory: their GPU actions past ``gpu_mem / memory`` are masked out;
    a masked-out action places the task on the CPU only, flagged invalid."""
    small = Cluster(n_gpus=2, gpu_mem_mb=300.0)
    env = MachineArrivalEnv(n_tasks=80, cluster=small)
    obs, info = env.reset(seed=0)
    seen = False
    while True:
        mask = env.action_masks()
        assert mask[0] and np.array_equal(mask, info["action_mask"])
        np.testing.assert_array_equal(mask[1:], env._frac[1:] <= env.X[info["task"], MAX_F])
        bad = np.flatnonzero(~mask)
        i = info["task"]
        obs, r, done, _, info = env.step(int(bad[0]) if len(bad) else 1)
        if len(bad):
            seen = True
            assert info["action_valid"] is False and env.trace().gpu[i] == -1 and env.trace().fraction[i] == 0.0
        else:
            assert info["action_valid"] is True and env.trace().gpu[i] == 0
        if done:
            break
    assert seen and not env.action_masks().any() and not obs.any()
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


def test_reset_seed_reproduces_an_episode_and_other_seeds_differ():
    env = MachineArrivalEnv(n_tasks=60, cluster=CLUSTER)

    def episode(seed):
        rewards = drive(env, lambda e, obs, info: 1, seed=seed)[1]
        return rewards, env.trace().end.copy()

    a, b, c = episode(7), episode(7), episode(8)
    assert a[0] == b[0] and np.array_equal(a[1], b[1])
    assert a[0] != c[0]


def test_sync_and_async_vector_envs_run_two_envs_alike():
    sync_and_async_agree(lambda: gym.make(ENV_ID, n_tasks=25), 60)


def test_the_docs_snippet_makes_an_env_that_eft_drives_like_simulate(monkeypatch):
    """docs/train-your-own-agent.md's arrival snippet, run as written after the page's imports;
    eft with the action table's fractions then gives its simulated schedule."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "train-your-own-agent.md").read_text()
    section = text.split("## The machine kind's arrival mode", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(root)
    scope: dict = {"gym": gym}  # the page's first snippet imports it
    exec(compile(code, "train-your-own-agent.md", "exec"), scope)
    env = scope["env"].unwrapped
    p = EarliestFinishTime(fraction_step=0.25)
    drive(env, lambda e, obs, info: e.unwrapped.policy_action(p))
    assert len(env.tasks) == 100
    _same_schedule(env.trace(), simulate(env.tasks, env.cluster, EarliestFinishTime(fraction_step=0.25),
                                         env.realization))


def test_policy_action_refuses_a_late_policy_and_a_fraction_off_the_table():
    from hybridsched.kinds.machine.policies.classic import Greedy
    from hybridsched.kinds.machine.policies.late import EFTLate

    env = MachineArrivalEnv(tasks=_tasks(50), cluster=ROOMY, noise_seed=1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="not a plain arrival policy"):
        env.policy_action(EFTLate())
    with pytest.raises(ValueError, match="not a feasible action"):
        while True:  # greedy's fraction is the task's intensity
            env.step(env.policy_action(Greedy()))


def test_env_kwargs_from_the_composed_config_take_the_dqn_action_space_and_reward():
    from hybridsched.kinds.machine.arrival_env import env_kwargs_from_config
    from tests.runs import compose_run

    cfg = compose_run("dqn.fractions=[0.5,1.0]", "dqn.alpha=0.8").cfg
    env = MachineArrivalEnv(**env_kwargs_from_config(cfg, generated=True, n_tasks=20))
    assert env.fractions == (0.5, 1.0) and env.alpha == 0.8 and env.beta == float(cfg["dqn"]["beta"])
    assert env.action_space.n == 1 + 2 * env.cluster.n_gpus and env.n_tasks == 20
    kw = env_kwargs_from_config(cfg)  # the simulate stage's test split and noise
    assert kw["noise_seed"] == int(cfg["sim"]["seed"]) and len(kw["tasks"]) == int(cfg["workload"]["n_test"])


def test_bench_env_arrival_row_runs():
    """The benchmark's ``arrival_make`` row (``--smoke`` runs it under ``make bench``), on tiny episodes."""
    from benchmarks.bench_env import arrival_row

    row = arrival_row(100, {"n_tasks": 20, "cluster": CLUSTER})
    assert row["env"] == "arrival_make" and row["episodes"] >= 4 and row["steps_per_s"] > 0
