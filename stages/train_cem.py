"""DVC stage: train the kind's ``cem`` policy (a per-candidate scorer) with the cross-entropy
method on a mixture of workloads.

Kind-agnostic: the work is ``train_cem(run)`` of the workload's kind (src/hybridsched/kinds/).
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from stages.common import check_group_options, run_stage


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_stage("train_cem", cfg, outputs=())


if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    main()
