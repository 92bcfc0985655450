"""DVC stage: train the dueling DQN in the simulator on the training workload."""

from __future__ import annotations

from pathlib import Path

import hydra
import numpy as np
from omegaconf import DictConfig

from hybridsched.kinds.machine.devices import cluster_from_config
from hybridsched.io import atomic_dir, write_frame, write_json
from hybridsched.kinds.machine.workload import read_tasks
from stages import alibaba
from stages.common import as_dict, run_stage, track


def train_dqn(cfg: DictConfig) -> dict:
    """Train, save ``dqn.model_dir`` (model.pt + meta.json), write metrics/train_dqn.json and
    the per-episode curve metrics/plots/train_dqn.csv. Returns the metrics."""
    if alibaba.is_alibaba(cfg):  # node-placement DQN of a trace workload
        return alibaba.train_dqn(cfg)
    import pandas as pd

    from hybridsched.rl.dqn import DQNSettings, save_model, train  # torch

    settings = DQNSettings.from_dict(as_dict(cfg.dqn))
    cluster = cluster_from_config(as_dict(cfg.cluster))
    tasks = read_tasks(Path(cfg.paths.workload_dir) / "train.parquet", max_memory_mb=cluster.max_task_memory_mb)
    result = train(tasks, cluster, settings)
    with atomic_dir(cfg.dqn.model_dir) as tmp:
        save_model(tmp, result)
    curve = pd.DataFrame(result.history)
    last = result.history[-1]
    metrics = {
        "workload": cfg.workload.name,
        "n_train": len(tasks),
        "episodes": settings.episodes,
        "decisions": settings.episodes * len(tasks),
        "grad_steps": result.learner.grad_steps,
        "target_updates": result.learner.target_updates,
        "wall_s": round(result.wall_s, 2),
        "n_state": result.spec.n_state,
        "n_actions": result.spec.n_actions,
        "final_mean_reward": last["mean_reward"],
        "best_mean_reward": float(curve["mean_reward"].max()),
        "final_loss": last["loss"],
        "final_epsilon": last["epsilon"],
        "final_train_mean_latency": last["mean_latency"],
        "final_train_makespan": last["makespan"],
        "time_scale_s": result.spec.time_scale,
        "energy_scale_j": result.spec.energy_scale,
    }
    out = Path(cfg.paths.metrics_dir)
    write_json(out / "train_dqn.json", metrics)
    write_frame(out / "plots" / "train_dqn.csv", curve.round(6))
    track("train_dqn", cfg, metrics, [out / "train_dqn.json", out / "plots" / "train_dqn.csv",
                                      Path(cfg.dqn.model_dir) / "meta.json"],
          model=("pytorch", result.learner.q, {"input_example": np.zeros((1, result.spec.n_state), np.float32)}))
    return metrics


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    m = run_stage(train_dqn, cfg)
    print(f"train_dqn: {m['episodes']} episodes on {m['n_train']} tasks in {m['wall_s']:.1f} s; "
          f"final mean reward {m['final_mean_reward']:.3f}, train mean latency {m['final_train_mean_latency']:.3f} s")


if __name__ == "__main__":
    main()
