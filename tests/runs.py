"""Build the :class:`~hybridsched.kinds.base.Run` a stage function gets, as the stage scripts do."""

from __future__ import annotations

import functools
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from hybridsched.kinds.base import Run

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def untuned(tmp: Path) -> Path:
    """``tmp/models/tuned`` holding, for every policy with a search space (``tune.spaces``), a
    tuned file with no values (``params: {}``): each policy builds with its YAML's untuned
    values, as with the tune_heuristics stage off.  A test that runs that stage replaces them."""
    import yaml

    out = tmp / "models" / "tuned" / "machine"
    out.mkdir(parents=True, exist_ok=True)
    for name in yaml.safe_load((CONF / "tune" / "default.yaml").read_text())["spaces"]:
        if not (out / f"{name}.yaml").exists():
            (out / f"{name}.yaml").write_text("params: {}\n")
    return out.parent


def outputs_in(tmp: Path) -> list[str]:
    """Overrides that move every output a stage writes (data, models, metrics, the LP bound
    memo) under ``tmp``, so a test that runs stages never writes into the workspace; the
    heuristics there are untuned (:func:`untuned`)."""
    untuned(tmp)
    return [f"paths.workload_dir={tmp / 'data' / 'workload'}", f"paths.traces_dir={tmp / 'data' / 'traces'}",
            f"paths.bound_cache={tmp / 'cache' / 'bounds'}",
            f"paths.metrics_dir={tmp / 'metrics'}", f"paths.best_params={tmp / 'models' / 'best_params.yaml'}",
            f"cluster.profile_path={tmp / 'data' / 'cluster_profile.json'}", f"paths.tuned={tmp / 'models' / 'tuned'}",
            f"train_late.model_dir={tmp / 'models' / 'late'}",
            f"train_ppo.model_dir={tmp / 'models' / 'ppo_late'}",
            *(f"{m}.model_dir={tmp / 'models' / m}" for m in ("rf", "dqn", "cem"))]


@functools.cache
def _untuned_default() -> Path:
    """One untuned folder per test process (:func:`untuned`), removed at exit."""
    import atexit
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="hybridsched-untuned-"))
    atexit.register(shutil.rmtree, tmp, True)
    return untuned(tmp)


def untuned_override() -> str:
    """The override that points ``paths.tuned`` at this process's untuned folder (:func:`untuned`)."""
    return f"paths.tuned={_untuned_default()}"


def untuned_argv(argv: tuple[str, ...] | list[str]) -> list[str]:
    """A study's command line with :func:`untuned_override` among its Hydra overrides (after ``--``),
    so a study run by a test never reads the workspace's models/."""
    return [*argv, untuned_override()] if "--" in argv else [*argv, "--", untuned_override()]


def compose_run(*overrides: str, in_memory: bool = False, policy: str | None = None) -> Run:
    """conf/ composed with ``overrides`` (MLflow tracking off) as a plain Run; without a
    ``paths.tuned`` override the heuristics are untuned (never the workspace's models/)."""
    if not any(o.startswith("paths.tuned=") for o in overrides):
        overrides = (untuned_override(), *overrides)
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=["tracking.enabled=false", *overrides])
    return Run(cfg=OmegaConf.to_container(cfg, resolve=True), in_memory=in_memory, policy=policy)
