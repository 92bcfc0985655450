"""The cluster kind's queue mode as a Gymnasium env (``kinds/cluster/env.py``).

The env steps the queue engine's run (``queue_engine.QueueRun``) pod by pod: driven by a queue
order's own picks it must give ``simulate_queue``'s greedy schedule for that order, pod for pod,
and its return must be minus the total JCT over the episode's scale."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import hybridsched.envs  # noqa: F401  (registers the id)
from hybridsched.kinds.cluster.env import ENV_ID, N_FEATURES, ClusterQueueEnv, env_kwargs_from_config
from hybridsched.kinds.cluster.policies import EarliestFinishTime
from hybridsched.kinds.cluster.queue_engine import simulate_queue
from hybridsched.kinds.cluster.queue_order import ORDERS, HighestSlowdown, LearnedOrder, ShortestFirst
from hybridsched.kinds.cluster.trace import read_pod_trace
from tests.env_checks import check_env_warnings, drive, sync_and_async_agree

DATA = Path(__file__).parent / "data"
# the fixture's 160 pods with creation times / 30: about half of them wait, so the order matters
FIXTURE = {"pods": str(DATA / "pods.csv"), "nodes": str(DATA / "nodes.csv"), "gavel_path": str(DATA / "gavel.json"),
           "time_compression": 30.0}


def test_env_passes_gymnasium_check_env_without_warnings():
    for kw in ({}, {"window": (20, 40), "load": (0.5, 2.0), "max_candidates": 4}):
        env = gym.make(ENV_ID, **FIXTURE, **kw)
        assert not check_env_warnings(env.unwrapped), kw
        assert env.observation_space.shape == (env.unwrapped.max_candidates, N_FEATURES)
        assert env.action_space.n == env.unwrapped.max_candidates


def _order(name: str):
    """An order by name; ``learned``: weights on the state (wait, backlog, what fits now)."""
    if name == "learned":
        return LearnedOrder({"wait_ratio": -1.0, "fits_now": -0.5, "slow_now": 0.7, "backlog_short": 0.5})
    return ORDERS[name]()


@pytest.mark.parametrize("name", ["fifo", "sjf", "slowdown", "learned"])
def test_driven_by_an_order_the_env_gives_simulate_queues_greedy_schedule(name):
    """Each step takes the candidate the order ranks first (its scores at the pass's start, as
    ``simulate_queue`` computes them): start, end, node and GPUs of every pod are the engine's."""
    env = ClusterQueueEnv(**FIXTURE, max_candidates=200)
    order = _order(name)
    times, rewards, info = drive(env, lambda e, obs, info: e.policy_action(order))
    eft = EarliestFinishTime()
    eft.fit(env.pods)
    ref = simulate_queue(env.inp, env.cluster, eft, _order(name), "greedy").trace
    got = env.trace()
    for f in ("start", "end", "node", "gpu_mask"):
        np.testing.assert_array_equal(getattr(got, f), getattr(ref, f), err_msg=f)
    assert len(times) == len(env.inp)  # one decision per pod
    assert info["mean_jct"] == pytest.approx(float(np.mean(ref.end - env.inp.arrival)), rel=1e-12)
    # the first decision is at the first arrival: the return is minus the total JCT over m
    assert times[0] == env.inp.arrival[0]
    assert sum(rewards) == pytest.approx(-float(np.sum(ref.end - env.inp.arrival)) / env._m, rel=1e-9)


def test_the_order_decides_the_schedule_here():
    """On this load fifo and shortest-first differ, so the equality test above can fail."""
    ends = []
    for order in (ORDERS["fifo"](), ShortestFirst()):
        env = ClusterQueueEnv(**FIXTURE, max_candidates=200)
        drive(env, lambda e, obs, info, o=order: e.policy_action(o))
        ends.append(env.trace().end)
    assert not np.array_equal(*ends)


def test_masks_candidates_and_an_infeasible_action():
    env = ClusterQueueEnv(**FIXTURE, max_candidates=3)
    obs, info = env.reset(seed=0)
    seen_full = seen_part = False
    while True:
        mask = env.action_masks()
        c = info["candidates"]
        assert mask.dtype == bool and mask.shape == (3,) and np.array_equal(mask, info["action_mask"])
        assert mask[:min(c, 3)].all() and not mask[min(c, 3):].any() and c >= 1
        assert not obs[min(c, 3):].any() and obs[:min(c, 3)].min() >= 0
        # a candidate is a pending pod that fits some node now, in arrival order
        run = env._run
        pend = np.array(run.queue)
        fits = pend[run.state.fits(env.inp, pend, run.all_nodes).any(axis=1)]
        np.testing.assert_array_equal(env._cand, fits)
        seen_full |= c > 3
        seen_part |= c < 3
        obs, r, done, _, info = env.step(0)
        if done:
            break
    assert seen_full and seen_part and info["pods_done"] == len(env.inp) and not env.action_masks().any()
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    # a masked-out action starts candidate 0 and says so
    env.reset(seed=0)
    while env.action_masks().all():
        env.step(0)
    bad = int(np.flatnonzero(~env.action_masks())[0])
    state = (env.trace().start.copy(), env._area_at)
    after_bad = env.step(bad)
    env.reset(seed=0)
    while not np.array_equal(env.trace().start, state[0], equal_nan=True):
        env.step(0)
    after_0 = env.step(0)
    assert after_bad[4]["action_valid"] is False and after_0[4]["action_valid"] is True
    np.testing.assert_array_equal(after_bad[0], after_0[0])


def test_a_pick_past_max_candidates_is_refused():
    env = ClusterQueueEnv(**FIXTURE, max_candidates=1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="past max_candidates"):
        while True:
            env.step(env.policy_action(HighestSlowdown()))


def test_reset_seed_reproduces_a_window_episode_and_other_seeds_differ():
    env = ClusterQueueEnv(**FIXTURE, window=(30, 60), load=(0.5, 2.0), max_candidates=8)
    rng = np.random.default_rng(0)

    def episode(seed):
        _, rewards, info = drive(env, lambda e, obs, info: int(rng.choice(np.flatnonzero(info["action_mask"]))),
                                  seed=seed)
        return sum(rewards), len(env.inp), env.trace().end.copy()

    rng = np.random.default_rng(0)
    a = episode(7)
    rng = np.random.default_rng(0)
    b = episode(7)
    c = episode(8)
    assert a[0] == b[0] and a[1] == b[1] and np.array_equal(a[2], b[2])
    assert (a[0], a[1]) != (c[0], c[1])
    assert 30 <= a[1] <= 60


def test_sync_and_async_vector_envs_run_two_envs_alike():
    sync_and_async_agree(lambda: gym.make(ENV_ID, **FIXTURE, window=(10, 20), max_candidates=4), 60, lambda m: int(np.flatnonzero(m)[-1]))

def test_env_kwargs_from_the_composed_config_name_the_generate_stages_files(tmp_path):
    """The pipeline's files: the split's and the node sample's parquet, the node policy fitted
    on the training split; the env reads them as the stages write them."""
    from hybridsched.io import write_frame
    from hybridsched.kinds.cluster.trace import chronological_split, read_node_list

    pods = read_pod_trace(DATA / "pods.csv", 30.0)[0]
    train, test = chronological_split(pods, 0.5)
    write_frame(tmp_path / "train.parquet", train.to_frame())
    write_frame(tmp_path / "test.parquet", test.to_frame())
    write_frame(tmp_path / "nodes.parquet", read_node_list(DATA / "nodes.csv").to_frame())
    cfg = {"workload": {"kind": "cluster"}, "paths": {"workload_dir": str(tmp_path)},
           "nodes": {"gavel_path": str(DATA / "gavel.json"), "reference_model": "G2"}}
    env = ClusterQueueEnv(**env_kwargs_from_config(cfg), max_candidates=200)
    order = ShortestFirst()
    drive(env, lambda e, obs, info: e.policy_action(order))
    eft = EarliestFinishTime()
    eft.fit(train)
    ref = simulate_queue(env.inp, env.cluster, eft, ShortestFirst(), "greedy").trace
    np.testing.assert_array_equal(env.trace().end, ref.end)
    assert len(env.inp) == len(test)


def test_the_documented_snippet_makes_the_env_and_an_episode_runs(monkeypatch):
    """docs/train-your-own-agent.md's cluster snippet, run as written (from the repository root)."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "train-your-own-agent.md").read_text()
    section = text.split("## The cluster kind's queue order", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(root)
    scope: dict = {}
    exec(compile(code, "train-your-own-agent.md", "exec"), scope)
    env = scope["env"]
    _, rewards, info = drive(env, lambda e, obs, info: int(np.flatnonzero(info["action_mask"])[0]))
    assert 50 <= len(env.unwrapped.inp) <= 100 and info["mean_jct"] > 0 and sum(rewards) < 0
