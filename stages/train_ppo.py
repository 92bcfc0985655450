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
    """The kind's training, or the not-applicable outputs for a kind that has none."""
    from hybridsched.kinds import get_kind
    from hybridsched.not_applicable import skip_training

    fn = getattr(get_kind(run.kind), "train_ppo", None)
    if fn is not None:
        return fn(run)
    return skip_training("train_ppo", run.cfg["train_ppo"]["model_dir"], run.metrics_dir, "step,episode,cost",
                         f"not applicable to workload.kind {run.kind!r} (machine kind only)")


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_stage(train_ppo, cfg)


if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    main()
