"""Training the machine kind's ``cem`` scorer: the cross-entropy method (:mod:`hybridsched.rl.cem`)
on a mixture of workloads.

Each generation draws ``scenarios`` workloads from :data:`MachineCEMSettings` ranges (offered
load, intensity, memory, size, burst amplitude, DAG jobs) from a stream seeded by ``cem.seed``
and the generation (never :data:`~hybridsched.kinds.machine.scenarios.HELDOUT_SEED`), with one
noise draw each; every member of the population runs on those same draws (common random
numbers).  A member's cost is the mean over the drawn scenarios of its mean latency divided
by eft_rank's on that scenario, so an overloaded draw counts no more than a light one and
generation 0's row 0 (eft_rank itself) costs exactly 1.

The search vector ``theta``: log-multipliers of eft_rank's ``beta_cpu, beta_gpu, backlog_s,
kappa`` (0 = eft_rank's value, exactly), then the scorer's extra linear weights and its hidden
layer, all starting at 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from hybridsched.errors import HybridschedError, check_known_keys
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.policies.scorer import N_IN, N_LIN, CEMScorer
from hybridsched.kinds.machine.scenarios import HELDOUT_SEED, rate_for_load
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.workload import TaskTable, WorkloadSpec, generate

SCALED = ("beta_cpu", "beta_gpu", "backlog_s", "kappa")  # theta[:4]: log-multipliers of eft_rank's weights
_TRAIN_STREAM, _VALID_STREAM, _SELECT_STREAM = 1, 2, 3


@dataclass(frozen=True)
class MachineCEMSettings:
    """The ``cem.machine`` block: what the search trains on.  Ranges are ``[lo, hi]``, drawn
    uniformly, or log-uniformly for the ``*_log`` ones."""

    scenarios: int = 8                  # workloads per generation
    tasks: int = 2000                   # tasks per workload
    validation_scenarios: int = 12      # draws of a separate stream, scored once at the end
    select_from: int = 0                # >0: the last N means of the search (the final one included) are
    selection_scenarios: int = 8        # scored on draws of a third stream; the cheapest is the model
    hidden: int = 2                     # tanh units in the scorer (0: linear only)
    fraction_step: float = 0.05
    load: tuple[float, float] = (0.3, 1.15)
    intensity_low: tuple[float, float] = (0.0, 0.7)
    intensity_width: tuple[float, float] = (0.2, 1.0)
    memory_low_mb_log: tuple[float, float] = (50.0, 4000.0)
    memory_ratio_log: tuple[float, float] = (2.0, 300.0)
    size_high_log: tuple[float, float] = (50.0, 800.0)
    burst_amplitude: tuple[float, float] = (0.0, 0.8)
    burst_period_s: float = 300.0
    dag_share: float = 0.25             # share of scenarios whose tasks form DAG jobs
    dag_job_size: tuple[int, int] = (5, 20)
    dispatch: str = "arrival"           # late: train cem_late (late_cem_train.py) instead of cem
    late_base: str = "eft_late"         # the late heuristic cem_late starts from

    def __post_init__(self) -> None:
        checks = [("scenarios", self.scenarios >= 1), ("tasks", self.tasks >= 2),
                  ("validation_scenarios", self.validation_scenarios >= 0),
                  ("select_from", self.select_from >= 0), ("selection_scenarios", self.selection_scenarios >= 1), ("hidden", 0 <= self.hidden <= 16),
                  ("fraction_step", 0 < self.fraction_step <= 1), ("dag_share", 0 <= self.dag_share <= 1),
                  ("burst_period_s", self.burst_period_s > 0)]
        for name in ("load", "intensity_low", "intensity_width", "memory_low_mb_log", "memory_ratio_log",
                     "size_high_log", "burst_amplitude", "dag_job_size"):
            lo, hi = getattr(self, name)
            checks.append((name, 0 <= lo <= hi))
        checks += [("load", self.load[0] > 0), ("intensity_low", self.intensity_low[1] <= 1),
                   ("burst_amplitude", self.burst_amplitude[1] < 1), ("memory_low_mb_log", self.memory_low_mb_log[0] > 0),
                   ("memory_ratio_log", self.memory_ratio_log[0] >= 1), ("size_high_log", self.size_high_log[0] >= 1),
                   ("dag_job_size", self.dag_job_size[0] >= 2)]
        checks.append(("dispatch", self.dispatch in ("arrival", "late")))
        for name, ok in checks:
            if not ok:
                v = getattr(self, name)
                raise HybridschedError(f"cem.machine.{name}: {list(v) if isinstance(v, tuple) else v} is out of range")

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> MachineCEMSettings:
        d = dict(d or {})
        check_known_keys(d, {f.name for f in fields(cls)}, "cem.machine")
        try:
            return cls(**{k: tuple(v) if isinstance(v, list | tuple) else v for k, v in d.items()})
        except (TypeError, ValueError) as e:
            raise HybridschedError(f"cem.machine: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        d = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        if self.dispatch == "arrival":  # the cem model's record stays byte-identical to before late dispatch
            del d["dispatch"], d["late_base"]
        return d


def n_theta(settings: MachineCEMSettings) -> int:
    return len(SCALED) + N_LIN + settings.hidden * (N_IN + 2)


def model_from_theta(theta: np.ndarray, base0: dict[str, float], settings: MachineCEMSettings,
                     n_lin: int = N_LIN, n_in: int = N_IN) -> dict[str, Any]:
    """The scorer's weights for a search vector: log-multipliers of the base's ``SCALED`` weights,
    then ``n_lin`` linear terms and the hidden layer over ``n_in`` inputs (defaults: ``cem``'s);
    ``theta = 0`` gives the base heuristic (eft_rank for ``cem``) exactly."""
    theta = np.asarray(theta, dtype=np.float64)
    base = dict(base0)
    for k, z in zip(SCALED, theta[: len(SCALED)]):
        base[k] = float(base0[k] * np.exp(z))
    rest = theta[len(SCALED):]
    return {"base": base, "lin": rest[:n_lin].tolist(),
            "hidden": rest[n_lin:].reshape(settings.hidden, n_in + 2).tolist()}


def _u(rng: np.random.Generator, r: tuple[float, float], log: bool = False) -> float:
    if log:
        return float(np.exp(rng.uniform(np.log(r[0]), np.log(r[1]))))
    return float(rng.uniform(r[0], r[1]))


def draw_scenario(rng: np.random.Generator, settings: MachineCEMSettings, cluster: Cluster) -> dict[str, Any]:
    """One training workload (WorkloadSpec keys plus ``offered_load``)."""
    s = settings
    lo = _u(rng, s.intensity_low)
    mem_lo = _u(rng, s.memory_low_mb_log, log=True)
    spec = {"intensity_range": (lo, min(1.0, lo + _u(rng, s.intensity_width))),
            "memory_range": (mem_lo, min(mem_lo * _u(rng, s.memory_ratio_log, log=True), cluster.max_task_memory_mb)),
            "size_range": (1.0, _u(rng, s.size_high_log, log=True)),
            "burst_amplitude": _u(rng, s.burst_amplitude), "burst_period_s": s.burst_period_s}
    if spec["memory_range"][0] > spec["memory_range"][1]:  # a low end above what any device holds
        spec["memory_range"] = (spec["memory_range"][1],) * 2
    if rng.uniform() < s.dag_share:
        spec["dag_job_size"] = int(rng.integers(s.dag_job_size[0], s.dag_job_size[1] + 1))
    load = _u(rng, s.load)
    return {**spec, "rate": rate_for_load(WorkloadSpec(**spec), cluster, load), "offered_load": load}


def draw_set(seed: int, stream: int, index: int, settings: MachineCEMSettings, cluster: Cluster,
             n: int) -> list[tuple[dict[str, Any], TaskTable, Any]]:
    """``n`` scenarios with their tasks and one noise realisation each, from ``(seed, stream, index)``."""
    rng = np.random.default_rng([seed, stream, index])
    out = []
    for _ in range(n):
        w = draw_scenario(rng, settings, cluster)
        spec = WorkloadSpec(**{k: v for k, v in w.items() if k != "offered_load"})
        tasks = generate(spec, settings.tasks, rng, cpu_gflops=cluster.cpu_gflops)
        out.append((w, tasks, cluster.sample_noise(len(tasks), rng)))
    return out


class Family(NamedTuple):
    """A learned scorer the search trains: its policy class, its weights from a search vector
    (``theta = 0``: the base heuristic exactly), the vector's length, and the names of the
    validation costs (base heuristic, learned model)."""

    scorer: Any
    model_from_theta: Callable[[np.ndarray, dict[str, float], MachineCEMSettings], dict[str, Any]]
    n_theta: Callable[[MachineCEMSettings], int]
    base_name: str
    name: str


def mean_latency(tasks: TaskTable, cluster: Cluster, model: dict[str, Any], real, fraction_step: float,
                 scorer: Any = CEMScorer) -> float:
    tr = simulate(tasks, cluster, scorer(model=model, fraction_step=fraction_step), real)
    return float(np.mean(tr.end - tr.arrival))


def relative_costs(thetas: np.ndarray, draws, base0: dict[str, float], settings: MachineCEMSettings,
                   cluster: Cluster, family: Family | None = None) -> np.ndarray:
    """Per row of ``thetas``: mean over ``draws`` of (mean latency / the base heuristic's: eft_rank
    for ``cem``)."""
    f = family or ARRIVAL
    ref_model = f.model_from_theta(np.zeros(thetas.shape[1]), base0, settings)
    cost = np.zeros(len(thetas))
    for _, tasks, real in draws:
        ref = mean_latency(tasks, cluster, ref_model, real, settings.fraction_step, f.scorer)
        for r, theta in enumerate(thetas):
            cost[r] += mean_latency(tasks, cluster, f.model_from_theta(theta, base0, settings), real,
                                    settings.fraction_step, f.scorer) / ref
    return cost / len(draws)


def check_seed(seed: int) -> None:
    if int(seed) == HELDOUT_SEED:
        raise HybridschedError(f"cem.seed: {seed} is the held-out scenarios' seed; training must never use it")


def select_theta(means: list[np.ndarray], base0: dict[str, float], seed: int, settings: MachineCEMSettings,
                 cluster: Cluster, family: Family | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """The cheapest of the last ``select_from`` means on the selection stream's draws (never the
    training draws, the validation draws or any evaluation workload); the final mean when 0."""
    if not settings.select_from:
        return means[-1], {}
    cands = means[-min(settings.select_from, len(means)):]
    draws = draw_set(seed, _SELECT_STREAM, 0, settings, cluster, settings.selection_scenarios)
    costs = relative_costs(np.stack(cands), draws, base0, settings, cluster, family)
    k = int(np.argmin(costs))
    # generation whose starting mean was chosen (len(means) - 1 = the final mean, after the last update)
    return cands[k], {"selected_generation": len(means) - len(cands) + k, "selection_costs": costs.round(6).tolist()}


def train_scorer(base0: dict[str, float], search, settings: MachineCEMSettings, cluster: Cluster,
                 family: Family | None = None):
    """Run the search (``search``: :class:`~hybridsched.rl.cem.CEMSettings`) and pick the model
    (:func:`select_theta`); returns the :class:`~hybridsched.rl.cem.CEMResult` with ``theta`` the
    chosen vector, the validation costs of the start, the final mean and the choice, and the
    selection record.  ``family``: the scorer trained (default ``cem``; ``cem_late`` passes its own)."""
    from dataclasses import replace

    from hybridsched.rl.cem import train

    f = family or ARRIVAL
    check_seed(search.seed)

    def objective(thetas: np.ndarray, gen: int) -> np.ndarray:
        draws = draw_set(search.seed, _TRAIN_STREAM, gen, settings, cluster, settings.scenarios)
        return relative_costs(thetas, draws, base0, settings, cluster, f)

    result = train(objective, np.zeros(f.n_theta(settings)), search)
    theta, selection = select_theta(result.means, base0, search.seed, settings, cluster, f)
    valid = {}
    if settings.validation_scenarios:
        draws = draw_set(search.seed, _VALID_STREAM, 0, settings, cluster, settings.validation_scenarios)
        c = relative_costs(np.stack([np.zeros_like(theta), result.theta, theta]), draws, base0, settings, cluster, f)
        valid = {f.base_name: float(c[0]), "final_mean": float(c[1]), f.name: float(c[2])}
    return replace(result, theta=theta), valid, selection


ARRIVAL = Family(CEMScorer, model_from_theta, n_theta, "eft_rank", "cem")
