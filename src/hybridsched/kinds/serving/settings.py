"""The serving machine: models and their memory-token costs, lanes, capacity, batching limits.

Read from the ``serving`` block of conf/kinds/serving.yaml.  A *variant* is one
(model, backend, precision); a *group* is a variant in one SLO class: only requests of one
group may share a micro-batch.

:func:`settings_of` reads them from a run's config, :func:`predictor.pred_table` the scheduler's latency
model; the stages and the real-serving run (``real.py``) both use these, so they live here,
below both.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from hybridsched.errors import HybridschedError, check_known_keys
from hybridsched.kinds.base import Run

# serving.contention values (engine.CONTENTION, in the engine's mode order)
CONTENTION = ("served", "alone", "start", "overlap")
# blocks of the ``serving`` config that are not machine settings
SUB_BLOCKS = ("profile", "predictor", "dqn", "tune", "real", "load_sweep")


@dataclass(frozen=True)
class ServingSettings:
    """Lanes, token memory and micro-batching of one serving machine (units: ms in the config,
    seconds inside)."""

    models: dict[str, float] = field(default_factory=lambda: {"resnet18": 80.0, "resnet50": 160.0, "vit_b16": 260.0})
    backends: tuple[str, ...] = ("torch", "onnx")
    precisions: tuple[str, ...] = ("fp32",)
    classes: tuple[str, ...] = ("interactive", "batch")
    lanes: int = 2
    token_capacity: float = 1000.0
    tokens_per_sample: float = 4.0
    fp16_token_factor: float = 0.7
    window_ms: float = 10.0
    max_batch: int = 128
    latency_table: str = "measured"  # measured | clockwork_v100 | a csv path
    profile_path: str = "data/cluster_profile.json"
    service_sigma: float = 0.05  # lognormal sigma of actual / table service time (``sigma_source`` fixed, or no measured one)
    # profile: each variant's sigma measured by the profile as served (latency.with_variant_sigma);
    # fixed: ``service_sigma`` for every variant
    sigma_source: str = "profile"
    # per variant index, filled from the profile by latency.with_variant_sigma (not a config key);
    # empty: ``service_sigma`` for every variant
    variant_sigma: tuple[float, ...] = ()
    # how a batch's time depends on the other lanes (docs/serving.md "Contention model"):
    # overlap (processor sharing between the single-lane and the served rows) | start (single-lane
    # if the other lanes are idle when it starts, else served) | served | alone
    contention: str = "overlap"
    # the single-lane table lat[v, b] in seconds and the lanes the served rows were timed with,
    # filled from the profile by latency.with_contention (not config keys); None: the table has
    # no single-lane rows, every model takes the served table
    alone_lat: np.ndarray | None = field(default=None, compare=False, repr=False)
    served_lanes: int = 1
    busy_w: float = 30.0  # per lane, serving a batch (the `cluster` group's CPU numbers by default)
    idle_w: float = 10.0  # per lane, idle
    price_per_kwh: float = 0.15
    seed: int = 0

    def __post_init__(self) -> None:
        checks = {"lanes": self.lanes >= 1, "token_capacity": self.token_capacity > 0,
                  "tokens_per_sample": self.tokens_per_sample >= 0, "fp16_token_factor": self.fp16_token_factor > 0,
                  "window_ms": self.window_ms >= 0, "max_batch": self.max_batch >= 1,
                  "service_sigma": self.service_sigma >= 0, "models": len(self.models) > 0,
                  "backends": len(self.backends) > 0, "precisions": len(self.precisions) > 0,
                  "classes": len(self.classes) > 0}
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise HybridschedError(f"serving.{bad[0]}: invalid value {getattr(self, bad[0])!r}")
        for m, c in self.models.items():
            if not float(c) > 0:
                raise HybridschedError(f"serving.models.{m}: token cost must be > 0, got {float(c)}")
        if self.contention not in CONTENTION:
            raise HybridschedError(f"serving.contention: {self.contention!r} is not one of {sorted(CONTENTION)}")
        if self.sigma_source not in ("profile", "fixed"):
            raise HybridschedError(f"serving.sigma_source: {self.sigma_source!r} is not one of ['fixed', 'profile']")
        if self.variant_sigma and (len(self.variant_sigma) != self.n_variants or min(self.variant_sigma) < 0):
            raise HybridschedError(f"serving variant_sigma: need {self.n_variants} values >= 0, got {self.variant_sigma}")
        unknown = [p for p in self.precisions if p not in ("fp32", "fp16")]
        if unknown:
            raise HybridschedError(f"serving.precisions: unknown precision {unknown[0]!r}; known: ['fp16', 'fp32']")
        # a model whose smallest batch cannot fit would never run
        for v in range(self.n_variants):
            tok = float(self.tokens(np.array([v]), np.array([1]))[0])
            if tok > self.token_capacity:
                m, b, p = self.variant_names(v)
                raise HybridschedError(f"serving.token_capacity: {self.token_capacity:g} is below the {tok:g} tokens "
                                       f"of one sample of {m}/{b}/{p} (its smallest batch)")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServingSettings:
        """From the ``serving`` config block; an unknown key is an error naming it."""
        check_known_keys(d, {f.name for f in fields(cls)} - {"variant_sigma", "alone_lat", "served_lanes"}, "serving")
        kw = {k: (tuple(v) if k in ("backends", "precisions", "classes") else v) for k, v in d.items()}
        if "models" in kw:
            kw["models"] = {str(k): float(v) for k, v in kw["models"].items()}
        return cls(**kw)

    # ---- indices --------------------------------------------------------------------------
    @property
    def model_names(self) -> list[str]:
        return list(self.models)

    @property
    def n_variants(self) -> int:
        return len(self.models) * len(self.backends) * len(self.precisions)

    @property
    def n_groups(self) -> int:
        return self.n_variants * len(self.classes)

    @property
    def window_s(self) -> float:
        return self.window_ms / 1000.0

    def variant(self, model: np.ndarray, backend: np.ndarray, precision: np.ndarray) -> np.ndarray:
        """Variant index of (model, backend, precision) indices."""
        return (np.asarray(model) * len(self.backends) + np.asarray(backend)) * len(self.precisions) + np.asarray(precision)

    def variant_names(self, v: int) -> tuple[str, str, str]:
        """(model, backend, precision) names of variant ``v``."""
        p = v % len(self.precisions)
        b = (v // len(self.precisions)) % len(self.backends)
        m = v // (len(self.precisions) * len(self.backends))
        return self.model_names[m], self.backends[b], self.precisions[p]

    def sigmas(self) -> np.ndarray:
        """The lognormal service-noise sigma of every variant (``variant_sigma`` where set)."""
        if self.variant_sigma:
            return np.asarray(self.variant_sigma, float)
        return np.full(self.n_variants, float(self.service_sigma))

    def fastest(self, lat: np.ndarray) -> np.ndarray:
        """The least table time any batch can take under the contention model (before noise):
        ``lat`` (the served rows) with ``contention: served``, else the elementwise minimum of
        the served and single-lane rows (processor sharing runs between the two). Non-decreasing
        in the batch size where both are. What the bounds charge (bounds.py)."""
        if self.contention == "served" or self.alone_lat is None:
            return lat
        w = min(lat.shape[1], self.alone_lat.shape[1])
        out = lat.copy()
        out[:, :w] = np.fmin(lat[:, :w], self.alone_lat[:, :w])
        return out

    def group(self, variant: np.ndarray, cls: np.ndarray) -> np.ndarray:
        """Group index (compatible requests) of a variant and an SLO class index."""
        return np.asarray(variant) * len(self.classes) + np.asarray(cls)

    def token_table(self) -> np.ndarray:
        """tokens[v, b] a batch of b samples of variant v holds while it runs (b = 0..max_batch)."""
        v = np.repeat(np.arange(self.n_variants), self.max_batch + 1)
        b = np.tile(np.arange(self.max_batch + 1), self.n_variants)
        return self.tokens(v, b).reshape(self.n_variants, self.max_batch + 1)

    def tokens(self, variant: np.ndarray, batch: np.ndarray) -> np.ndarray:
        """(model cost + tokens_per_sample * batch) * (fp16 factor for fp16 variants)."""
        variant = np.asarray(variant)
        cost = np.array(list(self.models.values()))[variant // (len(self.backends) * len(self.precisions))]
        fp16 = np.array([p == "fp16" for p in self.precisions])[variant % len(self.precisions)]
        return (cost + self.tokens_per_sample * np.asarray(batch)) * np.where(fp16, self.fp16_token_factor, 1.0)


def settings_of(run: Run) -> ServingSettings:
    """The machine settings of the ``serving`` block."""
    return ServingSettings.from_dict({k: v for k, v in run.cfg["serving"].items() if k not in SUB_BLOCKS})


def config_block(run: Run, name: str) -> dict[str, Any]:
    """The ``serving.<name>`` sub-block of the config ({} where absent)."""
    return dict(run.cfg["serving"].get(name) or {})
