"""DVC stage: Optuna search of a learned policy's hyper-parameters (the kind's ``tune(run)``).

Under Hydra multirun (e.g. `hparams_search=hybrid_ml_optuna`, Hydra's Optuna sweeper) each
job instead evaluates the one configuration it was given and returns the objective.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from stages.common import check_group_options, multirun_dir, run_stage


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    result = run_stage("tune", cfg)
    return float(result[cfg.tune.objectives[0]]) if multirun_dir() is not None else None


if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    main()
