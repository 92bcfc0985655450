"""DVC stage: Optuna search of a learned policy's hyper-parameters (see hybridsched.kinds.machine.tuning).

Under Hydra multirun (e.g. `hparams_search=hybrid_ml_optuna`, Hydra's Optuna sweeper) each
job instead evaluates the one configuration it was given and returns the objective.
"""

from __future__ import annotations

from pathlib import Path

import hydra
import yaml
from omegaconf import DictConfig

from hybridsched.kinds.machine.devices import cluster_from_config
from hybridsched.io import write_json, write_text
from hybridsched.kinds.machine.tuning import TuneSettings, evaluate_config, run_study, split_validation
from hybridsched.kinds.machine.workload import read_tasks
from stages import alibaba
from stages.common import as_dict, multirun_dir, run_stage, track


def _inputs(cfg: DictConfig):
    cluster = cluster_from_config(as_dict(cfg.cluster))
    train = read_tasks(Path(cfg.paths.workload_dir) / "train.parquet", max_memory_mb=cluster.max_task_memory_mb)
    return TuneSettings.from_dict(as_dict(cfg.tune)), cluster, train


def tune(cfg: DictConfig) -> dict:
    """Run (or resume) the study; write best_params.yaml, metrics/tune.json and plots."""
    if alibaba.is_alibaba(cfg):  # no search for the node policies: stub outputs
        return alibaba.tune(cfg)
    settings, cluster, train = _inputs(cfg)
    summary = run_study(settings, as_dict(cfg), train, cluster)
    header = f"# Written by the tune stage (study {summary['study']}); read when use_tuned=true.\n"
    write_text(cfg.paths.best_params, header + yaml.safe_dump(summary["tuned_config"], sort_keys=True))
    metrics_dir = Path(cfg.paths.metrics_dir)
    write_json(metrics_dir / "tune.json", {k: v for k, v in summary.items() if k != "tuned_config"})
    pngs = _plots(settings, summary["study"], metrics_dir / "plots")
    track("tune", cfg, {"best": summary["best"], "default": summary["default"] or {}}, [metrics_dir / "tune.json", *pngs])
    return summary


def evaluate_one(cfg: DictConfig) -> dict:
    """One configuration on the validation workload (a job of a Hydra sweep)."""
    settings, cluster, train = _inputs(cfg)
    fit, val = split_validation(train, settings.validation_fraction)
    return evaluate_config(settings.target, as_dict(cfg), fit, val, cluster, settings.seed, settings.dqn_episodes)


def _plots(settings: TuneSettings, name: str, out: Path) -> list[Path]:
    import warnings

    import optuna
    from optuna.visualization import matplotlib as ovm

    from hybridsched.plots import save_axes
    from hybridsched.kinds.machine.tuning import _storage

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    study = optuna.load_study(study_name=name, storage=_storage(settings.storage))
    target = None if len(settings.objectives) == 1 else (lambda t: t.values[0])
    paths = [save_axes(ovm.plot_optimization_history(study, target=target, target_name=settings.objectives[0]),
                       out / "tune_history.png")]
    if len(study.trials) > 2:
        paths.append(save_axes(ovm.plot_param_importances(study, target=target), out / "tune_importance.png"))
    return paths


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    if multirun_dir() is not None:
        metrics = run_stage(evaluate_one, cfg)
        return float(metrics[cfg.tune.objectives[0]])
    summary = run_stage(tune, cfg)
    print(f"tune: {summary['n_complete']} trials, default {summary['default']} -> best {summary['best']}")
    return None


if __name__ == "__main__":
    main()
