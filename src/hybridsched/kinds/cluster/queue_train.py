"""Training the queue mode's learned order (``queue_order.LearnedOrder``) by the cross-entropy
method (``rl/cem.py``) on a *load mixture* of windows of the training split.

A scenario is a window of consecutive training pods (random length and start), shifted to
start at 0, with its arrivals divided by ``base_rate x load``, ``load ~ U(min_load, max_load)``.
``base_rate`` is the rate factor at which the training windows queue about as much as the test
split does under eft (``cem.cluster``'s range 1.5-3 is chosen that way: on it 22-38 % of the
pods wait, against 26 % on the test split); the default 2.25 is its middle, so
``load`` 0.75-1.5 is meant as the same range of loads as the test split's x0.75-x1.5 (a
calibration on the training split only: the test split is never read).

Every generation draws fresh scenarios (seeded by ``seed`` and the generation) and scores the
whole population on them (common random numbers).  Cost = mean over the scenarios of the
member's mean JCT / ``eft``'s mean JCT (the default engine), so 1.0 is eft at every load and a
light window weighs as much as a heavy one.  As in ``cem_train.py``, the generations' means
(generation 0 = all-zero weights = shortest-first with the given node policy) are scored on one
fixed set of fresh training scenarios to pick the result, which is then reported on a second.

Calibration (``calibrate``): with ``rate`` a window's load 1 is the one rate factor
``base_rate`` for every window; with ``wait_share`` it is found per window: the rate factor at
which ``eft`` (the default engine) makes ``wait_share`` of the window's pods wait (default 0.26,
the share that waits under eft on the test split at x1, docs/findings/cluster.md), by bisection on its
log.  Windows differ a lot in their own load (idle stretches, bursts, the long services of the
training split), so one factor gives windows that hardly queue next to windows in overload at
the same nominal load; per-window matching makes load ``x`` mean "x times the arrival rate at
which this window queues as the test split does at x1".  With ``wait_curve`` every load is matched,
not only load 1: load ``x`` of a window is the rate factor at which eft makes ``share(x)`` of its
pods wait, ``share`` interpolated linearly at ``x`` in ``wait_curve``'s (load, share) points
(default: eft's waited shares on the test split at x0.75-x1.75, docs/findings/cluster.md; eft figures
only, as the 0.26 above).  The test split's own waited share is far from linear in its rate
(1.2 % at x0.75, 25.7 % at x1), so ``wait_share``'s load 0.75 (0.75 x the factor of 26 %) is
likely a much busier window than the test split at x0.75.

Node samples (``domains``): the cluster is a sample of 16 of the trace's 1523 nodes, and a policy
trained on one sample's windows learns that cluster.  With ``domains`` (each a node sample's
training split and cluster, :class:`Domain`) every window is drawn on a domain picked at random
(seeded), its load calibrated on that domain's eft, and its cost is ÷ eft's on the same domain;
the policy is fitted on that domain's training split, as it would be on that cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from hybridsched.errors import HybridschedError
from hybridsched.kinds.cluster.cem_train import Scenario, draw_windows
from hybridsched.kinds.cluster.engine import simulate
from hybridsched.kinds.cluster.nodes import NodeCluster, run_inputs
from hybridsched.kinds.cluster.policies import EarliestFinishTime
from hybridsched.kinds.cluster.queue_engine import BACKFILL, simulate_queue
from hybridsched.kinds.cluster.queue_order import FEATURES, LearnedOrder
from hybridsched.kinds.cluster.queue_policy import JOINT_FEATURES, NODE_KEYS, split
from hybridsched.kinds.cluster.trace import PodTable
from hybridsched.rl.cem import CEMSettings, train

SELECT_SEED = 1_000_003  # the selection and check scenarios: seeds no generation uses
DOMAIN_STREAM = 17  # the random stream that picks each window's node sample (apart from the windows' own)
# (load, share of the pods that wait under eft) on the test split at x0.75-x1.75: the eft rows of
# studies.cluster_queue on the pipeline's cluster (docs/findings/cluster.md); calibrate: wait_curve's default
WAIT_CURVE: tuple[tuple[float, float], ...] = ((0.75, 0.012), (1.0, 0.257), (1.25, 0.332), (1.5, 0.436),
                                               (1.75, 0.481))


@dataclass(frozen=True)
class QueueTrainSettings:
    """What the learned queue order trains on."""

    windows: int = 3            # scenarios per generation
    min_pods: int = 800         # window length range (pods)
    max_pods: int = 1600
    base_rate: float = 2.25     # rate factor of load 1 on the training split (module docstring)
    min_load: float = 0.75      # the load mixture
    max_load: float = 1.5
    eval_windows: int = 4       # selection scenarios, and as many check scenarios
    backfill: str = "greedy"    # the queue mode's backfilling rule while training
    strata: int = 0             # > 0: loads stratified into this many equal bins, window j in bin j % strata
    select: str = "mean"        # pick the generation by the "mean" cost or the "worst" stratum's mean cost
    joint: bool = False         # learn the node choice too (queue_policy.py), from eft's (all zeros)
    node_search: str = "all"    # joint: move "all" node weights, or only the "fade" (node weights held at the start)
    calibrate: str = "rate"     # load 1 of a window: "rate" (base_rate) or "wait_share" (matched per window);
    #                             "wait_curve": every load matched per window on wait_curve's share
    wait_share: float = 0.26    # calibrate: wait_share: the share of pods that wait under eft at load 1
    wait_curve: tuple[tuple[float, float], ...] = WAIT_CURVE  # calibrate: wait_curve: (load, share) points
    min_fade: float | None = None  # joint: the fade is clipped at this from below (0: node weights never grow with the backlog)

    def __post_init__(self) -> None:
        bad = [(k, v) for k, v, ok in (
            ("windows", self.windows, self.windows >= 1), ("min_pods", self.min_pods, self.min_pods >= 2),
            ("max_pods", self.max_pods, self.max_pods >= self.min_pods), ("base_rate", self.base_rate, self.base_rate > 0),
            ("min_load", self.min_load, self.min_load > 0), ("max_load", self.max_load, self.max_load >= self.min_load),
            ("eval_windows", self.eval_windows, self.eval_windows >= 0),
            ("backfill", self.backfill, self.backfill in BACKFILL), ("strata", self.strata, self.strata >= 0),
            ("select", self.select, self.select in ("mean", "worst") and (self.select == "mean" or self.strata > 0)),
            ("joint", self.joint, isinstance(self.joint, bool)),
            ("node_search", self.node_search, self.node_search in ("all", "fade")),
            ("calibrate", self.calibrate, self.calibrate in ("rate", "wait_share", "wait_curve")),
            ("wait_share", self.wait_share, 0 < self.wait_share < 1),
            ("wait_curve", self.wait_curve, _curve_ok(self.wait_curve) and (
                self.calibrate != "wait_curve"
                or self.wait_curve[0][0] <= self.min_load and self.max_load <= self.wait_curve[-1][0])),
            ("min_fade", self.min_fade, self.min_fade is None or np.isfinite(self.min_fade))) if not ok]
        if bad:
            k, v = bad[0]
            raise HybridschedError(f"queue training: {k} = {v!r} is out of range")


def _curve_ok(curve) -> bool:
    """(load, share) points: at least one, loads positive and increasing, shares in (0, 1) and
    non-decreasing (so the matched rate factor grows with the load)."""
    try:
        pts = np.array(curve, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return bool(pts.ndim == 2 and pts.shape[0] >= 1 and pts.shape[1] == 2 and np.all(np.isfinite(pts))
                and np.all(pts[:, 0] > 0) and np.all(np.diff(pts[:, 0]) > 0)
                and np.all((pts[:, 1] > 0) & (pts[:, 1] < 1)) and np.all(np.diff(pts[:, 1]) >= 0))


def curve_share(curve, load: float) -> float:
    """The waited share of ``curve``'s (load, share) points at ``load``, linearly interpolated
    (the settings refuse loads outside the points)."""
    pts = np.array(curve, dtype=np.float64)
    return float(np.interp(load, pts[:, 0], pts[:, 1]))


def waited_share(pods: PodTable, cluster: NodeCluster, eft: EarliestFinishTime, rate: float) -> float:
    """The share of ``pods`` that wait under eft (the default engine) with arrivals divided by ``rate``."""
    scaled = pods.subset(np.arange(len(pods)))
    scaled.arrival = pods.arrival / rate
    inp = run_inputs(scaled, cluster)
    tr = simulate(inp, cluster, eft)
    return float(np.mean(tr.start - inp.arrival > 0))


def matched_rate(pods: PodTable, cluster: NodeCluster, eft: EarliestFinishTime, share: float,
                 low: float = 0.5, high: float = 8.0, steps: int = 8) -> float:
    """The rate factor at which ``share`` of ``pods`` wait under eft: bisection on ``log(rate)``
    in ``[low, high]`` (``steps`` halvings; an end of the bracket if the share is not crossed
    inside it).  The waited share grows with the rate almost everywhere; where it does not, the
    bisection still returns a factor near a crossing, deterministically."""
    lo, hi = np.log(low), np.log(high)
    if waited_share(pods, cluster, eft, low) >= share:
        return low
    if waited_share(pods, cluster, eft, high) <= share:
        return high
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        if waited_share(pods, cluster, eft, float(np.exp(mid))) < share:
            lo = mid
        else:
            hi = mid
    return float(np.exp(0.5 * (lo + hi)))


@dataclass(frozen=True)
class Domain:
    """One node sample's training split and cluster, with eft fitted on that split: where
    :func:`draw_scenarios` draws a window when training across node samples."""

    pods: PodTable
    cluster: NodeCluster
    eft: EarliestFinishTime

    @classmethod
    def of(cls, pods: PodTable, cluster: NodeCluster) -> Domain:
        """The domain of ``pods`` on ``cluster``, eft fitted on ``pods``."""
        eft = EarliestFinishTime()
        eft.fit(pods)
        return cls(pods, cluster, eft)


def draw_scenarios(train_pods: PodTable, cluster: NodeCluster, eft: EarliestFinishTime, s: QueueTrainSettings,
                   n: int, seed: int, domains: Sequence[Domain] | None = None) -> list[Scenario]:
    """``n`` seeded windows of the training split, each at a load drawn from the mixture; with
    ``strata`` the mixture is cut into equal load bins and window ``j`` draws its load in bin
    ``j % strata`` (every generation then sees light and heavy windows alike).  Load 1 of a
    window is ``base_rate`` or, with ``calibrate: wait_share``, its :func:`matched_rate`; with
    ``calibrate: wait_curve`` load ``x`` of a window is its :func:`matched_rate` at the share of
    ``wait_curve`` at ``x`` (not a multiple of load 1's).  With ``domains`` the windows come from
    those instead (:func:`draw_across`)."""
    if domains:
        return draw_across(domains, s, n, seed)
    kw: dict[str, Any] = {"min_pods": s.min_pods, "max_pods": s.max_pods, "scale": s.base_rate}
    if s.calibrate == "wait_share":
        kw["rate_of"] = lambda pods, load: matched_rate(pods, cluster, eft, s.wait_share) * load
    elif s.calibrate == "wait_curve":
        kw["rate_of"] = lambda pods, load: matched_rate(pods, cluster, eft, curve_share(s.wait_curve, load))
    if not s.strata:
        return draw_windows(train_pods, cluster, eft, n, seed, low=s.min_load, high=s.max_load, **kw)
    edges = np.linspace(s.min_load, s.max_load, s.strata + 1)
    per = [draw_windows(train_pods, cluster, eft, len(range(b, n, s.strata)), seed * 31 + b,
                        low=float(edges[b]), high=float(edges[b + 1]), **kw)
           for b in range(min(s.strata, n))]
    return [per[j % s.strata][j // s.strata] for j in range(n)]


def draw_across(domains: Sequence[Domain], s: QueueTrainSettings, n: int, seed: int) -> list[Scenario]:
    """``n`` windows, each on a domain picked uniformly at random.

    The picks have their own random stream, so a window's draw does not depend on them.
    Window ``j``'s load is in stratum ``j % strata``, as in :func:`draw_scenarios`.  Each
    window is drawn, calibrated and costed by eft on its own domain, and records that
    domain's cluster and training split."""
    picks = np.random.default_rng([seed, DOMAIN_STREAM]).integers(0, len(domains), n)
    edges = np.linspace(s.min_load, s.max_load, max(s.strata, 1) + 1)
    out = []
    for j, d in enumerate(picks):
        b = j % s.strata if s.strata else 0
        one = replace(s, strata=0, select="mean", min_load=float(edges[b]), max_load=float(edges[b + 1]))
        dom = domains[int(d)]
        sc = draw_scenarios(dom.pods, dom.cluster, dom.eft, one, 1, seed * 1009 + j)[0]
        out.append(replace(sc, cluster=dom.cluster, fit_pods=dom.pods))
    return out


def eval_scenarios(train_pods: PodTable, cluster: NodeCluster, eft: EarliestFinishTime, s: QueueTrainSettings,
                   seed: int, domains: Sequence[Domain] | None = None) -> tuple[list[Scenario], list[Scenario]]:
    """The pick's ``eval_windows`` selection windows and as many check windows of the search
    seeded ``seed`` (seeds no generation uses): :func:`train_order`'s and :func:`fade_scan`'s."""
    return (draw_scenarios(train_pods, cluster, eft, s, s.eval_windows, seed * 7919 + SELECT_SEED, domains),
            draw_scenarios(train_pods, cluster, eft, s, s.eval_windows, seed * 7919 + 2 * SELECT_SEED, domains))


def make_policy(theta: np.ndarray, node_policy, train_pods: PodTable | None) -> tuple[LearnedOrder, Any]:
    """The order and node policy of ``theta``: a joint vector (``queue_policy.JOINT_FEATURES``,
    the node policy built and fitted here) or an order vector with the given fitted node policy."""
    if len(theta) == len(JOINT_FEATURES):
        order, pol = split(theta)
        pol.fit(train_pods)
        return order, pol
    order = LearnedOrder()
    order.set_weights(theta)
    return order, node_policy


def window_costs(theta: np.ndarray, scenarios: list[Scenario], cluster: NodeCluster, node_policy, backfill: str,
                 train_pods: PodTable | None = None) -> np.ndarray:
    """Per scenario: mean JCT (queue mode, policy ``theta``) / eft's (the default engine).  A
    window of another node sample runs on its cluster, the policy fitted on its split."""
    made: dict[int, tuple[LearnedOrder, Any]] = {}
    costs = []
    for sc in scenarios:
        fit_pods = train_pods if sc.fit_pods is None else sc.fit_pods
        if id(fit_pods) not in made:
            made[id(fit_pods)] = make_policy(theta, node_policy, fit_pods)
        order, pol = made[id(fit_pods)]
        tr = simulate_queue(sc.inp, cluster if sc.cluster is None else sc.cluster, pol, order, backfill).trace
        costs.append(float(np.mean(tr.end - sc.inp.arrival)) / sc.eft_jct)
    return np.array(costs)


def queue_cost(theta: np.ndarray, scenarios: list[Scenario], cluster: NodeCluster, node_policy,
               backfill: str, train_pods: PodTable | None = None) -> float:
    """Mean over the scenarios of mean JCT (queue mode, policy ``theta``) / eft's."""
    return float(np.mean(window_costs(theta, scenarios, cluster, node_policy, backfill, train_pods)))


def select_cost(costs: np.ndarray, s: QueueTrainSettings) -> float:
    """The selection rule: the mean cost, or (``select: worst``) the largest per-stratum mean."""
    if s.select == "mean":
        return float(np.mean(costs))
    return float(max(np.mean(costs[b::s.strata]) for b in range(min(s.strata, len(costs)))))


def stratum_costs(costs: np.ndarray, s: QueueTrainSettings) -> list[float]:
    """The mean cost of each load stratum (windows ``b, b + strata, ...``), lightest first."""
    return [round(float(np.mean(costs[b::s.strata])), 4) for b in range(min(s.strata, len(costs)))]


def train_order(train_pods: PodTable, cluster: NodeCluster, node_policy, cem: CEMSettings, s: QueueTrainSettings,
                log: Callable[[str], None] | None = None, node_start: np.ndarray | None = None,
                domains: Sequence[Domain] | None = None) -> tuple[np.ndarray, list[dict[str, float]], dict[str, Any]]:
    """CEM from the all-zero weights: ``(theta, history, metrics)``.  Without ``joint``,
    ``node_policy`` is fitted already (eft, or cem's node scorer) and keeps its node choice, only
    the order is learned (layout ``FEATURES``); with ``joint`` the node choice is learned too
    (``node_policy`` unused; layout ``JOINT_FEATURES``, all zeros = eft).  ``node_start``: the
    joint search's start for the node weights (e.g. ``cem``'s trained ones; default 0, eft's
    choice); with ``node_search: fade`` they stay there and only the order and the fade move.
    With a nonzero start the all-zero vector (eft) is a candidate of the pick as well, so the
    pick falls back to eft when nothing scores better on the selection windows.  ``domains``:
    every window (training, selection and check) on one of these node samples instead of
    ``train_pods`` on ``cluster`` (joint only: a fixed node policy is fitted on one split)."""
    if domains and not s.joint:
        raise HybridschedError("queue training: domains (node samples) need joint = True, the node policy "
                               "fitted per sample")
    eft = EarliestFinishTime()
    eft.fit(train_pods)
    names = JOINT_FEATURES if s.joint else FEATURES
    theta0 = np.zeros(len(names))
    free = np.arange(len(names))
    if s.joint:
        nodes = slice(len(FEATURES), len(FEATURES) + len(NODE_KEYS))
        if node_start is not None:
            theta0[nodes] = np.asarray(node_start, dtype=np.float64)
        if s.node_search == "fade":
            free = np.array([*range(len(FEATURES)), len(names) - 1])

    def full(sub: np.ndarray) -> np.ndarray:
        theta = theta0.copy()
        theta[free] = sub
        if s.joint and s.min_fade is not None:
            theta[-1] = max(theta[-1], s.min_fade)  # a sample below the floor runs (and is recorded) at it
        return theta

    means: list[np.ndarray] = []

    def objective(thetas: np.ndarray, generation: int) -> np.ndarray:
        means.append(full(thetas[0]))
        scen = draw_scenarios(train_pods, cluster, eft, s, s.windows, cem.seed * 7919 + generation, domains)
        costs = np.array([queue_cost(full(th), scen, cluster, node_policy, s.backfill, train_pods) for th in thetas])
        if log:
            log(f"generation {generation}: best {costs.min():.4f}, mean member {costs.mean():.4f}")
        return costs

    result = train(objective, theta0[free], cem)
    candidates = [*means, full(result.theta)]
    if np.any(theta0):
        candidates.append(np.zeros(len(names)))  # eft itself (the last candidate: ties go to a generation)
    settings = asdict(s)
    if s.calibrate != "wait_curve":
        settings.pop("wait_curve")  # the other calibrations' records stay as they were
    metrics: dict[str, Any] = {"settings": {**cem.to_dict(), **settings}, "wall_s": result.wall_s,
                               "first_mean_cost": result.history[0]["mean_cost"],
                               "last_mean_cost": result.history[-1]["mean_cost"]}
    theta = candidates[-1]
    if s.eval_windows:
        select, check = eval_scenarios(train_pods, cluster, eft, s, cem.seed, domains)
        per = [window_costs(th, select, cluster, node_policy, s.backfill, train_pods) for th in candidates]
        costs = [select_cost(c, s) for c in per]
        pick = int(np.argmin(costs))  # ties: the earlier generation
        theta = candidates[pick]
        check_costs = window_costs(theta, check, cluster, node_policy, s.backfill, train_pods)
        metrics.update({"selected_generation": pick, "selection_cost": costs[pick],
                        "selection_cost_start": costs[0], "selection_cost_eft": costs[-1] if np.any(theta0) else costs[0],
                        "selection_costs": [round(c, 4) for c in costs], "selection_mean_cost": float(np.mean(per[pick])),
                        "check_cost": float(np.mean(check_costs)), "check_select_cost": select_cost(check_costs, s),
                        "check_loads": [round(sc.load, 4) for sc in check],
                        "check_rates": [round(sc.rate, 4) for sc in check],
                        "check_window_costs": [round(float(c), 4) for c in check_costs]})
        if s.strata:
            metrics.update({"selection_strata": stratum_costs(per[pick], s), "check_strata": stratum_costs(check_costs, s)})
        if domains:  # which node sample (index into domains) each check window is on
            metrics["check_domains"] = [next(i for i, d in enumerate(domains) if d.cluster is sc.cluster) for sc in check]
    metrics["weights"] = {f: round(float(v), 6) for f, v in zip(names, theta, strict=True)}
    return np.array([metrics["weights"][f] for f in names]), result.history, metrics


def cem_node_weights(cem_spec: dict[str, Any], train_pods: PodTable) -> np.ndarray:
    """The ``cem`` policy's trained node weights (layout ``cem.NODE_FEATURES``), from its config
    node (``policies.cluster.cem``: its ``model_dir``): the joint search's ``node_start: cem``."""
    from hybridsched.kinds.base import instantiate

    pol = instantiate(cem_spec)
    pol.fit(train_pods)
    return pol.theta[:len(NODE_KEYS)].copy()


def train_queue_model(train_pods: PodTable, cluster: NodeCluster, node_policy, cem: CEMSettings,
                      s: QueueTrainSettings, *, node_policy_name: str = "learned", node_start_name: str | None = None,
                      node_start: np.ndarray | None = None, domains: Sequence[Domain] | None = None,
                      log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """:func:`train_order` and its record, the document of a learned order's file
    (``learned_queue``'s model.json, the study's ``learned_order.json``): ``node_policy``
    (``node_policy_name``), ``node_start`` (``node_start_name``, joint only), ``backfill``,
    ``weights``, ``train`` (the metrics) and ``history`` (one row per generation).  Wall times
    are left out, so the document is identical on rerun."""
    _, history, metrics = train_order(train_pods, cluster, node_policy, cem, s, log=log, node_start=node_start,
                                      domains=domains)
    metrics.pop("wall_s", None)
    return {"node_policy": node_policy_name, "node_start": node_start_name if s.joint else None,
            "backfill": s.backfill, "weights": metrics["weights"], "train": metrics,
            "history": [{k: v for k, v in h.items() if k != "wall_s"} for h in history]}


def start_vector(node_start: np.ndarray, fade: float) -> np.ndarray:
    """The joint vector (layout ``JOINT_FEATURES``) of the all-zero order (``sjf``), the node
    weights ``node_start`` and the backlog ``fade``: :func:`train_order`'s start with that fade."""
    theta = np.zeros(len(JOINT_FEATURES))
    theta[len(FEATURES):len(FEATURES) + len(NODE_KEYS)] = np.asarray(node_start, dtype=np.float64)
    theta[-1] = fade
    return theta


def score_candidate(theta: np.ndarray, select: list[Scenario], check: list[Scenario], cluster: NodeCluster,
                    s: QueueTrainSettings, train_pods: PodTable) -> dict[str, Any]:
    """One joint vector's costs on the selection and the check windows: per stratum, the
    selection rule's cost (``select_cost``) and the mean, as :func:`train_order`'s pick and check."""
    sel = window_costs(theta, select, cluster, None, s.backfill, train_pods)
    chk = window_costs(theta, check, cluster, None, s.backfill, train_pods)
    return {"selection_strata": stratum_costs(sel, s), "selection_cost": select_cost(sel, s),
            "selection_mean": float(np.mean(sel)), "check_strata": stratum_costs(chk, s),
            "check_cost": select_cost(chk, s), "check_mean": float(np.mean(chk)),
            "check_window_costs": [round(float(c), 4) for c in chk]}


def fade_scan(train_pods: PodTable, cluster: NodeCluster, node_start: np.ndarray, fades: tuple[float, ...],
              s: QueueTrainSettings, seed: int = 0) -> tuple[np.ndarray, list[dict[str, Any]], dict[str, Any]]:
    """No training: :func:`start_vector` with each of ``fades``, and ``eft`` itself (all zeros,
    the last candidate: ties go to a fade), scored on :func:`train_order`'s selection and check
    windows of ``seed``; the pick is the lowest selection cost (with ``select: worst``, the worst
    stratum's), as :func:`train_order`'s.  ``(theta, rows, metrics)``: the pick, one row per
    candidate, and the record for ``learned_order.json``.  The test split is never read."""
    if not s.eval_windows:
        raise HybridschedError("fade scan: eval_windows must be at least 1 (the pick needs selection windows)")
    eft = EarliestFinishTime()
    eft.fit(train_pods)
    select, check = eval_scenarios(train_pods, cluster, eft, s, seed)
    # rounded as learned_order.json records weights, so the file's vector is the one scored here
    cands = [(f"fade {f:g}", float(f), np.round(start_vector(node_start, f), 6)) for f in fades]
    cands.append(("eft", None, np.zeros(len(JOINT_FEATURES))))
    rows = [{"candidate": name, "fade": fade, **score_candidate(th, select, check, cluster, s, train_pods)}
            for name, fade, th in cands]
    pick = int(np.argmin([r["selection_cost"] for r in rows]))  # ties: the earlier candidate
    settings = asdict(s)
    if s.calibrate != "wait_curve":
        settings.pop("wait_curve")
    metrics: dict[str, Any] = {
        "settings": {**settings, "seed": seed, "fades": [float(f) for f in fades]},
        "selected_candidate": rows[pick]["candidate"], "selection_cost": rows[pick]["selection_cost"],
        "selection_strata": rows[pick]["selection_strata"], "check_strata": rows[pick]["check_strata"],
        "check_select_cost": rows[pick]["check_cost"], "check_cost": rows[pick]["check_mean"],
        "check_loads": [round(sc.load, 4) for sc in check], "check_rates": [round(sc.rate, 4) for sc in check],
        "scan": rows}
    theta = cands[pick][2]
    metrics["weights"] = {f: float(v) for f, v in zip(JOINT_FEATURES, theta, strict=True)}
    return theta, rows, metrics
