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
        """The policies this run simulates: ``policy`` if set, else the kind's ``sim.policies``.
        Unknown names raise one line listing the kind's policies."""
        from hybridsched.errors import HybridschedError

        known = self.cfg.get("policies", {}).get(self.kind, {}) or {}
        if self.policy is not None:
            names, setting = [self.policy], "policy"
        else:
            names, setting = list((self.cfg["sim"].get("policies") or {}).get(self.kind) or []), f"sim.policies.{self.kind}"
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

    def track(self, stage: str, metrics: dict, artifacts: Sequence[Path | str] = (), model: Any = None) -> None:
        """Log this stage run to MLflow (no-op when tracking is off)."""
        from hybridsched.tracking import log_run

        t = self.cfg.get("tracking", {})
        log_run(stage, self.cfg, metrics, artifacts, model, experiment=t.get("experiment", "hybridsched"),
                enabled=bool(self.tracking and t.get("enabled", False)))


def instantiate(spec: dict[str, Any], **extra: Any) -> Any:
    """Build the object a config node describes (``_target_`` plus keyword arguments), without
    Hydra: the library must stay importable and testable on its own."""
    import importlib

    from hybridsched.errors import HybridschedError

    spec = dict(spec)
    target = spec.pop("_target_", None)
    if not target:
        raise HybridschedError(f"config node has no _target_: {sorted(spec)}")
    module, _, name = str(target).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise HybridschedError(f"_target_ {target!r} cannot be imported ({e})") from None
    return cls(**{**spec, **extra})
