"""Build the :class:`~hybridsched.kinds.base.Run` a stage function gets, as the stage scripts do."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from hybridsched.kinds.base import Run

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def outputs_in(tmp: Path) -> list[str]:
    """Overrides that move every output a stage writes (data, models, metrics) under ``tmp``,
    so a test that runs stages never writes into the workspace."""
    return [f"paths.workload_dir={tmp / 'data' / 'workload'}", f"paths.traces_dir={tmp / 'data' / 'traces'}",
            f"paths.metrics_dir={tmp / 'metrics'}", f"paths.best_params={tmp / 'models' / 'best_params.yaml'}",
            f"cluster.profile_path={tmp / 'data' / 'cluster_profile.json'}",
            *(f"{m}.model_dir={tmp / 'models' / m}" for m in ("rf", "dqn", "cem"))]


def compose_run(*overrides: str, in_memory: bool = False, policy: str | None = None) -> Run:
    """conf/ composed with ``overrides`` (MLflow tracking off) as a plain Run."""
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=["tracking.enabled=false", *overrides])
    return Run(cfg=OmegaConf.to_container(cfg, resolve=True), in_memory=in_memory, policy=policy)
