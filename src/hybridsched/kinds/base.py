"""The interface every workload kind implements, and the run context its stages receive.

A kind is a package ``hybridsched.kinds.<name>`` whose ``stages`` module defines one function
per DVC stage, each ``fn(run: Run) -> result``: a ``dict`` of metrics, or for ``simulate``
and ``evaluate`` a ``pandas.DataFrame`` with one row per policy (index ``policy``).  A stage
that does not apply to a kind still writes its declared outputs, saying why (DVC needs them).

The library knows nothing of Hydra: the stage scripts turn the composed config into a
:class:`Run` (plain, resolved dicts) and call the kind's function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# every kind defines these, with the signature ``fn(run: Run)``; ``check_config`` raises on
# a bad setting before anything runs (the DVC stage ``check``)
STAGES = ("check_config", "profile", "generate", "validate", "train_rf", "train_dqn", "train_cem", "tune", "simulate", "evaluate")


@dataclass
class Run:
    """What a stage function gets: the whole config, and how this run was started.

    ``cfg`` is the composed config as plain, resolved Python containers.  ``in_memory`` is
    true under a Hydra multirun, where the sweep may change the workload: stages then build
    their inputs from the config instead of reading the files of the last ``dvc repro``.
    ``policy`` names the one policy to simulate (``policy=NAME``), else None (all of the
    kind's ``sim.policies``).
    """

    cfg: dict[str, Any]
    in_memory: bool = False
    policy: str | None = None
    tracking: bool = field(default=True)

    @property
    def kind(self) -> str:
        return str(self.cfg["workload"]["kind"])

    def path(self, key: str) -> Path:
        """``paths.<key>`` as a Path."""
        return Path(self.cfg["paths"][key])

    @property
    def metrics_dir(self) -> Path:
        return self.path("metrics_dir")

    @property
    def workload_dir(self) -> Path:
        return self.path("workload_dir")

    @property
    def traces_dir(self) -> Path:
        return self.path("traces_dir")

    def policy_names(self) -> list[str]:
        """The policies this run simulates: ``policy`` if set, else the kind's ``sim.policies``
        (null: every policy of the kind, in the order of ``policies.<kind>``).  Unknown names
        raise one line listing the kind's policies."""
        from hybridsched.errors import HybridschedError

        known = self.cfg.get("policies", {}).get(self.kind, {}) or {}
        if self.policy is not None:
            names, setting = [self.policy], "policy"
        else:
            chosen = (self.cfg["sim"].get("policies") or {}).get(self.kind)
            names, setting = list(known) if chosen is None else list(chosen), f"sim.policies.{self.kind}"
        unknown = [n for n in names if n not in known]
        if unknown:
            raise HybridschedError(f"{setting}: unknown {self.kind} policy name(s) {unknown}; known: {sorted(known)}")
        if not names:
            raise HybridschedError(f"{setting}: no policies to simulate")
        return names

    def policy_specs(self) -> dict[str, dict[str, Any]]:
        """Name -> the policy's config (with ``_target_``) for :meth:`policy_names`."""
        known = self.cfg["policies"][self.kind]
        return {n: known[n] for n in self.policy_names()}

    def build_policies(self) -> dict[str, Any]:
        """Name -> a fresh policy object (``_target_`` of its config) for :meth:`policy_names`,
        each with its ``name`` set."""
        out = {}
        for name, spec in self.policy_specs().items():
            policy = instantiate(spec)
            policy.name = name
            out[name] = policy
        return out

    def track(self, stage: str, metrics: dict, artifacts: Sequence[Path | str] = (), model: Any = None,
              headline: dict | None = None) -> None:
        """Log this stage run to MLflow, nested under the pipeline run's parent, with
        ``headline`` (the evaluate stage's figures) on the parent (no-op when tracking is off)."""
        from hybridsched.tracking import log_run

        t = self.cfg.get("tracking", {})
        log_run(stage, self.cfg, metrics, artifacts, model, experiment=t.get("experiment", "hybridsched"),
                enabled=bool(self.tracking and t.get("enabled", False)), headline=headline)


TUNED_KEY = "tuned"  # a policy node's path to the tune_heuristics stage's values for it


def with_tuned(spec: Any) -> Any:
    """A policy config with the ``tune_heuristics`` stage's values over the YAML's defaults.

    Every node (nested ones too, e.g. an ordered policy's ``placement``) whose ``tuned`` names a
    file takes that file's ``params``; ``tuned: null`` keeps the YAML's (untuned) values.  A named
    file that does not exist is one line saying which stage writes it."""
    import yaml

    from hybridsched.errors import HybridschedError

    if isinstance(spec, list):
        return [with_tuned(v) for v in spec]
    if not isinstance(spec, dict):
        return spec
    out = {k: with_tuned(v) for k, v in spec.items() if k != TUNED_KEY}
    path = spec.get(TUNED_KEY)
    if path is None:
        return out
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise HybridschedError(f"{path}: no tuned weights (run `dvc repro tune_heuristics`, or set the policy's "
                               f"tuned=null for its untuned defaults)") from None
    except (OSError, yaml.YAMLError) as e:
        raise HybridschedError(f"{path}: cannot read the tuned weights ({str(e).splitlines()[0]})") from None
    params = doc.get("params") if isinstance(doc, dict) else None
    if not isinstance(params, dict):
        raise HybridschedError(f"{path}: expected a `params:` mapping of tuned values, got {doc!r}"[:300])
    defaults = class_defaults(out.get("_target_"))
    unknown = sorted(set(params) - set(out) - set(defaults))
    if unknown:
        raise HybridschedError(f"{path}: {unknown} are not settings of the policy; it has "
                               f"{sorted(k for k in {*out, *defaults} if k != '_target_')}")
    # the YAML holds the untuned defaults under a tuned file: another value was set by hand
    # (an override) and would be silently replaced, so it is refused instead
    by_hand = {k: out[k] for k, v in defaults.items() if k in params and out.get(k, v) != v}
    if by_hand:
        raise HybridschedError(f"{path}: its tuned values replace {by_hand}, which differ from the untuned defaults; "
                               f"to run the policy with values by hand, also set its tuned=null")
    return {**out, **params}


def class_defaults(target: Any) -> dict[str, Any]:
    """Keyword -> default of the ``_target_`` class's constructor ({} if it cannot be imported)."""
    import inspect

    from hybridsched.errors import HybridschedError

    try:
        cls = target_class({"_target_": target})
    except HybridschedError:
        return {}
    return {k: p.default for k, p in inspect.signature(cls).parameters.items() if p.default is not inspect.Parameter.empty}


def without_tuned(spec: Any) -> Any:
    """A policy config with every ``tuned`` key dropped: the YAML's own (untuned) values."""
    if isinstance(spec, list):
        return [without_tuned(v) for v in spec]
    if not isinstance(spec, dict):
        return spec
    return {k: without_tuned(v) for k, v in spec.items() if k != TUNED_KEY}


def target_class(spec: dict[str, Any]) -> type:
    """The class a config node's ``_target_`` names; one line when there is none or it cannot be imported."""
    import importlib

    from hybridsched.errors import HybridschedError

    target = spec.get("_target_")
    if not target:
        raise HybridschedError(f"config node has no _target_: {sorted(spec)}")
    module, _, name = str(target).rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise HybridschedError(f"_target_ {target!r} cannot be imported ({e})") from None


ROLES = ("baseline", "heuristic", "learned", "clairvoyant")


@dataclass(frozen=True)
class Declaration:
    """What a policy's class declares about it (class attributes, read without building it):
    ``role`` (one of :data:`ROLES`; ``heuristic`` unless declared), ``trained_by`` (the stage
    that writes a learned policy's model, else None) and ``dispatch`` (its dispatch mode:
    ``arrival`` unless declared)."""

    role: str
    trained_by: str | None
    dispatch: str


def declaration(spec: dict[str, Any]) -> Declaration:
    """The :class:`Declaration` of the class a policy config's ``_target_`` names."""
    cls = target_class(spec)
    return Declaration(role=str(getattr(cls, "role", "heuristic")), trained_by=getattr(cls, "trained_by", None),
                       dispatch=str(getattr(cls, "dispatch", "arrival")))


def instantiate(spec: dict[str, Any], **extra: Any) -> Any:
    """Build the object a config node describes (``_target_`` plus keyword arguments), without
    Hydra: the library must stay importable and testable on its own.  A node with ``tuned``
    takes the tuning stage's values first (:func:`with_tuned`)."""
    cls = target_class(spec)
    spec = with_tuned(spec)
    spec.pop("_target_")
    return cls(**{**spec, **extra})
