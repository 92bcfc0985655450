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

from dataclasses import replace
from typing import Any

import numpy as np

from hybridsched.kinds.machine.cem_train import (
    _SELECT_STREAM,
    _TRAIN_STREAM,
    _VALID_STREAM,
    MachineCEMSettings,
    check_seed,
    draw_set,
)
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.policies.late_scorer import N_IN, N_LIN, CEMLate
from hybridsched.kinds.machine.sim import simulate

SCALED = ("beta_cpu", "beta_gpu", "backlog_s", "kappa")


def n_theta(settings: MachineCEMSettings) -> int:
    return len(SCALED) + N_LIN + settings.hidden * (N_IN + 2)


def model_from_theta(theta: np.ndarray, base0: dict[str, float], settings: MachineCEMSettings) -> dict[str, Any]:
    """The scorer's weights for a search vector; ``theta = 0`` gives the base heuristic exactly."""
    theta = np.asarray(theta, dtype=np.float64)
    base = dict(base0)
    for k, z in zip(SCALED, theta[: len(SCALED)]):
        base[k] = float(base0[k] * np.exp(z))
    rest = theta[len(SCALED):]
    return {"base": base, "lin": rest[:N_LIN].tolist(), "hidden": rest[N_LIN:].reshape(settings.hidden, N_IN + 2).tolist()}


def mean_latency(tasks, cluster: Cluster, model: dict[str, Any], real, fraction_step: float) -> float:
    tr = simulate(tasks, cluster, CEMLate(model=model, fraction_step=fraction_step), real)
    return float(np.mean(tr.end - tr.arrival))


def relative_costs(thetas: np.ndarray, draws, base0: dict[str, float], settings: MachineCEMSettings,
                   cluster: Cluster) -> np.ndarray:
    """Per row of ``thetas``: mean over ``draws`` of (mean latency / the base heuristic's)."""
    ref_model = model_from_theta(np.zeros(thetas.shape[1]), base0, settings)
    cost = np.zeros(len(thetas))
    for _, tasks, real in draws:
        ref = mean_latency(tasks, cluster, ref_model, real, settings.fraction_step)
        for r, theta in enumerate(thetas):
            cost[r] += mean_latency(tasks, cluster, model_from_theta(theta, base0, settings), real,
                                    settings.fraction_step) / ref
    return cost / len(draws)


def train_late_scorer(base0: dict[str, float], search, settings: MachineCEMSettings, cluster: Cluster):
    """As :func:`cem_train.train_scorer`, for ``cem_late``: the search, the selection among the
    last ``select_from`` means on the selection stream, and the validation costs."""
    from hybridsched.rl.cem import train

    check_seed(search.seed)

    def objective(thetas: np.ndarray, gen: int) -> np.ndarray:
        draws = draw_set(search.seed, _TRAIN_STREAM, gen, settings, cluster, settings.scenarios)
        return relative_costs(thetas, draws, base0, settings, cluster)

    result = train(objective, np.zeros(n_theta(settings)), search)
    theta, selection = result.theta, {}
    if settings.select_from:
        cands = result.means[-min(settings.select_from, len(result.means)):]
        draws = draw_set(search.seed, _SELECT_STREAM, 0, settings, cluster, settings.selection_scenarios)
        costs = relative_costs(np.stack(cands), draws, base0, settings, cluster)
        k = int(np.argmin(costs))
        theta = cands[k]
        selection = {"selected_generation": len(result.means) - len(cands) + k,
                     "selection_costs": costs.round(6).tolist()}
    valid = {}
    if settings.validation_scenarios:
        draws = draw_set(search.seed, _VALID_STREAM, 0, settings, cluster, settings.validation_scenarios)
        c = relative_costs(np.stack([np.zeros_like(theta), result.theta, theta]), draws, base0, settings, cluster)
        valid = {"base": float(c[0]), "final_mean": float(c[1]), "cem_late": float(c[2])}
    return replace(result, theta=theta), valid, selection
