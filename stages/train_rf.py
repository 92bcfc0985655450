"""DVC stage: fit the kind's run-time (latency) predictor on the training workload.

Kind-agnostic: the work is ``train_rf(run)`` of the workload's kind (src/hybridsched/kinds/).
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from stages.common import run_stage


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_stage("train_rf", cfg, outputs=())


if __name__ == "__main__":
    main()
