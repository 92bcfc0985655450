"""Training the node-cluster DQN (the policy, and saving and loading it: ``kinds/cluster/dqn.py``).

Reuses the shared RL core (``rl/dqn.py``): ``DQNSettings``, the dueling ``QNetwork``,
``DQNLearner`` (replay buffer, target network, Huber TD steps) and the linear epsilon
schedule; the reward is the environment's (``kinds/cluster/dqn.py``).  One episode = one simulated run over the training split; ``time_scale`` is
the median cost per decision of a calibration run that always takes action 0 (fastest model;
the median, because a few months-long services would set the mean).
torch is imported inside the functions.
"""

from __future__ import annotations

import time

import numpy as np

from hybridsched.kinds.cluster.trace import PodTable
from hybridsched.kinds.cluster.nodes import CPU_MODEL, NodeCluster, run_inputs
from hybridsched.kinds.cluster.dqn import ACTIONS, NodeDQN, n_state
from hybridsched.progress import progress


def train_node_dqn(train: PodTable, cluster: NodeCluster, settings: dict) -> tuple[NodeDQN, dict, list[dict]]:
    """Train on the training split; returns the trained policy (greedy), metrics and the
    per-episode curve (episode, mean_reward, loss, epsilon, mean_latency, ...)."""
    import torch

    from hybridsched.rl.dqn import DQNLearner, DQNSettings, linear_schedule
    from hybridsched.kinds.cluster.engine import simulate

    torch.set_num_threads(1)
    s = DQNSettings.from_dict(settings)
    t_start = time.perf_counter()
    inp = run_inputs(train, cluster)
    gpu_models = [m for m in cluster.models if m != CPU_MODEL]

    calib = NodeDQN(model_dir=None, seed=s.seed)
    calib.fit(train)
    calib.forced_action = 0
    tr = simulate(inp, cluster, calib)
    time_scale = float(np.median(calib.costs)) if calib.costs and np.median(calib.costs) > 0 else 1.0
    base_jct = float(np.mean(tr.end - inp.arrival))

    learner = DQNLearner(n_state(len(gpu_models)), len(ACTIONS), s, np.random.default_rng(s.seed))
    decay = s.exploration_fraction * s.episodes * len(train)
    policy = NodeDQN(model_dir=None, seed=s.seed)
    policy.learner = learner
    policy.time_scale = time_scale
    policy.epsilon_fn = lambda step: linear_schedule(s.start_e, s.end_e, decay, step)
    policy.fit(train)
    history = []
    for ep in progress(range(1, s.episodes + 1), desc="train_dqn", unit="episode"):
        n_loss = len(learner.losses)
        eps = policy.epsilon_fn(learner.global_step)
        policy.seed = s.seed + ep  # fresh exploration draws per episode
        tr = simulate(inp, cluster, policy)
        losses = learner.losses[n_loss:]
        history.append({"episode": ep, "mean_reward": float(np.mean(policy.rewards)) if policy.rewards else 0.0,
                        "loss": float(np.mean(losses)) if losses else float("nan"), "epsilon": float(eps),
                        "mean_latency": float(np.mean(tr.end - inp.arrival)),
                        "makespan": float(np.max(tr.end) - inp.arrival[0]),
                        "actions": {a: int(c) for a, c in zip(ACTIONS, policy.action_counts, strict=True)},
                        "wall_s": time.perf_counter() - t_start})
    trained = NodeDQN(model_dir=None, seed=s.seed)
    trained.weights = learner.weights()
    trained.gpu_models = tuple(gpu_models)
    trained.fit(train)
    greedy = simulate(inp, cluster, trained)
    metrics = {
        "policy": "node dqn (rule selection)", "actions": list(ACTIONS), "n_state": n_state(len(gpu_models)),
        "n_train": len(train), "episodes": s.episodes, "grad_steps": learner.grad_steps,
        "time_scale": time_scale, "wall_s": round(time.perf_counter() - t_start, 2),
        "train_mean_jct_fastest_rule": base_jct,
        "train_mean_jct_greedy_dqn": float(np.mean(greedy.end - inp.arrival)),
        "greedy_action_share": {a: float(c / max(trained.n_decisions, 1))
                                for a, c in zip(ACTIONS, trained.action_counts, strict=True)},
        "final_mean_reward": history[-1]["mean_reward"], "final_loss": history[-1]["loss"],
        "final_train_mean_latency": history[-1]["mean_latency"],
    }
    return trained, metrics, history
