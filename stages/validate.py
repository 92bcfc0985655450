"""DVC stage: check the workload files with the kind's expectation suite before anything uses them.

Kind-agnostic: the work is ``validate(run)`` of the workload's kind (src/hybridsched/kinds/).
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from stages.common import check_group_options, run_stage


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_stage("validate", cfg, outputs=())


if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    main()
