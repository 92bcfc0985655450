"""The DQN policy: a dueling Q-network picks (device, GPU fraction) for each task.

Inference is a compiled kernel (``dqn_state.dqn_decide``): the trained weights travel
in ``params`` and the forward pass runs in numba, so the simulator never
calls back into Python or torch per decision.

The same kernel acts while learning (training, and online adaptation during
evaluation): it takes a random action when the task's pre-drawn uniform is below
epsilon, and records each decision (order, time, action, clamped fraction, state) in
``pdata``.  ``observe`` turns finished tasks into transitions, with the actual
response time and energy rebuilt by ``outcomes.OutcomeClock``, and hands them to
the learner: while training (``dqn_train``) the torch ``rl.dqn.DQNLearner``, whose weights are
re-packed at the next ``kernel_data``; online (``online=True``) the compiled
``rl.qnet_train.CompiledLearner``, which updates the very arrays the kernel reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from hybridsched.devices import Cluster
from hybridsched.errors import HybridschedError, ModelFileError
from hybridsched.kinds.machine.dqn_state import (ACTION, EPSILON, FEAT, FRAC, ORDER, RAND_A, SEQ, TIME, KernelParams,
                                                 StateSpec, U, dqn_decide)
from hybridsched.kinds.machine.outcomes import OutcomeClock
from hybridsched.kinds.machine.policies.base import Policy
from hybridsched.kinds.machine.workload import TaskTable


# Online adaptation's learning schedule: a step on 32 replayed transitions every 8
# new ones (4 per decision) instead of training's 128 every 4 (32 per decision), so that it keeps
# up with >= 20,000 decisions/s in compiled code.
ONLINE_BATCH_SIZE = 32
ONLINE_TRAIN_FREQUENCY = 8


class DQNPolicy(Policy):
    """Greedy (or epsilon-greedy) on the trained Q-network; with ``online`` it keeps learning
    from the outcomes it observes during the run (each run starts again from the saved model)."""

    name = "dqn"
    role = "learned"
    trained_by = "train_dqn"
    kernel = dqn_decide

    def __init__(self, model_dir: str = "models/dqn", epsilon: float = 0.0, online: bool = False,
                 update_every: int = 8, learning_rate: float | None = None, seed: int = 0,
                 batch_size: int = ONLINE_BATCH_SIZE, train_frequency: int = ONLINE_TRAIN_FREQUENCY) -> None:
        if not 0.0 <= epsilon <= 1.0:
            raise HybridschedError(f"dqn policy: epsilon must be in [0, 1], got {epsilon}")
        if online and update_every < 1:
            raise HybridschedError(f"dqn policy: update_every must be >= 1 when online, got {update_every}")
        if online and (batch_size < 1 or train_frequency < 1):
            raise HybridschedError(f"dqn policy: batch_size and train_frequency must be >= 1 when online, "
                                   f"got {batch_size}, {train_frequency}")
        self.batch_size, self.train_frequency = int(batch_size), int(train_frequency)
        self._params = None  # the kernel's params, packed once per run when the network is updated in place
        self._weights = None  # the saved network as an rl.qnet.Net (frozen policies)
        self._carrying = False
        self.model_dir = Path(model_dir)
        self.epsilon = float(epsilon)
        self.online = bool(online)
        self.update_every = int(update_every)
        self.learning_rate = learning_rate
        self.seed = int(seed)
        self.observe_every = self.update_every if self.online else 0
        self._model = None  # kinds.machine.dqn.SavedModel, loaded on first prepare
        self._learner = None  # kinds.machine.dqn.DQNLearner while learning
        self._training = False
        self._epsilon_at: Callable[[int], float] = lambda step: self.epsilon
        self._rng = np.random.default_rng(self.seed)
        self._steps_before = 0  # decisions made in earlier runs (training's epsilon schedule)

    @classmethod
    def for_training(cls, learner, spec: StateSpec, settings, epsilon_at: Callable[[int], float],
                     rng: np.random.Generator, update_every: int) -> DQNPolicy:
        """The acting side of ``kinds.machine.dqn_train.train``: explores by ``epsilon_at(decisions so far)``
        and feeds ``learner``, which persists across runs (episodes)."""
        p = cls(epsilon=0.0, online=True, update_every=update_every)
        p._training = True
        p._learner = learner
        p._spec, p._hidden, p._settings = spec, settings.hidden, settings
        p._epsilon_at = epsilon_at
        p._rng = rng
        return p

    # --- engine interface ---------------------------------------------------------------
    def prepare(self, tasks: TaskTable, cluster: Cluster, X: np.ndarray) -> None:
        super().prepare(tasks, cluster, X)
        if not self._training:
            model = self._load()
            if model.spec.n_gpus != cluster.n_gpus:
                raise ModelFileError(f"{model.meta_path}: model was trained for {model.spec.n_gpus} GPUs, "
                                     f"the cluster has {cluster.n_gpus} (retrain with train_dqn)")
            self._spec, self._hidden, self._settings = model.spec, model.hidden, model.settings
            if self._weights is None:
                from hybridsched.rl.qnet import net_from_weights

                self._weights = net_from_weights(model.weights())  # packed once: the Net is used as is
            self._rng = np.random.default_rng(self.seed)  # same draws in every run
            if not (self._carrying and self._learner is not None):  # carry_on keeps the learner
                self._learner = self._online_learner(model) if self.online else None
            self._params = None
        self._spec = self._spec.for_cluster(cluster)
        n = len(tasks)
        learning = self._learner is not None
        self._pdata = np.zeros((n + 1, FEAT + self._spec.n_state if learning else RAND_A + 1))
        self._pdata[:n, U] = self._rng.random(n)
        self._pdata[:n, RAND_A] = self._rng.integers(0, self._spec.n_actions, n)
        self._gpu_of_action = self._spec.action_table()[0]
        if learning:
            self._clock = OutcomeClock(n, cluster.n_devices, cluster.cpu_busy_w, cluster.gpu_busy_w)
            self._ingested = 0
            self._observed = np.zeros(n, dtype=bool)
        self.reward_sum, self.n_rewards = 0.0, 0

    def carry_on(self, tasks: TaskTable, cluster: Cluster, X: np.ndarray) -> None:
        """Next segment of a stream: an online policy keeps its learner (and its random stream)
        instead of starting again from the saved model."""
        learner, rng = (self._learner, self._rng) if self.online and not self._training else (None, None)
        self._carrying = learner is not None
        try:
            self.prepare(tasks, cluster, X)
        finally:
            self._carrying = False
        if learner is None:
            return
        self._learner, self._rng = learner, rng
        n = len(tasks)
        self._pdata[:n, U] = rng.random(n)
        self._pdata[:n, RAND_A] = rng.integers(0, self._spec.n_actions, n)

    def _online_learner(self, model):
        """The compiled learner (``rl.qnet_train``) starting from the saved weights, with the online
        batch size and step frequency; its replay starts empty and it learns once it holds a batch."""
        from hybridsched.rl.qnet import net_from_weights
        from hybridsched.rl.qnet_train import CompiledLearner

        s = replace(model.settings, seed=self.seed, learning_rate=self.learning_rate or model.settings.learning_rate,
                    learning_starts=self.batch_size)
        return CompiledLearner(net_from_weights(model.weights()), s, np.random.default_rng(self.seed),
                               batch_size=self.batch_size, train_frequency=self.train_frequency)

    def kernel_data(self) -> tuple[np.ndarray, KernelParams]:
        learning = self._learner is not None
        weights = self._learner.weights() if learning else self._weights
        eps = self._epsilon_at(self._steps_before + self.decisions) if learning or self.epsilon else 0.0
        if self._params is not None and self._params.net is weights:  # a Net updated in place: no repacking
            self._params.hdr[EPSILON] = eps
        else:
            self._params = self._spec.pack(weights, self._hidden, eps, record=learning)
        return self._pdata, self._params

    def observe(self, rows: np.ndarray, fraction: np.ndarray, cpu_s: np.ndarray, gpu_s: np.ndarray) -> None:
        if self._learner is None:
            return
        self._ingest_decisions()
        self._observed[rows] = True
        done_rows, end, energy = self._clock.finished(rows, cpu_s, gpu_s)
        if len(done_rows):
            self._learn(done_rows, end, energy)

    # --- learning ------------------------------------------------------------------------
    @property
    def decisions(self) -> int:
        """Decisions recorded in the current run (0 when not learning)."""
        return int(self._pdata[-1, 0]) if self._learner is not None else 0

    def finish_run(self, trace) -> None:
        """Training only: learn from the tasks that ended after the last decision (the engine
        stops delivering completions once every task is decided), then close the episode."""
        rest = np.flatnonzero(~self._observed)
        rest = rest[np.argsort(trace.end[rest], kind="stable")]
        cpu_s, gpu_s = trace.cpu_end - trace.cpu_start, trace.gpu_end - trace.gpu_start
        self.observe(rest, trace.fraction[rest], cpu_s[rest], gpu_s[rest])
        self._steps_before += self.decisions

    def _ingest_decisions(self) -> None:
        P = self._pdata
        k = self.decisions
        rows = P[self._ingested:k, ORDER].astype(np.int64)
        self._clock.decided(rows, P[rows, TIME], self._gpu_of_action[P[rows, ACTION].astype(np.int64)], P[rows, FRAC])
        self._ingested = k

    def _learn(self, rows: np.ndarray, end: np.ndarray, energy: np.ndarray) -> None:
        P = self._pdata
        n = P.shape[0] - 1
        nxt = P[rows, SEQ].astype(np.int64) + 1
        done = nxt >= n
        assert np.all(nxt[~done] < self.decisions), "a transition's next decision has not happened yet"
        next_rows = P[np.minimum(nxt, n - 1), ORDER].astype(np.int64)
        states = P[rows, FEAT:]
        next_states = np.where(done[:, None], 0.0, P[next_rows, FEAT:])
        from hybridsched.kinds.machine.dqn import reward

        rewards = reward(self._settings, self._spec, end - P[rows, TIME], energy)
        self._learner.add(states, P[rows, ACTION].astype(np.int64), rewards, next_states, done.astype(np.float64))
        self.reward_sum += float(rewards.sum())
        self.n_rewards += len(rows)

    def load(self) -> None:
        self._load()

    def _load(self):
        if self._model is None:
            from hybridsched.kinds.machine.dqn import load_model  # torch: only when the policy is used

            self._model = load_model(self.model_dir)
        return self._model
