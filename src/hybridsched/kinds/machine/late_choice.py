"""A late-dispatch decision as an agent outside the project sees it: an observation, a mask
and one discrete action.

At a pick point (``late_engine.py``) every waiting task offers up to two *candidates*, the
per-candidate scorer's own (``late_dqn.candidates``): option A, the split of earliest believed
finish, and option B, the split of least finish plus a work charge, when its split differs
from A's; a candidate whose devices are all busy is not offered.  The same features the
learned late policies (``dqn_late``, ``pg_late``) score are the observation:

* ``obs``: float64, shape ``(max_candidates, N_OBS)``; row ``j`` holds candidate ``j``'s
  ``N_FEAT`` features (``late_dqn.FEATURES``, each in [0, 1]) and, last, the prior
  ``(finish - t) / m`` (>= 0; ``m`` the running mean best-alone time), the term ``dqn_late``
  subtracts from its network's output.  Candidates come in pool (ready) order, a task's
  option A before its B; rows past the candidates are 0, and candidates past
  ``max_candidates`` are not offered (their count is in the env's ``info``);
* ``mask``: bool, ``max_candidates`` entries (+1 with ``allow_wait``: the last action leaves
  the idle devices idle until the next event, allowed while some device is busy, so the run
  always goes on); True where the action is feasible;
* an action outside the mask runs candidate 0 (the oldest waiting task's first option): the
  rule of both the env and the :class:`~hybridsched.kinds.machine.policies.late_callable.CallableLate`
  adapter, so a policy behaves the same in both.

Both the Gymnasium env (``env.py``) and the adapter build their observation here, so an agent
sees the same arrays in either.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hybridsched.devices import Cluster
from hybridsched.kinds.machine.late_steps import _N_POOL, _T, _advance, _apply
from hybridsched.kinds.machine.policies.base import fraction_grid
from hybridsched.kinds.machine.policies.late_dqn import N_FEAT, OPTION_B, _NET, candidates, grid_start, head_params

N_OBS = N_FEAT + 1  # the features and the prior finish / m
GRID0 = grid_start(0)  # the candidates' params carry no network (hidden = 0)
HANDLE = _NET  # the params slot of that (absent) network's one weight: free for the adapter's handle


def candidate_params(cluster: Cluster, fraction_step: float = 0.05, option_b: dict[str, float] | None = None,
                     queue_slack: float = np.inf, handle: float = 0.0) -> np.ndarray:
    """``late_dqn.candidates``' params without a network: option B's work charge (``OPTION_B``,
    the weight-1 charge, unless given), the split hold ``queue_slack`` and the fraction grid;
    ``handle`` goes to :data:`HANDLE` (the adapter's callable)."""
    return head_params(cluster, 0, np.array([float(handle)]), fraction_grid(fraction_step), option_b or OPTION_B,
                       None, queue_slack)


@njit
def fill(feat, c, idle, obs, mask):
    """Write the ``(obs, mask)`` of a pick point's ``c`` candidates (module docstring) into
    ``obs`` (max_candidates x N_OBS) and ``mask`` (max_candidates, +1 for the wait action)."""
    k_max = obs.shape[0]
    m = min(c, k_max)
    obs[:m] = feat[:m, :N_OBS]
    obs[m:] = 0.0
    mask[:m] = True
    mask[m:] = False
    if mask.shape[0] > k_max:  # the wait action: while a device is busy, an event is pending
        busy = False
        for d in range(idle.shape[0]):
            busy = busy or idle[d] == 0
        mask[k_max] = busy


@njit
def step_to_choice(kind, k, d, f, g2, apply_args, advance_args, ib, fb, X, ready, pool, idle, est, qlen, pdata, params,
                   obs, mask, cand_k, cand_d, cand_f):
    """One decision of a :class:`~hybridsched.kinds.machine.late_steps.LateStepper` (its
    ``apply_args`` / ``advance_args`` and state arrays) in one compiled call: ``kind`` 1 starts
    ``(k, d, f, g2)``, 2 waits, 0 only advances (a fresh run); then the run goes on to the next
    pick point that has a candidate (pick points without one are passed over, as the late engine
    does), whose observation and mask go to ``obs`` and ``mask``, and the first
    ``max_candidates`` candidates' pool positions, start devices and GPU shares
    (``late_dqn.candidates``) to ``cand_k``, ``cand_d``, ``cand_f``.  Returns ``(c, g)``: how
    many candidates (0: the run has ended) and the GPU of their splits."""
    if kind == 1:
        _apply(k, d, f, g2, *apply_args)
        more = _advance(False, *advance_args)
    else:
        more = _advance(kind == 2, *advance_args)
    while more == 1:
        c, g, feat, ck, cd, cf = candidates(fb[_T], pool, ib[_N_POOL], idle, est, X, qlen, ready, pdata, params, GRID0)
        if c > 0:
            fill(feat, c, idle, obs, mask)
            m = min(c, cand_k.shape[0])
            cand_k[:m] = ck[:m]
            cand_d[:m] = cd[:m]
            cand_f[:m] = cf[:m]
            return c, g
        more = _advance(True, *advance_args)
    obs[:] = 0.0
    mask[:] = False
    return 0, 0


def resolve(action: int, mask: np.ndarray) -> tuple[int, bool]:
    """``(action run, whether the given one was feasible)``: an infeasible action runs 0."""
    a = int(action)
    if 0 <= a < mask.shape[0] and mask[a]:
        return a, True
    return 0, False
