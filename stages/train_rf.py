"""DVC stage: fit the run-time predictor (RandomForest or XGBoost) on the training workload."""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from hybridsched.kinds.machine.devices import cluster_from_config
from hybridsched.kinds.machine.runtime_model import save_model, train_runtime_model
from hybridsched.kinds.machine.sim import task_matrix
from hybridsched.kinds.machine.workload import read_tasks
from stages import alibaba
from stages.common import as_dict, run_stage, track, write_importance_report


def train_rf(cfg: DictConfig) -> dict:
    """Fit, score on a held-out split, save the model to ``rf.model_dir``; write
    metrics/train_rf.json and the importance plot (PNG + csv). Returns the metrics."""
    if alibaba.is_alibaba(cfg):  # pod duration model of a trace workload
        return alibaba.train_rf(cfg)
    rf_cfg = as_dict(cfg.rf)
    cluster = cluster_from_config(as_dict(cfg.cluster))
    tasks = read_tasks(Path(cfg.paths.workload_dir) / "train.parquet", max_memory_mb=cluster.max_task_memory_mb)
    model, metrics = train_runtime_model(task_matrix(tasks, cluster), cluster, rf_cfg)
    save_model(model, rf_cfg["model_dir"], {"workload": cfg.workload.name, "metrics": metrics})
    files = write_importance_report(Path(cfg.paths.metrics_dir), metrics,
                                    f"{metrics['model']} run-time model: permutation importance")
    flavor = "xgboost" if metrics["model"] == "xgboost" else "sklearn"
    track("train_rf", cfg, metrics, [*files, Path(rf_cfg["model_dir"]) / "meta.json"], model=(flavor, model.estimator))
    return metrics


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    m = run_stage(train_rf, cfg)
    mae = ", ".join(f"{k} {v:.3f} s" for k, v in m["mae_s"].items())
    print(f"train_rf: {m['model']} on {m['n_train']} tasks, held-out R² (log) {m['r2']:.4f}, MAE {mae}")


if __name__ == "__main__":
    main()
