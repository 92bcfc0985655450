"""The policy interface. The engine calls ``prepare``, ``kernel_data``, ``decide`` (or the
compiled ``kernel``) and ``observe``; it never looks at a policy's name or type.

``carry_on`` replaces ``prepare`` when the next table continues the same stream.

A placement is ``(gpu, fraction)``: GPU index ``0..n_gpus-1`` and the share of the task
that runs there (the rest runs on the CPU at the same time; 0 = CPU only).

Two ways to write ``decide``:

* ``kernel``: a ``numba.njit`` function ``(i, t, est_free, true_free, X, pdata, params)
  -> (gpu, fraction)``, where ``X`` is the task matrix (``sim.engine`` column constants),
  ``est_free[d]`` the time the scheduler believes device ``d`` (0 = CPU) is free and
  ``pdata``/``params`` whatever ``kernel_data`` returns.  ``true_free`` is the truth and
  is for clairvoyant policies only.  Fast; also run as plain Python in tests.
* ``decide(i, t, est_free)``: a Python method, for policies that need Python objects.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from hybridsched.devices import Cluster, Realization
from hybridsched.kinds.machine.workload import TaskTable

_EMPTY2 = np.zeros((0, 0))
_EMPTY1 = np.zeros(0)


class Policy:
    """Base class with no-op defaults; subclasses set ``name`` and one way to decide."""

    name: str = "policy"
    # what the policy is, for the lists read from the config (kinds.base.declaration): baseline (a
    # reference point), heuristic, learned (its YAML's ``model_dir`` is a model that the stage
    # ``trained_by`` writes) or clairvoyant (sees the run's true durations)
    role: ClassVar[str] = "heuristic"
    trained_by: ClassVar[str | None] = None
    kernel: ClassVar[object | None] = None
    clairvoyant: ClassVar[bool] = False  # True: receives the run's Realization via reveal()
    observe_every: int = 0  # >0: observe() is called with batches of this many completions
    # optional numba function (rows, fraction, cpu_s, gpu_s, pdata, params, learn_data()) doing
    # what observe() does; the engine then calls it inside its compiled loop (the engine's ``Session`` class)
    learn_kernel: object | None = None
    # True: decisions depend only on the task's own row and the device free times, so a run can
    # be cut into chunks (prepare() per chunk) with the same result (see kinds/machine/stream.py)
    streamable: ClassVar[bool] = False

    def load(self) -> None:
        """Read any trained model now (ModelFileError if unusable): simulate calls this for every
        policy before the lower bound, so a broken model file fails in seconds, not after the LP."""

    def prepare(self, tasks: TaskTable, cluster: Cluster, X: np.ndarray) -> None:
        """Batched work before the run (e.g. predict all run times at once)."""
        self.n_gpus = cluster.n_gpus

    def carry_on(self, tasks: TaskTable, cluster: Cluster, X: np.ndarray) -> None:
        """Prepare for the next table of the same task stream (the live service feeds one stream
        in segments), keeping what was learned online; by default prepare afresh."""
        self.prepare(tasks, cluster, X)

    def reveal(self, realization: Realization) -> None:
        """Only called for clairvoyant policies: the true run-time factors."""

    def kernel_data(self) -> tuple[np.ndarray, Any]:
        """(pdata, params) passed to ``kernel``; read again after every ``observe``. ``params`` is
        usually a float64 vector; any numba-typed value works (the DQN's is a named tuple of arrays)."""
        return _EMPTY2, _EMPTY1

    def learn_data(self) -> tuple:
        """The arrays ``learn_kernel`` updates besides pdata and params (a tuple)."""
        return ()

    def decide(self, i: int, t: float, est_free: np.ndarray) -> tuple[int, float]:
        raise NotImplementedError(f"{type(self).__name__} has neither a kernel nor decide()")

    def observe(self, rows: np.ndarray, fraction: np.ndarray, cpu_s: np.ndarray, gpu_s: np.ndarray) -> None:
        """Finished tasks (rows) with their fraction and the actual durations of their parts
        (NaN where a part did not run), in completion order."""


def fraction_grid(step: float) -> np.ndarray:
    """0, step, 2*step, ..., 1."""
    if not 0 < step <= 1:
        raise ValueError(f"fraction step must be in (0, 1], got {step}")
    k = int(round(1 / step))
    return np.linspace(0.0, 1.0, k + 1)
