"""A fixed-size experience replay buffer in preallocated numpy arrays.

Transitions ``(state, action, reward, next_state, done)`` are written at a cursor that
wraps around, so once the buffer is full each new transition overwrites the oldest one.
Sampling is uniform with replacement from what is stored, drawn with a numpy Generator
that the caller passes in (no global random state).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Batch:
    """A sampled minibatch; arrays share their first dimension."""

    states: np.ndarray  # (b, n_state) float32
    actions: np.ndarray  # (b,) int64
    rewards: np.ndarray  # (b,) float32
    next_states: np.ndarray  # (b, n_state) float32
    dones: np.ndarray  # (b,) float32, 1.0 where the episode ended after this step


class ReplayBuffer:
    """Circular store of the last ``capacity`` transitions."""

    def __init__(self, capacity: int, n_state: int) -> None:
        if capacity < 1 or n_state < 1:
            raise ValueError(f"replay buffer needs capacity >= 1 and n_state >= 1, got {capacity}, {n_state}")
        self.capacity = int(capacity)
        self.states = np.zeros((capacity, n_state), dtype=np.float32)
        self.next_states = np.zeros((capacity, n_state), dtype=np.float32)
        self.actions = np.zeros(capacity, dtype=np.int64)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.dones = np.zeros(capacity, dtype=np.float32)
        self._cursor = 0  # next slot to write
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, states: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray,
            dones: np.ndarray) -> None:
        """Append a batch of ``k`` transitions (overwriting the oldest when full)."""
        actions = np.atleast_1d(actions)
        k = len(actions)
        if k == 0:
            return
        if k > self.capacity:  # only the newest `capacity` would survive anyway
            sl = slice(k - self.capacity, k)
            states, actions, rewards, next_states, dones = (np.atleast_2d(states)[sl], actions[sl],
                                                            np.atleast_1d(rewards)[sl], np.atleast_2d(next_states)[sl],
                                                            np.atleast_1d(dones)[sl])
            k = self.capacity
        slots = (self._cursor + np.arange(k)) % self.capacity
        self.states[slots] = states
        self.actions[slots] = actions
        self.rewards[slots] = rewards
        self.next_states[slots] = next_states
        self.dones[slots] = dones
        self._cursor = int((self._cursor + k) % self.capacity)
        self._size = min(self._size + k, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator) -> Batch:
        """``batch_size`` transitions drawn uniformly (with replacement) from those stored."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = rng.integers(0, self._size, batch_size)
        return Batch(self.states[idx], self.actions[idx], self.rewards[idx], self.next_states[idx], self.dones[idx])
