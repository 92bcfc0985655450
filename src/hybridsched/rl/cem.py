"""The cross-entropy method: a derivative-free search of a policy's parameters.

Kind-neutral, like :mod:`hybridsched.rl.dqn`: a kind supplies the parameter vector's start
(a heuristic's weights, so generation 0 *is* that heuristic) and an objective that scores a
whole population at once on the same scenarios (common random numbers), and gets back the
search distribution's final mean.  One visible loop; the RNG is seeded, so a run is
reproducible bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from hybridsched.errors import HybridschedError, check_known_keys

# objective(thetas [population, dim], generation) -> cost per row (lower is better)
Objective = Callable[[np.ndarray, int], np.ndarray]


@dataclass(frozen=True)
class CEMSettings:
    """The search itself; what a kind trains on lives in its own ``cem.<kind>`` block."""

    generations: int = 30
    population: int = 24
    elite_frac: float = 0.25
    init_std: float = 0.5           # in the units of the (kind-scaled) parameter vector
    min_std: float = 0.02           # a floor, so the search never collapses early
    smoothing: float = 0.7          # new = smoothing * elite statistic + (1 - smoothing) * old
    antithetic: bool = False        # draw members in mirrored pairs mean +- std * eps (less noisy elite)
    seed: int = 0

    def __post_init__(self) -> None:
        bad = [(k, v) for k, v, ok in (
            ("generations", self.generations, self.generations >= 1),
            ("population", self.population, self.population >= 2),
            ("elite_frac", self.elite_frac, 0 < self.elite_frac <= 1),
            ("init_std", self.init_std, self.init_std > 0),
            ("min_std", self.min_std, 0 <= self.min_std <= self.init_std),
            ("smoothing", self.smoothing, 0 < self.smoothing <= 1)) if not ok]
        if bad:
            k, v = bad[0]
            raise HybridschedError(f"cem.{k}: {v!r} is out of range")

    @property
    def n_elite(self) -> int:
        return max(1, int(round(self.elite_frac * self.population)))

    @classmethod
    def from_dict(cls, d: dict[str, Any], setting: str = "cem") -> CEMSettings:
        """From the ``cem`` block; its sub-blocks (``model_dir``, per-kind ``machine`` ...)
        are not search settings and are skipped, any other unknown key is an error."""
        names = {f.name for f in fields(cls)}
        search = {k: v for k, v in d.items() if not isinstance(v, dict) and k != "model_dir"}
        check_known_keys(search, names, setting)
        return cls(**search)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CEMResult:
    theta: np.ndarray                         # the final mean of the search distribution
    history: list[dict[str, float]]           # one row per generation
    wall_s: float
    means: list[np.ndarray]                   # the mean at the start of each generation, then the final one


def sample(mean: np.ndarray, std: np.ndarray, population: int, antithetic: bool, rng: np.random.Generator) -> np.ndarray:
    """One population: row 0 the mean, the rest mean + std * eps (in mirrored pairs if ``antithetic``)."""
    eps = rng.standard_normal((population, mean.size))
    if antithetic:
        half = (population - 1) // 2
        eps[1 + half: 1 + 2 * half] = -eps[1: 1 + half]
    thetas = mean + std * eps
    thetas[0] = mean
    return thetas


def train(objective: Objective, theta0: np.ndarray, settings: CEMSettings) -> CEMResult:
    """Diagonal-Gaussian CEM from ``theta0``.  Row 0 of every population is the current mean,
    so each generation also scores the policy the search would return right now."""
    rng = np.random.default_rng(settings.seed)
    mean = np.asarray(theta0, dtype=np.float64).copy()
    std = np.full_like(mean, settings.init_std)
    history: list[dict[str, float]] = []
    means: list[np.ndarray] = []
    t0 = time.perf_counter()
    for gen in range(settings.generations):
        means.append(mean.copy())
        thetas = sample(mean, std, settings.population, settings.antithetic, rng)
        costs = np.asarray(objective(thetas, gen), dtype=np.float64)
        if costs.shape != (settings.population,) or not np.all(np.isfinite(costs)):
            raise HybridschedError(f"cem: the objective returned {costs.shape} costs, some not finite")
        elite = thetas[np.argsort(costs, kind="stable")[: settings.n_elite]]
        mean = settings.smoothing * elite.mean(axis=0) + (1 - settings.smoothing) * mean
        std = np.maximum(settings.smoothing * elite.std(axis=0) + (1 - settings.smoothing) * std, settings.min_std)
        history.append({"generation": gen, "mean_cost": float(costs[0]), "best_cost": float(costs.min()),
                        "elite_cost": float(np.sort(costs)[: settings.n_elite].mean()),
                        "population_cost": float(costs.mean()), "std": float(std.mean()),
                        "wall_s": time.perf_counter() - t0})
    return CEMResult(theta=mean, history=history, wall_s=time.perf_counter() - t0, means=[*means, mean.copy()])
