"""DVC stage: metrics, the comparison table and plots from the simulated traces.

Kind-agnostic: the work is ``evaluate(run)`` of the workload's kind (src/hybridsched/kinds/).
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from stages.common import check_group_options, run_stage


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_stage("evaluate", cfg, outputs=("metrics_dir",))


if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    main()
