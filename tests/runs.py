"""Build the :class:`~hybridsched.kinds.base.Run` a stage function gets, as the stage scripts do."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from hybridsched.kinds.base import Run

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def compose_run(*overrides: str, in_memory: bool = False, policy: str | None = None) -> Run:
    """conf/ composed with ``overrides`` (MLflow tracking off) as a plain Run."""
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=["tracking.enabled=false", *overrides])
    return Run(cfg=OmegaConf.to_container(cfg, resolve=True), in_memory=in_memory, policy=policy)
