"""DVC stage ``train_ppo``: ``ppo_late``, sb3-contrib's MaskablePPO trained on the late-dispatch
env with episodes of the training mixture, into ``train_ppo.model_dir``
(kinds/machine/ppo_train.py).

A kind without late dispatch writes the stage's outputs saying "not applicable", so
``dvc exp run -S workload=NAME`` runs for every kind.
"""

from __future__ import annotations

import sys
from typing import Any

import hydra
from omegaconf import DictConfig

from hybridsched.kinds.base import Run
from stages.common import check_group_options, run_stage


def train_ppo(run: Run) -> dict[str, Any]:
    """The machine kind's training, or the not-applicable outputs on another kind."""
    from hybridsched.kinds.machine import ppo_train

    return ppo_train.train_stage(run) if run.kind == "machine" else ppo_train.not_applicable(run)


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_stage(train_ppo, cfg)


if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    main()
