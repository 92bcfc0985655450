"""Callables ``(obs, mask) -> action`` for the env and the ``callable_late`` adapter's tests,
importable by path (``tests.machine.env_agents:<name>``) as a policy's YAML names one."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hybridsched.kinds.machine.policies.late_dqn import FEATURES

_OPTION_B = FEATURES.index("option_b")
_PRIOR = len(FEATURES)  # the last column: (finish - t) / m


def first_feasible(obs: np.ndarray, mask: np.ndarray) -> int:
    """The first feasible action: loads nothing, knows nothing."""
    return int(np.flatnonzero(mask)[0])


def eft_plain(obs: np.ndarray, mask: np.ndarray) -> int:
    """eft_late's untuned choice read off the observation: among the option-A candidates (the
    split of earliest finish), the one of earliest believed finish (ties: the first)."""
    k = obs.shape[0]
    ok = mask[:k] & (obs[:, _OPTION_B] == 0.0)
    return int(np.argmin(np.where(ok, obs[:, _PRIOR], np.inf)))


def make_eft_plain(scale: float = 1.0) -> Callable[[np.ndarray, np.ndarray], int]:
    """A factory (what ``policy_kwargs`` calls, as one that loads a trained model would be):
    ``eft_plain`` on the prior times ``scale`` > 0, which changes no choice."""
    def act(obs: np.ndarray, mask: np.ndarray) -> int:
        scaled = obs.copy()
        scaled[:, _PRIOR] *= scale
        return eft_plain(scaled, mask)

    return act
