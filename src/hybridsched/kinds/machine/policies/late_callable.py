"""``callable_late``: any callable ``(obs, mask) -> action`` as a late-dispatch policy.

A policy trained outside the project on the Gymnasium env (``hybridsched/machine-late-v0``,
``kinds/machine/env.py``) runs in ``simulate`` and the pipeline through this adapter: at each
pick the late engine's compiled kernel builds the candidates and the same ``(obs, mask)`` as
the env (``late_choice.py``, with the same ``max_candidates``, ``allow_wait`` and candidate
settings), calls the callable from the compiled loop (numba's object mode: a few microseconds
a decision) and starts the candidate it names; the wait action leaves the idle devices idle,
and an action outside the mask runs candidate 0, as in the env.  So a callable gives the same
schedule here as when it drives the env (tests/machine/test_env.py).

The callable is named by its import path, so the policy is a YAML node:

    _target_: hybridsched.kinds.machine.policies.late_callable.CallableLate
    policy: mypackage.agents:act          # module:attribute, a callable (obs, mask) -> action
    policy_kwargs: {path: models/ppo.zip} # optional: then the attribute is a factory, called
                                          # once with these to build the callable (e.g. load a model)
    max_candidates: 32
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from numba import njit, objmode

from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.late_choice import GRID0, HANDLE, N_OBS, candidate_params, fill, resolve
from hybridsched.kinds.machine.late_engine import RESERVED
from hybridsched.kinds.machine.policies.base import Policy
from hybridsched.kinds.machine.policies.late_dqn import candidates, pdata_of

Agent = Callable[[np.ndarray, np.ndarray], Any]
# handle -> (callable, max_candidates, allow_wait): the compiled kernel holds only the handle
_AGENTS: dict[int, tuple[Agent, int, bool]] = {}
_HANDLES = itertools.count(1)


def _ask(handle: float, feat: np.ndarray, c: int, idle: np.ndarray) -> int:
    """The candidate the callable of ``handle`` picks (-1: wait), asked with the env's (obs, mask)."""
    agent, k_max, allow_wait = _AGENTS[int(handle)]
    obs = np.zeros((k_max, N_OBS))
    mask = np.zeros(k_max + (1 if allow_wait else 0), dtype=bool)
    fill(feat, c, idle, obs, mask)
    a, _ = resolve(agent(obs, mask), mask)
    return -1 if a == k_max else a


@njit
def _callable_late(t, pool, n_pool, idle, est, qlen, X, ready, pdata, params):
    c, g, feat, ck, cd, cf = candidates(t, pool, n_pool, idle, est, X, qlen, ready, pdata, params, GRID0)
    if c == 0:
        return -1, -1, 0.0, g
    handle = params[HANDLE]
    with objmode(a="int64"):
        a = _ask(handle, feat, c, idle)
    if a < 0:
        return -1, -1, 0.0, g
    return ck[a], cd[a], cf[a], g


def load_callable(path: str, kwargs: dict[str, Any] | None = None) -> Agent:
    """The callable at ``module:attribute`` (or, with ``kwargs``, what that factory returns when
    called with them); one line when it cannot be imported or is not callable."""
    module, sep, attr = str(path).partition(":")
    if not sep or not module or not attr:
        raise HybridschedError(f"callable_late: policy must be 'module:attribute', got {path!r}")
    try:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise HybridschedError(f"callable_late: cannot import {path!r} ({e})") from None
    if kwargs is not None:
        obj = obj(**kwargs)
    if not callable(obj):
        raise HybridschedError(f"callable_late: {path!r} is not callable")
    return obj


class CallableLate(Policy):
    """A callable ``(obs, mask) -> action`` over the env's candidates as a late policy (module
    docstring); ``policy`` is an import path ``module:attribute`` or the callable itself."""

    name = "callable_late"
    dispatch: ClassVar[str] = "late"
    pick_kernel: ClassVar[object] = _callable_late

    def __init__(self, policy: str | Agent, policy_kwargs: dict[str, Any] | None = None, max_candidates: int = 32,
                 allow_wait: bool = False, fraction_step: float = 0.05, option_b: dict[str, float] | None = None,
                 queue_slack: float = np.inf, reserved_order: str = "fifo") -> None:
        if int(max_candidates) < 1:
            raise HybridschedError(f"callable_late: max_candidates must be >= 1, got {max_candidates}")
        if reserved_order not in RESERVED:
            raise HybridschedError(f"callable_late: reserved_order must be one of {list(RESERVED)}, "
                                   f"got {reserved_order!r}")
        self.policy = policy
        self.policy_kwargs = policy_kwargs
        self.max_candidates = int(max_candidates)
        self.allow_wait = bool(allow_wait)
        self.fraction_step = fraction_step
        self.option_b = option_b
        self.queue_slack = queue_slack
        self.reserved_order = reserved_order  # the late engine's order of reserved parts
        self._agent: Agent | None = None
        self._handle = next(_HANDLES)

    def load(self) -> None:
        """Import (and with ``policy_kwargs`` build) the callable now, so a bad path fails early."""
        if self._agent is None:
            self._agent = self.policy if callable(self.policy) else load_callable(self.policy, self.policy_kwargs)

    def prepare(self, tasks, cluster, X) -> None:
        self.load()
        self.n_gpus = cluster.n_gpus
        _AGENTS[self._handle] = (self._agent, self.max_candidates, self.allow_wait)
        self._params = candidate_params(cluster, self.fraction_step, self.option_b, self.queue_slack,
                                        handle=self._handle)
        self._pdata = pdata_of(tasks, cluster, X)

    def kernel_data(self) -> tuple[np.ndarray, np.ndarray]:
        return self._pdata, self._params

    def __del__(self) -> None:
        try:  # the kernel's entry goes with the policy (at interpreter exit the dict may be gone)
            _AGENTS.pop(self._handle, None)
        except (AttributeError, TypeError):
            pass
