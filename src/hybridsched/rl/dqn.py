"""The reinforcement-learning core shared by the kinds (in the spirit of cleanrl's ``dqn.py``):
typed settings, a small dueling Q-network, a linear epsilon schedule and a learner with
experience replay (``rl/replay.py``) and a target network.

It knows nothing of any kind: each kind's environment owns its state, actions and reward and
feeds the learner transitions (``kinds/machine/dqn.py``, ``kinds/cluster/dqn_train.py``).
Inference in the simulators runs the compiled forward pass of ``rl/qnet.py`` on the same
weights.  This module imports torch at the top; everything else imports it lazily.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hybridsched.errors import HybridschedError, check_known_keys
from hybridsched.rl.replay import ReplayBuffer


@dataclass(frozen=True)
class DQNSettings:
    """Hyper-parameters of the learner, the same for every kind; a kind's own settings (its
    action space, its reward weights) live in a subclass in the kind's package.  Step counts
    are in completed decisions."""

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
            **self.extra_checks(),
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise HybridschedError(f"dqn.{bad[0]}: invalid value {getattr(self, bad[0])!r}")

    def extra_checks(self) -> dict[str, bool]:
        """A subclass's own validity checks, field name -> ok."""
        return {}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DQNSettings:
        """From a config mapping (the ``dqn`` group); an unknown key is an error naming it.
        ``model_dir`` (where the stage saves the model) is not a setting and is skipped."""
        names = {f.name for f in fields(cls)}
        check_known_keys(set(d) - {"model_dir"}, names, "dqn")
        kw = {k: (tuple(float(x) for x in v) if isinstance(v, list) else v) for k, v in d.items() if k in names}
        return cls(**kw)

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


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
    """Online network, target network, optimiser and replay buffer; learns from transitions.
    It has no reward of its own: the kind's environment computes rewards (as decima-sim's
    environment does) and hands in whole transitions."""

    def __init__(self, n_state: int, n_actions: int, settings: DQNSettings, rng: np.random.Generator,
                 q: QNetwork | None = None) -> None:
        torch.set_num_threads(1)  # tiny network: threads only add overhead (and the machine has 2 cores)
        torch.manual_seed(settings.seed)
        self.settings = settings
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
