"""Dueling DQN that places each task on (CPU | GPU g at fraction f), trained in the simulator.

In the spirit of cleanrl's ``dqn.py``: typed settings at the top, a small Q-network, a
linear epsilon schedule, experience replay (``learn/replay.py``) and a target network.

* **State** (``learn/dqn_state.py``): task features (standardised logs of size, memory and
  nominal CPU/GPU time, intensity, max GPU fraction), the believed backlog of every device,
  and per action its nominal finish time and busy energy given those backlogs.
* **Actions**: CPU only, then each GPU at each of ``fractions`` (1 + 4 * n_gpus actions);
  the engine clamps a fraction to what fits in GPU memory.
* **Reward** of a decision, from its *actual* outcome once observed:
  ``-(alpha * response / time_scale + beta * energy / energy_scale)`` where ``response`` is
  the task's end minus the decision time and ``energy`` its busy energy.  The two scales are
  the training workload's mean time and energy of each task's fastest placement on an idle
  cluster, so a task that runs as fast as it could alone costs about ``alpha + beta``.
* **Episodes**: one pass of the simulator over the training workload with fresh run-time
  noise; the policy acts through the compiled kernel (``policies/dqn.py``) and the learner
  takes a gradient step every ``train_frequency`` completed transitions.

This module imports torch at the top; everything else imports it lazily.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hybridsched.kinds.machine.devices import Cluster
from hybridsched.errors import HybridschedError, ModelFileError
from hybridsched.io import read_model_meta
from hybridsched.kinds.machine.dqn_state import DEFAULT_FRACTIONS, StateSpec
from hybridsched.rl.replay import ReplayBuffer
from hybridsched.kinds.machine.workload import TaskTable

MODEL_FILE = "model.pt"
META_FILE = "meta.json"
FORMAT = "hybridsched-dqn/1"


@dataclass(frozen=True)
class DQNSettings:
    """Hyper-parameters (conf/dqn/default.yaml); step counts are in completed decisions."""

    learning_rate: float = 1e-3
    gamma: float = 0.9  # per decision; the queue a decision builds delays the next few tasks
    buffer_size: int = 50_000
    batch_size: int = 128
    hidden: int = 64  # width of both trunk layers
    start_e: float = 1.0
    end_e: float = 0.02
    exploration_fraction: float = 0.4  # share of all training decisions over which epsilon decays
    learning_starts: int = 1_000
    train_frequency: int = 4  # one gradient step every this many transitions
    target_network_frequency: int = 500  # update the target network every this many transitions ...
    tau: float = 1.0  # ... by target = tau * online + (1 - tau) * target (1.0 = hard copy)
    max_grad_norm: float = 10.0
    episodes: int = 20
    observe_every: int = 8  # completions per observe() call while training
    fractions: tuple[float, ...] = DEFAULT_FRACTIONS
    alpha: float = 0.5  # weight of response time in the reward
    beta: float = 0.5  # weight of energy in the reward
    seed: int = 0

    def __post_init__(self) -> None:
        checks = {
            "learning_rate": self.learning_rate > 0, "gamma": 0 <= self.gamma <= 1,
            "buffer_size": self.buffer_size >= self.batch_size >= 1, "batch_size": self.batch_size >= 1,
            "hidden": self.hidden >= 1, "start_e": 0 <= self.start_e <= 1, "end_e": 0 <= self.end_e <= 1,
            "exploration_fraction": 0 < self.exploration_fraction <= 1, "learning_starts": self.learning_starts >= 0,
            "train_frequency": self.train_frequency >= 1,
            "target_network_frequency": self.target_network_frequency >= 1,
            "tau": 0 < self.tau <= 1, "episodes": self.episodes >= 1, "observe_every": self.observe_every >= 1,
            "fractions": len(self.fractions) > 0 and all(0 < f <= 1 for f in self.fractions),
            "alpha": self.alpha >= 0, "beta": self.beta >= 0,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise HybridschedError(f"dqn.{bad[0]}: invalid value {getattr(self, bad[0])!r}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DQNSettings:
        """From a config mapping (the ``dqn`` group); an unknown key is an error naming it.
        ``model_dir`` (where the stage saves the model) is not a setting and is skipped."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names - {"model_dir"})
        if unknown:
            raise HybridschedError(f"dqn: unknown key(s) {unknown}; known: {sorted(names)}")
        kw = {k: (tuple(float(x) for x in v) if k == "fractions" else v) for k, v in d.items() if k in names}
        return cls(**kw)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fractions": list(self.fractions)}


class QNetwork(nn.Module):
    """Dueling head on a two-layer trunk: Q(s, a) = V(s) + A(s, a) - mean_a A(s, a)."""

    def __init__(self, n_state: int, n_actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(n_state, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.value = nn.Linear(hidden, 1)
        self.advantage = nn.Linear(hidden, n_actions)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.trunk(x)
        adv = self.advantage(h)
        return self.value(h) + adv - adv.mean(dim=1, keepdim=True)


def linear_schedule(start_e: float, end_e: float, duration: float, t: int) -> float:
    """Epsilon falling linearly from ``start_e`` to ``end_e`` over ``duration`` steps, then flat."""
    if duration <= 0:
        return end_e
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e) if end_e <= start_e else min(slope * t + start_e, end_e)


class DQNLearner:
    """Online network, target network, optimiser and replay buffer; learns from transitions."""

    def __init__(self, n_state: int, n_actions: int, settings: DQNSettings, time_scale: float, energy_scale: float,
                 rng: np.random.Generator, q: QNetwork | None = None) -> None:
        torch.set_num_threads(1)  # tiny network: threads only add overhead (and the machine has 2 cores)
        torch.manual_seed(settings.seed)
        self.settings = settings
        self.time_scale, self.energy_scale = time_scale, energy_scale
        self.rng = rng
        self.q = q if q is not None else QNetwork(n_state, n_actions, settings.hidden)
        self.target = QNetwork(n_state, n_actions, settings.hidden)
        self.target.load_state_dict(self.q.state_dict())
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=settings.learning_rate)
        self.replay = ReplayBuffer(settings.buffer_size, n_state)
        self.global_step = 0  # transitions seen
        self.grad_steps = 0
        self.target_updates = 0
        self.losses: list[float] = []

    def reward(self, response_s: np.ndarray, energy_j: np.ndarray) -> np.ndarray:
        """-(alpha * time + beta * energy), each divided by its scale (see the module docstring)."""
        s = self.settings
        return -(s.alpha * response_s / self.time_scale + s.beta * energy_j / self.energy_scale)

    def add(self, states: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray,
            dones: np.ndarray) -> None:
        """Store transitions; take the gradient steps and target updates that fall due."""
        s = self.settings
        self.replay.add(states, actions, rewards, next_states, dones)
        for step in range(self.global_step + 1, self.global_step + len(actions) + 1):
            if step > s.learning_starts and step % s.train_frequency == 0:
                self.losses.append(self.train_step())
            if step % s.target_network_frequency == 0:
                self.update_target()
        self.global_step += len(actions)

    def train_step(self) -> float:
        """One TD step on a replayed minibatch (Huber loss); returns the loss."""
        s = self.settings
        b = self.replay.sample(s.batch_size, self.rng)
        states, next_states = torch.from_numpy(b.states), torch.from_numpy(b.next_states)
        with torch.no_grad():
            target_max = self.target(next_states).max(dim=1).values
            td_target = torch.from_numpy(b.rewards) + s.gamma * target_max * (1.0 - torch.from_numpy(b.dones))
        old = self.q(states).gather(1, torch.from_numpy(b.actions)[:, None]).squeeze(1)
        loss = F.smooth_l1_loss(old, td_target)
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.q.parameters(), s.max_grad_norm)
        self.optimizer.step()
        self.grad_steps += 1
        return float(loss.item())

    def update_target(self) -> None:
        """target <- tau * online + (1 - tau) * target."""
        tau = self.settings.tau
        with torch.no_grad():
            for tp, qp in zip(self.target.parameters(), self.q.parameters(), strict=True):
                tp.copy_(tau * qp + (1.0 - tau) * tp)
        self.target_updates += 1

    def weights(self) -> list[np.ndarray]:
        """The online network's tensors as numpy arrays, in ``state_dict`` order."""
        return [t.detach().numpy() for t in self.q.state_dict().values()]


@dataclass
class TrainResult:
    learner: DQNLearner
    spec: StateSpec
    settings: DQNSettings
    history: list[dict[str, float]]
    wall_s: float


def train(tasks: TaskTable, cluster: Cluster, settings: DQNSettings,
          on_episode: Callable[[dict[str, float]], None] | None = None) -> TrainResult:
    """Train in the simulator for ``settings.episodes`` passes over ``tasks``."""
    from hybridsched.kinds.machine.policies.dqn import DQNPolicy
    from hybridsched.kinds.machine.engine import simulate, task_matrix

    start = time.perf_counter()
    noise_rng, act_rng, replay_rng = np.random.default_rng(settings.seed).spawn(3)
    spec = StateSpec.fit(task_matrix(tasks, cluster), cluster, settings.fractions)
    learner = DQNLearner(spec.n_state, spec.n_actions, settings, spec.time_scale, spec.energy_scale, replay_rng)
    decay = settings.exploration_fraction * settings.episodes * len(tasks)

    def epsilon_at(step: int) -> float:
        return linear_schedule(settings.start_e, settings.end_e, decay, step)

    policy = DQNPolicy.for_training(learner, spec, settings.hidden, epsilon_at, act_rng, settings.observe_every)
    history: list[dict[str, float]] = []
    for episode in range(1, settings.episodes + 1):
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


# --- saving and loading ----------------------------------------------------------------------
@dataclass
class SavedModel:
    """A trained network with the state spec and settings it was trained with."""

    q: QNetwork
    spec: StateSpec
    settings: DQNSettings
    meta_path: Path

    @property
    def hidden(self) -> int:
        return self.settings.hidden

    def weights(self) -> list[np.ndarray]:
        return [t.detach().numpy().copy() for t in self.q.state_dict().values()]

    def learner(self, seed: int = 0, learning_rate: float | None = None) -> DQNLearner:
        """A fresh learner that starts from these weights (online adaptation); its replay
        buffer starts empty, so it learns as soon as it holds one minibatch."""
        s = replace(self.settings, seed=seed, learning_rate=learning_rate or self.settings.learning_rate,
                    learning_starts=self.settings.batch_size)
        q = QNetwork(self.spec.n_state, self.spec.n_actions, s.hidden)
        q.load_state_dict(self.q.state_dict())
        return DQNLearner(self.spec.n_state, self.spec.n_actions, s, self.spec.time_scale, self.spec.energy_scale,
                          np.random.default_rng(seed), q=q)


def save_model(out_dir: str | Path, result: TrainResult) -> None:
    """Save a training result's network (see ``save_network``)."""
    save_network(out_dir, result.learner.q, result.spec, result.settings)


def save_network(out_dir: str | Path, q: QNetwork, spec: StateSpec, settings: DQNSettings) -> None:
    """``model.pt`` (the network's state_dict) and ``meta.json`` (format, sizes, action table,
    state spec, settings) into ``out_dir`` (the stage writes a fresh folder via ``io.atomic_dir``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(q.state_dict(), out / MODEL_FILE)
    gpu, frac = spec.action_table()
    meta = {
        "format": FORMAT,
        "n_state": spec.n_state,
        "n_actions": spec.n_actions,
        "actions": [{"gpu": int(g) if f > 0 else None, "fraction": float(f)} for g, f in zip(gpu, frac, strict=True)],
        "spec": spec.to_dict(),
        "settings": settings.to_dict(),
    }
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def load_model(model_dir: str | Path) -> SavedModel:
    """Load what ``save_model`` wrote; a missing, corrupt or mismatched file is a ModelFileError."""
    d = Path(model_dir)
    meta_path, model_path = d / META_FILE, d / MODEL_FILE
    meta = read_model_meta(meta_path, "the train_dqn stage")
    try:
        if meta.get("format") != FORMAT:
            raise ModelFileError(f"{meta_path}: format {meta.get('format')!r}, expected {FORMAT!r}")
        spec = StateSpec.from_dict(meta["spec"])
        settings = DQNSettings.from_dict(meta["settings"])
    except (ValueError, KeyError, TypeError, HybridschedError) as e:
        if isinstance(e, ModelFileError):
            raise
        raise ModelFileError(f"{meta_path}: not a DQN model description ({e})") from None
    if meta.get("n_state") != spec.n_state or meta.get("n_actions") != spec.n_actions:
        raise ModelFileError(f"{meta_path}: n_state/n_actions {meta.get('n_state')}/{meta.get('n_actions')} do not "
                             f"match the state spec ({spec.n_state}/{spec.n_actions})")
    try:
        state = torch.load(model_path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ModelFileError(f"{model_path}: not found (run the train_dqn stage)") from None
    except Exception as e:  # torch raises many types for a damaged file
        raise ModelFileError(f"{model_path}: not a readable torch state_dict ({type(e).__name__}: {e})") from None
    q = QNetwork(spec.n_state, spec.n_actions, settings.hidden)
    try:
        q.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelFileError(f"{model_path}: weights do not match {meta_path} ({first})") from None
    q.eval()
    return SavedModel(q, spec, settings, meta_path)
