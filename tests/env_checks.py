"""Checks every Gymnasium environment's tests share (tests/{machine,cluster,serving}/test_env.py)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env


def check_env_warnings(env: gym.Env) -> list[str]:
    """The warnings ``check_env`` raises on ``env`` (its own failures raise): a clean env has none."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    return [str(w.message) for w in caught]


def drive(env: gym.Env, choose: Callable, seed: int = 0) -> tuple[list[float], list[float], dict]:
    """One episode with ``choose(env, obs, info) -> action``: (decision times, rewards, last info)."""
    obs, info = env.reset(seed=seed)
    times, rewards = [], []
    while True:
        assert obs in env.observation_space
        times.append(info["time"])
        obs, r, terminated, truncated, info = env.step(choose(env, obs, info))
        rewards.append(r)
        assert not truncated
        if terminated:
            return times, rewards, info


def _rollout(vec: gym.vector.VectorEnv, steps: int, pick: Callable[[np.ndarray], int]) -> tuple[np.ndarray, np.ndarray]:
    """``steps`` steps of ``vec`` (seeded 1, 2), each env taking ``pick(mask)``: (rewards, terminations)."""
    obs, infos = vec.reset(seed=[1, 2])
    rewards, ends = [], []
    for _ in range(steps):
        # 0 on an autoreset step (an empty mask), where the action is ignored
        acts = np.array([pick(m) if m.any() else 0 for m in infos["action_mask"]])
        obs, r, term, trunc, infos = vec.step(acts)
        rewards.append(r)
        ends.append(term)
    return np.asarray(rewards), np.asarray(ends)


def sync_and_async_agree(make: Callable[[], gym.Env], steps: int,
                         pick: Callable[[np.ndarray], int] = lambda m: int(np.flatnonzero(m)[0])) -> None:
    """Two envs of ``make`` under SyncVectorEnv and AsyncVectorEnv: each finishes episodes and is
    reset, and both vector envs give the same rewards and terminations, bit for bit."""
    fns = [make for _ in range(2)]
    sync, asyn = gym.vector.SyncVectorEnv(fns), gym.vector.AsyncVectorEnv(fns)
    try:
        r_sync, end_sync = _rollout(sync, steps, pick)
        r_async, end_async = _rollout(asyn, steps, pick)
    finally:
        sync.close()
        asyn.close()
    assert end_sync.sum(axis=0).min() >= 2  # each env finished episodes and was reset
    np.testing.assert_array_equal(end_sync, end_async)
    np.testing.assert_array_equal(r_sync, r_async)
