"""Training the cluster kind's ``cem`` scorer: the cross-entropy method (``rl/cem.py``) on a
mixture of scenarios drawn from the training split only.

A scenario is a window of consecutive training pods (a random length and start), shifted
to start at 0, with its arrival rate scaled by a random factor (arrivals divided by it).
Every generation draws fresh scenarios from ``cem.seed`` and the generation number, and
scores the whole population on the *same* scenarios (common random numbers).  The cost of
a weight vector is the mean over the scenarios of its mean JCT divided by ``eft``'s mean JCT
on that scenario, so 1.0 is eft and every scenario counts alike whatever its scale.

Settings: the ``cem.cluster`` block of conf/kinds/cluster.yaml (:class:`ClusterCEMSettings`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from hybridsched.errors import HybridschedError, check_known_keys
from hybridsched.kinds.cluster.cem import FEATURES, QUEUE_FEATURES, ScoredEFT, weights_dict
from hybridsched.kinds.cluster.engine import simulate
from hybridsched.kinds.cluster.nodes import NodeCluster, RunInputs, run_inputs
from hybridsched.kinds.cluster.policies import EarliestFinishTime
from hybridsched.kinds.cluster.trace import PodTable
from hybridsched.rl.cem import CEMSettings, train

EVAL_SEED_OFFSET = 1_000_003  # the final check's scenarios: a seed no generation uses


@dataclass(frozen=True)
class ClusterCEMSettings:
    """What the search trains on (``cem.cluster``)."""

    windows: int = 8                    # scenarios per generation
    min_pods: int = 800                 # window length range (pods)
    max_pods: int = 2400
    min_rate: float = 1.5               # arrival-rate scale range
    max_rate: float = 3.0
    eval_windows: int = 12              # fresh training scenarios to pick the generation by, and to check it
    search: str = "all"                 # "all" weights, or "queue" only (the tuned-queue heuristic)

    def __post_init__(self) -> None:
        bad = [(k, v) for k, v, ok in (
            ("windows", self.windows, self.windows >= 1),
            ("min_pods", self.min_pods, self.min_pods >= 2),
            ("max_pods", self.max_pods, self.max_pods >= self.min_pods),
            ("min_rate", self.min_rate, self.min_rate > 0),
            ("max_rate", self.max_rate, self.max_rate >= self.min_rate),
            ("eval_windows", self.eval_windows, self.eval_windows >= 0),
            ("search", self.search, self.search in ("all", "queue"))) if not ok]
        if bad:
            k, v = bad[0]
            raise HybridschedError(f"cem.cluster.{k}: {v!r} is out of range")

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> ClusterCEMSettings:
        d = dict(d or {})
        check_known_keys(d, {f.name for f in fields(cls)}, "cem.cluster")
        return cls(**d)


@dataclass
class Scenario:
    """One training scenario: its run inputs and eft's mean JCT on it."""

    inp: RunInputs
    eft_jct: float
    start: int
    pods: int
    rate: float
    load: float = float("nan")  # the drawn U(low, high) factor (rate / scale; with rate_of the nominal load)
    # a window of another node sample (queue_train.Domain): its cluster, and the training split
    # its policies are fitted on; None = the trainer's own cluster and split
    cluster: NodeCluster | None = None
    fit_pods: PodTable | None = None


def draw_windows(train: PodTable, cluster: NodeCluster, eft: EarliestFinishTime, n: int, seed: int, *,
                 min_pods: int, max_pods: int, low: float, high: float, scale: float = 1.0,
                 rate_of: Callable[[PodTable, float], float] | None = None) -> list[Scenario]:
    """``n`` seeded windows of the training split (random length and start, shifted to 0), each
    with its arrivals divided by ``scale x U(low, high)``, or by ``rate_of(window, load)`` (the
    window shifted to 0, unscaled; the queue mode's trainer matches each window's rate factor
    to its load).  The random draws do not depend on the rate, so the same seed gives the same
    windows and load factors either way."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        size = int(rng.integers(min(min_pods, len(train)), min(max_pods, len(train)) + 1))
        start = int(rng.integers(0, len(train) - size + 1))
        load = float(rng.uniform(low, high))
        pods = train.subset(np.arange(start, start + size))
        pods.arrival = pods.arrival - pods.arrival[0]
        rate = rate_of(pods, load) if rate_of is not None else scale * load
        pods.arrival = pods.arrival / rate
        inp = run_inputs(pods, cluster)
        out.append(Scenario(inp, _mean_jct(inp, cluster, eft), start, size, rate, load))
    return out


def draw_scenarios(train: PodTable, cluster: NodeCluster, eft: EarliestFinishTime, s: ClusterCEMSettings,
                   n: int, seed: int) -> list[Scenario]:
    """``n`` windows of the training split with scaled arrival rates (seeded)."""
    return draw_windows(train, cluster, eft, n, seed, min_pods=s.min_pods, max_pods=s.max_pods,
                        low=s.min_rate, high=s.max_rate)


def _mean_jct(inp: RunInputs, cluster: NodeCluster, policy) -> float:
    tr = simulate(inp, cluster, policy)
    return float(np.mean(tr.end - inp.arrival))


def cost(theta: np.ndarray, scenarios: list[Scenario], cluster: NodeCluster, policy: ScoredEFT) -> float:
    """Mean over the scenarios of mean JCT / eft's mean JCT."""
    policy.set_weights(theta)
    return float(np.mean([_mean_jct(sc.inp, cluster, policy) / sc.eft_jct for sc in scenarios]))


def train_scorer(train_pods: PodTable, cluster: NodeCluster, cem: CEMSettings, s: ClusterCEMSettings
                 ) -> tuple[np.ndarray, list[dict[str, float]], dict[str, Any]]:
    """CEM from the all-zero weights (= eft): ``(theta, history, metrics)``.  With
    ``search: queue`` only the queue weights move (the node weights stay 0)."""
    eft = EarliestFinishTime()
    eft.fit(train_pods)
    policy = ScoredEFT()
    policy.fit(train_pods)
    free = np.arange(len(FEATURES)) if s.search == "all" else np.arange(len(FEATURES) - len(QUEUE_FEATURES), len(FEATURES))

    def full(sub: np.ndarray) -> np.ndarray:
        theta = np.zeros(len(FEATURES))
        theta[free] = sub
        return theta

    means: list[np.ndarray] = []  # the search mean at each generation (row 0 of its population)

    def objective(thetas: np.ndarray, generation: int) -> np.ndarray:
        means.append(full(thetas[0]))
        scen = draw_scenarios(train_pods, cluster, eft, s, s.windows, cem.seed * 7919 + generation)
        return np.array([cost(full(th), scen, cluster, policy) for th in thetas])

    result = train(objective, np.zeros(len(free)), cem)
    candidates = [*means, full(result.theta)]  # generation 0's mean is eft itself
    metrics: dict[str, Any] = {"kind": "cluster", "search": s.search, "n_train_pods": len(train_pods),
                               "settings": {**cem.to_dict(), **asdict(s)},
                               "first_mean_cost": result.history[0]["mean_cost"],
                               "last_mean_cost": result.history[-1]["mean_cost"], "wall_s": result.wall_s}
    theta = candidates[-1]
    if s.eval_windows:
        # the per-generation cost is noisy (fresh scenarios each time), so the final mean is not
        # necessarily the best one seen: pick among the generations' means (eft included) on one
        # fixed set of fresh training scenarios, and report the pick on another fresh set
        select = draw_scenarios(train_pods, cluster, eft, s, s.eval_windows, cem.seed * 7919 + EVAL_SEED_OFFSET)
        costs = [cost(th, select, cluster, policy) for th in candidates]
        pick = int(np.argmin(costs))
        theta = candidates[pick]
        check = draw_scenarios(train_pods, cluster, eft, s, s.eval_windows, cem.seed * 7919 + 2 * EVAL_SEED_OFFSET)
        metrics.update({"selected_generation": pick, "selection_cost": costs[pick],
                        "selection_cost_final_mean": costs[-1], "check_cost": cost(theta, check, cluster, policy),
                        "check_windows": s.eval_windows})
    metrics["weights"] = weights_dict(theta)
    return theta, result.history, metrics
