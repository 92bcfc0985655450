"""RLlib's PPO (new API stack) on the machine kind's late dispatch, on one machine or a Ray cluster.

``python -m hybridsched.rl.rllib_train --address auto --env-runners 2 --iterations 2 --out DIR``
attaches to a running Ray cluster (``ray start --head`` first; ``auto`` finds it, or
``RAY_ADDRESS`` names it), samples with ``--env-runners`` env-runner actors spread over the
cluster's machines, learns in this process and writes ``DIR/checkpoint`` (RLlib's
``Algorithm.save_to_path``) and ``DIR/returns.json`` (``iterations``: per iteration the mean
episode return and the episodes and steps sampled; ``env_runners``: the env runners that
sampled).  Without ``--address`` (and ``RAY_ADDRESS``) it starts a private Ray on this machine.
:func:`load_agent` turns the checkpoint into the ``(obs, mask) -> action`` callable that
``callable_late`` runs in ``simulate``.  docs/train-your-own-agent.md shows both.

Action masking: :class:`MaskedLateEnv` hands the env's mask to the agent inside a ``Dict``
observation (``observations``, ``action_mask``), and RLlib's own action-masking module
(``ray.rllib.examples.rl_modules.classes.action_masking_rlm.ActionMaskingTorchRLModule``, a
``PPOTorchRLModule`` that adds ``log(mask)`` to the logits) never samples an infeasible
candidate.  Ray and RLlib are imported inside the functions that need them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from hybridsched.errors import HybridschedError, ModelFileError

F32_MAX = float(np.finfo(np.float32).max)


class MaskedLateEnv(gym.Env):
    """``hybridsched/machine-late-v0`` with its mask inside the observation, as RLlib's
    action-masking module reads it: ``{"observations": the env's (max_candidates, 16) rows,
    flattened to float32; "action_mask": 1.0 for a feasible action, 0.0 otherwise}``.
    ``config`` holds :class:`~hybridsched.kinds.machine.env.MachineLateEnv`'s keywords (RLlib's
    ``env_config``); actions, rewards and episodes are the env's."""

    metadata = {"render_modes": []}

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        from hybridsched.kinds.machine.env import MachineLateEnv

        self.env = MachineLateEnv(**dict(config or {}))
        n_obs = int(np.prod(self.env.observation_space.shape))
        self.action_space = self.env.action_space
        self.observation_space = spaces.Dict({
            "action_mask": spaces.Box(0.0, 1.0, shape=(int(self.action_space.n),), dtype=np.float32),
            # the env's features lie in [0, 1]; its last column (a scaled finish time) has no bound
            "observations": spaces.Box(0.0, F32_MAX, shape=(n_obs,), dtype=np.float32),
        })

    def _wrap(self, obs: np.ndarray, info: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        mask = info.pop("action_mask").astype(np.float32)  # in the observation; not kept twice
        flat = np.clip(obs.reshape(-1), 0.0, F32_MAX).astype(np.float32)
        return {"action_mask": mask, "observations": flat}, info

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start an episode of the wrapped env (``seed`` seeds it)."""
        super().reset(seed=seed)
        return self._wrap(*self.env.reset(seed=seed, options=options))

    def step(self, action: int) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """One decision of the wrapped env."""
        obs, reward, terminated, truncated, info = self.env.step(int(action))
        wrapped, info = self._wrap(obs, info)
        return wrapped, float(reward), terminated, truncated, info


def build_config(env_config: dict[str, Any], env_runners: int, train_batch: int, seed: int) -> Any:
    """The ``PPOConfig``: :class:`MaskedLateEnv` with ``env_config``, ``env_runners`` env-runner
    actors of one CPU each (0: sampling in this process), ``train_batch`` steps per iteration,
    one learner in this process, RLlib's action-masking PPO module with two 64-unit layers."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.examples.rl_modules.classes.action_masking_rlm import ActionMaskingTorchRLModule

    return (
        PPOConfig()
        .environment(env=MaskedLateEnv, env_config=env_config)
        .env_runners(num_env_runners=env_runners, num_cpus_per_env_runner=1)
        .learners(num_learners=0)
        .training(train_batch_size_per_learner=train_batch, minibatch_size=min(128, train_batch), num_epochs=4,
                  lr=3e-4)
        .rl_module(rl_module_spec=RLModuleSpec(
            module_class=ActionMaskingTorchRLModule,
            model_config={"fcnet_hiddens": [64, 64], "head_fcnet_hiddens": [64]}))
        .debugging(seed=seed)
    )


def train(out: Path, address: str | None = None, env_runners: int = 2, iterations: int = 10,
          train_batch: int = 2000, n_tasks: int = 200, seed: int = 0) -> list[dict[str, Any]]:
    """Train for ``iterations`` PPO iterations on Ray at ``address`` (None: ``RAY_ADDRESS``'s, or
    a private Ray on this machine) and write ``out/checkpoint`` and ``out/returns.json``; the
    per-iteration rows (``returns.json``'s ``iterations``).  Each episode draws ``n_tasks``
    tasks of the default workload."""
    # bad settings stop here, before any Ray process starts (the env runners build the envs)
    for name, value, least in (("env_runners", env_runners, 0), ("iterations", iterations, 1),
                               ("train_batch", train_batch, 1), ("n_tasks", n_tasks, 1)):
        if value < least:
            raise HybridschedError(f"rllib_train: {name} must be >= {least}, got {value}")
    env_config = {"n_tasks": n_tasks}
    import ray
    from ray.rllib.utils.metrics import (ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN, NUM_ENV_STEPS_SAMPLED_LIFETIME,
                                         NUM_EPISODES)

    address = address or os.environ.get("RAY_ADDRESS") or None  # as ray.init reads it
    if address is None:
        # a small object store: the batches are a few MB
        ray.init(num_cpus=env_runners + 1, object_store_memory=100 * 2**20, include_dashboard=False)
    else:
        ray.init(address=address)
    rows: list[dict[str, Any]] = []
    try:
        algo = build_config(env_config, env_runners, train_batch, seed).build_algo()
        try:
            for i in range(1, iterations + 1):
                res = algo.train()[ENV_RUNNER_RESULTS]
                ret = float(res.get(EPISODE_RETURN_MEAN, math.nan))
                rows.append({"iteration": i, "episode_return_mean": ret if math.isfinite(ret) else None,
                             "episodes": int(res.get(NUM_EPISODES, 0)),
                             "env_steps_lifetime": int(res.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0))})
                print(f"iteration {i}: episode return {ret:.2f} ({rows[-1]['episodes']} episodes)", flush=True)
            # written beside, then moved in: DIR never holds half a checkpoint
            out.mkdir(parents=True, exist_ok=True)
            part = out / "checkpoint.partial"
            shutil.rmtree(part, ignore_errors=True)
            algo.save_to_path(str(part.resolve()))
            shutil.rmtree(out / "checkpoint", ignore_errors=True)
            part.rename(out / "checkpoint")
            summary = {"env_runners": algo.env_runner_group.num_healthy_remote_workers(), "iterations": rows}
            (out / "returns.json.partial").write_text(json.dumps(summary, indent=1) + "\n")
            (out / "returns.json.partial").replace(out / "returns.json")
        finally:
            algo.stop()
    finally:
        ray.shutdown()
    return rows


def load_agent(path: str | Path) -> Any:
    """The policy of a checkpoint :func:`train` wrote (``DIR/checkpoint``) as a callable
    ``(obs, mask) -> action`` (the most likely feasible action), the form ``callable_late``
    (``kinds/machine/policies/late_callable.py``) runs in ``simulate``; no Ray cluster needed."""
    import torch
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModule

    module_dir = Path(path) / "learner_group" / "learner" / "rl_module" / "default_policy"
    if not module_dir.is_dir():
        raise ModelFileError(f"{path}: not a checkpoint of python -m hybridsched.rl.rllib_train "
                             f"(no {module_dir.relative_to(path)})")
    module = RLModule.from_checkpoint(str(module_dir.resolve()))

    def act(obs: np.ndarray, mask: np.ndarray) -> int:
        batch = {Columns.OBS: {
            "observations": torch.as_tensor(np.clip(obs.reshape(1, -1), 0.0, F32_MAX), dtype=torch.float32),
            "action_mask": torch.as_tensor(np.asarray(mask, dtype=np.float32).reshape(1, -1))}}
        with torch.no_grad():
            logits = module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS]
        return int(torch.argmax(logits[0]))

    return act


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m hybridsched.rl.rllib_train --help``."""
    p = argparse.ArgumentParser(prog="python -m hybridsched.rl.rllib_train", description=__doc__.splitlines()[0])
    p.add_argument("--address", default=None,
                   help="Ray cluster to attach to (auto, or HOST:PORT); default: RAY_ADDRESS's, "
                        "or a private Ray on this machine")
    p.add_argument("--env-runners", type=_count, default=2, help="env-runner actors sampling in parallel (default 2)")
    p.add_argument("--iterations", type=_positive, default=10, help="PPO iterations (default 10)")
    p.add_argument("--train-batch", type=_positive, default=2000, help="env steps per iteration (default 2000)")
    p.add_argument("--n-tasks", type=_positive, default=200, help="tasks per episode (default 200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True, help="folder for checkpoint/ and returns.json")
    args = p.parse_args(argv)
    try:
        train(args.out, args.address, args.env_runners, args.iterations, args.train_batch, args.n_tasks, args.seed)
    except HybridschedError as err:
        print(str(err), file=sys.stderr)
        return 1
    except ConnectionError as err:  # no Ray cluster at --address
        print(f"rllib_train: --address {args.address}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
