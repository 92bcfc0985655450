"""What every stage shares: config to plain dicts, and bad input as a one-line error."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hybridsched.errors import HybridschedError


def as_dict(node: Any) -> Any:
    """A plain, resolved Python container for the library (which knows nothing of Hydra)."""
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def run_stage(fn: Callable[[DictConfig], Any], cfg: DictConfig) -> Any:
    """Call ``fn(cfg)``; bad input ends the process with ``error: ...`` and exit code 1."""
    try:
        return fn(cfg)
    except HybridschedError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)


def track(stage: str, cfg: DictConfig, metrics: dict, artifacts=(), model=None) -> None:
    """Log this stage run to MLflow with the whole composed config as params."""
    from hybridsched.tracking import log_run

    log_run(stage, as_dict(cfg), metrics, artifacts, model,
            experiment=cfg.tracking.experiment, enabled=bool(cfg.tracking.enabled))
