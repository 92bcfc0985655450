"""Serving schedulers: which eligible group's batch runs next (engine.py documents the features).

Four of them are one kernel: the group with the largest ``w . features`` wins (ties: lowest
group index).  Their weights say what each prefers:

* **fifo**: earliest head arrival;
* **edf** (priority-EDF): interactive first, earliest head deadline within a class;
* **batch_aware**: the largest batching gain (samples per predicted second, relative to
  batch 1), then the oldest;
* **dynamic**: a weighted sum of urgency (slack to the deadline over the SLO, negative when
  late), a penalty for batches that will miss anyway, batching gain, the interactive class
  and waiting time, all with the predictor's service time (and its online correction);
* **predictive** (Clockwork-style): EDF plus the engine's admission control: drop what the
  predictor says cannot meet its SLO, trim batches to what can (``drop = True``).

The learned dispatcher (``dqn``) has its own kernel in ``dqn.py``.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numba import njit

from hybridsched.kinds.serving import engine as E


@njit(cache=True)
def linear_choose(t, gs, elig, n_elig, pdata, params):
    """The eligible group with the largest ``pdata . gs[g]``."""
    best = elig[0]
    best_score = -np.inf
    for k in range(n_elig):
        g = elig[k]
        s = 0.0
        for f in range(pdata.shape[0]):
            if pdata[f] != 0.0:
                s += pdata[f] * gs[g, f]
        if s > best_score:
            best_score = s
            best = g
    return best


class ServingPolicy:
    """A scheduler: a numba kernel and its data; ``drop`` turns on predictive admission and
    ``online_alpha`` > 0 the online correction of the predictor (EWMA of actual / predicted)."""

    name: str = "policy"
    kernel: ClassVar[object] = linear_choose
    drop: bool = False

    def __init__(self, online_alpha: float = 0.0) -> None:
        if not 0.0 <= online_alpha <= 1.0:
            from hybridsched.errors import HybridschedError

            raise HybridschedError(f"policy {self.name}: online_alpha must be in [0, 1], got {online_alpha}")
        self.online_alpha = float(online_alpha)

    def weights(self) -> dict[int, float]:
        """Feature index -> weight for :func:`linear_choose`."""
        raise NotImplementedError

    def kernel_data(self, settings, pred_lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(pdata, params) for the kernel."""
        w = np.zeros(E.NF)
        for f, x in self.weights().items():
            w[f] = x
        return w, np.zeros(1)


# class index dominates times in lexicographic scores (times are < 1e8 s)
_LEX = 1e9


class FIFO(ServingPolicy):
    """First come, first served: the batch whose head arrived first."""

    name = "fifo"
    role = "baseline"  # kinds.base.declaration

    def weights(self) -> dict[int, float]:
        return {E.HEAD_ARRIVAL: -1.0}


class PriorityEDF(ServingPolicy):
    """Interactive class first; earliest deadline first within a class."""

    name = "edf"

    def weights(self) -> dict[int, float]:
        return {E.CLASS: -_LEX, E.HEAD_DEADLINE: -1.0}


class BatchAware(ServingPolicy):
    """Largest batching gain first (what batches well), then the oldest head."""

    name = "batch_aware"

    def weights(self) -> dict[int, float]:
        return {E.GAIN: _LEX, E.HEAD_ARRIVAL: -1.0}


class Dynamic(ServingPolicy):
    """Multi-objective score with the predictor's service time (module docstring)."""

    name = "dynamic"

    def __init__(self, w_slack: float = 1.0, w_doomed: float = 2.0, w_gain: float = 0.05, w_class: float = 0.5,
                 w_wait: float = 0.2, online_alpha: float = 0.1) -> None:
        super().__init__(online_alpha)
        self.w = {E.NORM_SLACK: -float(w_slack), E.DOOMED: -float(w_doomed), E.GAIN: float(w_gain),
                  E.INTERACTIVE: float(w_class), E.WAIT_NORM: float(w_wait)}

    def weights(self) -> dict[int, float]:
        return self.w


class Predictive(PriorityEDF):
    """Clockwork-style: EDF with predictive drop (cannot meet the SLO) and defer (trim the batch)."""

    name = "predictive"
    drop = True
