"""The machine kind's DQN training loop (the action space, reward and model files: ``dqn.py``;
the acting policy: ``policies/dqn.py``).

Apart from both so that neither imports the other: the policy reads the reward and the saved
model from ``dqn.py``, and this loop drives the policy.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from hybridsched.devices import Cluster
from hybridsched.kinds.machine.dqn import DQNSettings, TrainResult
from hybridsched.kinds.machine.dqn_state import StateSpec
from hybridsched.kinds.machine.workload import TaskTable
from hybridsched.progress import progress
from hybridsched.rl.dqn import DQNLearner, linear_schedule


def train(tasks: TaskTable, cluster: Cluster, settings: DQNSettings,
          on_episode: Callable[[dict[str, float]], None] | None = None) -> TrainResult:
    """Train in the simulator for ``settings.episodes`` passes over ``tasks``."""
    from hybridsched.kinds.machine.policies.dqn import DQNPolicy
    from hybridsched.kinds.machine.engine import simulate, task_matrix

    start = time.perf_counter()
    noise_rng, act_rng, replay_rng = np.random.default_rng(settings.seed).spawn(3)
    spec = StateSpec.fit(task_matrix(tasks, cluster), cluster, settings.fractions)
    learner = DQNLearner(spec.n_state, spec.n_actions, settings, replay_rng)
    decay = settings.exploration_fraction * settings.episodes * len(tasks)

    def epsilon_at(step: int) -> float:
        return linear_schedule(settings.start_e, settings.end_e, decay, step)

    policy = DQNPolicy.for_training(learner, spec, settings, epsilon_at, act_rng, settings.observe_every)
    history: list[dict[str, float]] = []
    for episode in progress(range(1, settings.episodes + 1), desc="train_dqn", unit="episode"):
        n_losses = len(learner.losses)
        epsilon = epsilon_at((episode - 1) * len(tasks))
        trace = simulate(tasks, cluster, policy, cluster.sample_noise(len(tasks), noise_rng))
        policy.finish_run(trace)
        losses = learner.losses[n_losses:]
        row = {
            "episode": episode,
            "mean_reward": policy.reward_sum / max(policy.n_rewards, 1),
            "loss": float(np.mean(losses)) if losses else float("nan"),
            "epsilon": float(epsilon),
            "mean_latency": float(np.mean(trace.end - trace.arrival)),
            "makespan": float(np.max(trace.end) - trace.arrival[0]),
            "energy_j": float(trace.energy_j.sum()),
            "grad_steps": learner.grad_steps,
            "wall_s": time.perf_counter() - start,
        }
        history.append(row)
        if on_episode:
            on_episode(row)
    return TrainResult(learner, spec, settings, history, time.perf_counter() - start)
