"""Training the late dispatcher ``cem_late`` (:mod:`~hybridsched.kinds.machine.policies.late_scorer`):
the cross-entropy method of :mod:`hybridsched.rl.cem` on the same mixture of workloads as
``cem`` (:func:`~hybridsched.kinds.machine.cem_train.draw_set`: same streams, same seeds,
never the held-out seed).

A member's cost is the mean over the drawn scenarios of its mean latency divided by the
*base late heuristic*'s (``cem.machine.late_base``, e.g. ``eft_late``), so generation 0's
row 0 (that heuristic, exactly) costs 1.  ``theta``: log-multipliers of the base's
``beta_cpu, beta_gpu, backlog_s, kappa`` (0 = the base's value), then the linear weights and
the hidden layer, all starting at 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hybridsched.kinds.machine import cem_train
from hybridsched.kinds.machine.cem_train import Family, MachineCEMSettings, train_scorer
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.policies.late_scorer import N_IN, N_LIN, CEMLate

SCALED = cem_train.SCALED  # the same four base weights as cem's


def n_theta(settings: MachineCEMSettings) -> int:
    return len(SCALED) + N_LIN + settings.hidden * (N_IN + 2)


def model_from_theta(theta: np.ndarray, base0: dict[str, float], settings: MachineCEMSettings) -> dict[str, Any]:
    """The scorer's weights for a search vector; ``theta = 0`` gives the base heuristic exactly."""
    return cem_train.model_from_theta(theta, base0, settings, N_LIN, N_IN)


def train_late_scorer(base0: dict[str, float], search, settings: MachineCEMSettings, cluster: Cluster):
    """:func:`cem_train.train_scorer` for ``cem_late``: the search, the selection among the last
    ``select_from`` means on the selection stream, and the validation costs."""
    return train_scorer(base0, search, settings, cluster, LATE)


LATE = Family(CEMLate, model_from_theta, n_theta, "base", "cem_late")
