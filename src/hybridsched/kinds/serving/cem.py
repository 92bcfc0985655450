"""The serving kind's learned dispatcher ``cem``: one score per candidate batch, searched by the
cross-entropy method (:mod:`hybridsched.rl.cem`) on a mixture of loads, arrival processes,
request sizes and SLO factors.

**Score** of an eligible group's candidate batch (engine.py's features, all scale-free, so
one model serves any latency table and rate)::

    C * interactive - (head deadline - now) / tau + sum_i theta_i phi_i

with ``tau`` the mix's mean predicted batch-1 latency, ``C = 10 ** (6 (1 + theta_class))``
and phi = (slack / SLO, doomed, wait / SLO, log batching gain, log of requests per predicted
second relative to the mean over the candidates, predicted service / SLO, log requests).
With ``drop`` the engine's predictive admission runs with the predicted service time times
``drop_factor = exp(theta_drop)``.  **theta = 0 is the ``predictive`` heuristic exactly**
(EDF by class then deadline, drop what the predictor says cannot meet its SLO), so the search
starts from it, like the machine kind's ``cem`` starts from eft_rank.

**Training** (``train_scorer``): each generation draws ``scenarios`` synthetic streams
(Poisson or Gamma arrivals, load, request size, SLO factors, or the workload's ms budgets
scaled, from the ``cem.serving`` ranges)
from a stream seeded by ``cem.seed`` and the generation; a member's cost is the mean over the
draws of ``1 - attainment`` relative to predictive's on the same draw (drops count as
violations).  **Held-out streams** (:func:`heldout_streams`) are never drawn in training:
two Poisson seeds of the workload, the bursty process (Gamma, CV 3) and the Azure LLM replay
at two loads.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from hybridsched.errors import HybridschedError, ModelFileError, check_known_keys
from hybridsched.kinds.serving import engine as E
from hybridsched.kinds.serving.policies import ServingPolicy

FORMAT = "hybridsched-serving-cem/1"
N_PHI = 7
N_THETA = 2 + N_PHI  # theta_class, theta_drop, then the feature weights
HELDOUT_SEED = 9_000  # held-out streams' seeds start here; training seeds never reach it
_TRAIN_STREAM, _SELECT_STREAM = 1, 2


@njit(cache=True)
def cem_choose(t, gs, elig, n_elig, pdata, params):
    """The eligible group whose candidate batch scores highest (module docstring);
    pdata = (C, tau, theta_1..theta_7)."""
    C = pdata[0]
    tau = pdata[1]
    mean_dens = 0.0
    for k in range(n_elig):
        g = elig[k]
        mean_dens += np.log(max(gs[g, E.NREQ], 1.0) / max(gs[g, E.PRED_S], 1e-9))
    mean_dens /= n_elig
    best = elig[0]
    best_score = -np.inf
    for k in range(n_elig):
        g = elig[k]
        slo = max(gs[g, E.SLO], 1e-9)
        phi0 = min(max(gs[g, E.NORM_SLACK], -4.0), 4.0)
        phi1 = gs[g, E.DOOMED]
        phi2 = min(gs[g, E.WAIT_NORM], 4.0)
        phi3 = np.log(max(gs[g, E.GAIN], 1e-9))
        phi4 = np.log(max(gs[g, E.NREQ], 1.0) / max(gs[g, E.PRED_S], 1e-9)) - mean_dens
        phi5 = min(gs[g, E.PRED_S] / slo, 4.0)
        phi6 = np.log(max(gs[g, E.NREQ], 1.0))
        s = C * gs[g, E.INTERACTIVE] - (gs[g, E.HEAD_DEADLINE] - t) / tau
        s += (pdata[2] * phi0 + pdata[3] * phi1 + pdata[4] * phi2 + pdata[5] * phi3 + pdata[6] * phi4
              + pdata[7] * phi5 + pdata[8] * phi6)
        if s > best_score:
            best_score = s
            best = g
    return best


class CandidateScorer(ServingPolicy):
    """The learned per-candidate scorer (``theta``, or what train_cem wrote to ``model_dir``)."""

    name = "cem"
    role, trained_by = "learned", "train_cem"  # kinds.base.declaration
    kernel = cem_choose

    def __init__(self, model_dir: str = "models/cem", theta: Any = None, drop: bool = True) -> None:
        super().__init__(0.0)
        self.model_dir = model_dir
        self.theta = None if theta is None else np.asarray(theta, dtype=np.float64)
        self.drop = bool(drop)
        if self.theta is not None and self.theta.shape != (N_THETA,):
            raise HybridschedError(f"policy cem: theta has {self.theta.size} values, needs {N_THETA}")

    @staticmethod
    def n_params() -> int:
        return N_THETA

    def _theta(self, settings) -> np.ndarray:
        if self.theta is None:
            self.theta = load(self.model_dir)
        return self.theta

    @property
    def drop_factor(self) -> float:
        return float(np.exp(np.clip(self.theta[1], -3, 3))) if self.theta is not None else 1.0

    def kernel_data(self, settings, pred_lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        th = self._theta(settings)
        b1 = pred_lat[:, 1]
        tau = float(np.mean(b1[np.isfinite(b1)])) if np.isfinite(b1).any() else 1.0
        C = 10.0 ** (6.0 * (1.0 + float(np.clip(th[0], -2, 1))))
        return np.r_[C, tau, th[2:]].astype(np.float64), np.zeros(1)


def load(model_dir: str | Path) -> np.ndarray:
    """theta saved by train_cem; a missing or mismatched file is a ModelFileError."""
    path = Path(model_dir) / "theta.json"
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise ModelFileError(f"{path}: not found (run the train_cem stage with workload=serving)") from None
    except (OSError, ValueError) as e:
        raise ModelFileError(f"{path}: unreadable ({type(e).__name__})") from None
    if meta.get("format") != FORMAT or len(meta.get("theta", [])) != N_THETA:
        raise ModelFileError(f"{path}: format {meta.get('format')!r} with {len(meta.get('theta', []))} weights; "
                             f"needs {FORMAT} with {N_THETA} (rerun train_cem)")
    return np.asarray(meta["theta"], dtype=np.float64)


@dataclass(frozen=True)
class ServingCEMSettings:
    """The ``cem.serving`` block: the training mixture (ranges ``[lo, hi]``, drawn uniformly)."""

    scenarios: int = 6
    requests: int = 1500
    load: tuple[float, float] = (0.6, 1.8)
    bursty_share: float = 0.5                 # share of draws with Gamma inter-arrivals
    cv: tuple[float, float] = (1.5, 4.0)
    request_size: tuple[int, int] = (1, 4)    # samples per request (whole numbers, uniform)
    interactive_factor: tuple[float, float] = (3.0, 10.0)
    batch_factor: tuple[float, float] = (20.0, 80.0)
    slo_scale: tuple[float, float] = (0.5, 2.0)    # absolute_ms SLOs: the workload's x this
    select_from: int = 8                      # >0: the model is the cheapest of the search's last N means ...
    selection_scenarios: int = 8              # ... on draws of a separate stream (never training or held-out)
    heldout_requests: int = 3000
    heldout_loads: tuple[float, ...] = (1.1, 1.5)   # the Azure replay's two loads
    heldout_trace: str = "../shared/traces/azure-llm-2023/AzureLLMInferenceTrace_code.csv"

    def __post_init__(self) -> None:
        ok = (self.scenarios >= 1 and self.select_from >= 0 and self.selection_scenarios >= 1 and self.requests >= 10 and 0 < self.load[0] <= self.load[1]
              and 0 <= self.bursty_share <= 1 and 0 < self.cv[0] <= self.cv[1]
              and 1 <= self.request_size[0] <= self.request_size[1] and self.heldout_requests >= 10
              and 0 < self.interactive_factor[0] <= self.interactive_factor[1]
              and 0 < self.batch_factor[0] <= self.batch_factor[1] and 0 < self.slo_scale[0] <= self.slo_scale[1] and len(self.heldout_loads) >= 1)
        if not ok:
            raise HybridschedError(f"cem.serving: a value is out of range: {self.to_dict()}")

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> ServingCEMSettings:
        d = dict(d or {})
        check_known_keys(d, {f.name for f in fields(cls)}, "cem.serving")
        return cls(**{k: tuple(v) if isinstance(v, list | tuple) else v for k, v in d.items()})

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def draw_workload(rng: np.random.Generator, base: dict[str, Any], cs: ServingCEMSettings) -> dict[str, Any]:
    """One training workload: the configured mix with a drawn process, load, size and SLOs."""
    w = {k: v for k, v in base.items() if k not in ("test", "rate")}
    w.update(rate=None, load=float(rng.uniform(*cs.load)),
             request_size=int(rng.integers(cs.request_size[0], cs.request_size[1] + 1)))
    slo = dict(base.get("slo") or {})
    if slo.get("rule", "absolute_ms") == "factor":
        w["slo"] = {"rule": "factor", "interactive": float(rng.uniform(*cs.interactive_factor)),
                    "batch": float(rng.uniform(*cs.batch_factor))}
    else:  # budgets in ms (GPU tables): the workload's, each scaled by a drawn factor
        w["slo"] = {k: (v if k == "rule" else float(v) * float(rng.uniform(*cs.slo_scale))) for k, v in slo.items()}
    if rng.uniform() < cs.bursty_share:
        w.update(arrival="gamma", cv=float(rng.uniform(*cs.cv)))
    else:
        w["arrival"] = "poisson"
    return w


def _reqs(w: dict[str, Any], settings, lat: np.ndarray, n: int, seed: int, part: int = 0):
    from hybridsched.kinds.serving.workload import generate_stream, to_requests

    return to_requests(generate_stream(w, settings, n, seed, part, lat), settings, w.get("name", "stream"))


def attainment(reqs, settings, lat: np.ndarray, pred: np.ndarray, policy, noise_seed: int) -> float:
    """SLO attainment (drops are violations) from the engine's arrays, without the DataFrame."""
    raw = E.run_arrays(reqs, settings, lat, policy, pred, noise_seed)
    served = raw.r_batch >= 0
    end = np.where(served, raw.b["end"][np.where(served, raw.r_batch, 0)], np.inf)
    return float(np.mean(served & (end <= reqs.deadline + 1e-12)))


def _costs(thetas: np.ndarray, draws, settings, lat: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Per row: 1 + mean over the draws of (predictive's attainment - the member's), so the
    predictive heuristic (theta = 0) costs exactly 1 and every draw weighs the same."""
    cost = np.ones(len(thetas))
    for reqs, ns in draws:
        ref = attainment(reqs, settings, lat, pred, CandidateScorer(theta=np.zeros(N_THETA)), ns)
        for r, th in enumerate(thetas):
            cost[r] += (ref - attainment(reqs, settings, lat, pred, CandidateScorer(theta=th), ns)) / len(draws)
    return cost


def _draws(seed: int, stream: int, index: int, base: dict[str, Any], settings, lat: np.ndarray,
           cs: ServingCEMSettings, n: int):
    """``n`` training streams (with a noise seed each) from ``(seed, stream, index)``."""
    rng = np.random.default_rng([seed, stream, index])
    out = []
    for _ in range(n):
        w = draw_workload(rng, base, cs)
        out.append((_reqs(w, settings, lat, cs.requests, int(rng.integers(0, HELDOUT_SEED))),
                    int(rng.integers(0, 2**31))))
    return out


def train_scorer(base_workload: dict[str, Any], settings, lat: np.ndarray, pred: np.ndarray, search,
                 cs: ServingCEMSettings):
    """Run the search from theta = 0 (predictive), then pick the cheapest of the last
    ``select_from`` means on draws of a separate selection stream; returns (CEMResult with the
    chosen theta, selection record)."""
    from dataclasses import replace

    from hybridsched.rl.cem import train

    if int(search.seed) >= HELDOUT_SEED:
        raise HybridschedError(f"cem.seed: {search.seed} reaches the held-out streams' seeds (>= {HELDOUT_SEED})")

    def objective(thetas: np.ndarray, gen: int) -> np.ndarray:
        draws = _draws(int(search.seed), _TRAIN_STREAM, gen, base_workload, settings, lat, cs, cs.scenarios)
        return _costs(thetas, draws, settings, lat, pred)

    result = train(objective, np.zeros(N_THETA), search)
    cands = result.means[-min(cs.select_from, len(result.means)):] if cs.select_from else [result.theta]
    draws = _draws(int(search.seed), _SELECT_STREAM, 0, base_workload, settings, lat, cs, cs.selection_scenarios)
    costs = _costs(np.stack(cands), draws, settings, lat, pred)
    k = int(np.argmin(costs))
    selection = {"selected_generation": len(result.means) - len(cands) + k,
                 "selection_costs": costs.round(6).tolist()}
    return replace(result, theta=cands[k]), selection


def heldout_streams(base_workload: dict[str, Any], azure_trace: str, cs: ServingCEMSettings) -> dict[str, dict[str, Any]]:
    """The five held-out workloads: two Poisson seeds, the bursty process, the Azure replay at two loads."""
    w = {k: v for k, v in base_workload.items() if k != "test"}
    out = {f"poisson_seed{HELDOUT_SEED + i}": {**w, "arrival": "poisson", "seed": HELDOUT_SEED + i} for i in (0, 1)}
    out["bursty_cv3"] = {**w, "arrival": "gamma", "cv": 3.0, "seed": HELDOUT_SEED + 2}
    for load in cs.heldout_loads:
        out[f"azure_load{load:g}"] = {**w, "arrival": "replay", "trace_path": azure_trace, "time_column": "TIMESTAMP",
                                      "size_column": "ContextTokens", "rate": None, "load": float(load),
                                      "seed": HELDOUT_SEED + 3, "n_train": 0}
    return out


def heldout_table(theta: np.ndarray, base_workload: dict[str, Any], azure_trace: str, settings, lat: np.ndarray,
                  pred: np.ndarray, cs: ServingCEMSettings) -> list[dict[str, Any]]:
    """Per held-out stream: cem's and predictive's SLO attainment (drops as violations)."""
    from hybridsched.kinds.serving.policies import Predictive

    rows = []
    for name, w in heldout_streams(base_workload, azure_trace, cs).items():
        w = {**w, "rate": None if w.get("load") is not None else w.get("rate")}
        reqs = _reqs(w, settings, lat, cs.heldout_requests, int(w["seed"]), 0)
        cem = attainment(reqs, settings, lat, pred, CandidateScorer(theta=theta), int(w["seed"]))
        ref = attainment(reqs, settings, lat, pred, Predictive(), int(w["seed"]))
        rows.append({"stream": name, "load": w.get("load"), "cem": round(cem, 4), "predictive": round(ref, 4),
                     "cem_wins_or_ties": bool(cem >= ref - 1e-12)})
    return rows
