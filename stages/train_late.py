"""DVC stage ``train_late``: the learned late dispatchers (``cem_late``, ``dqn_late``,
``pg_late``), trained on the training mixture into ``train_late.model_dir`` (the kind's
``train_late(run)``; kinds/machine/late_train.py).

A kind without late dispatchers writes the stage's outputs saying "not applicable", so
``dvc exp run -S workload=NAME`` runs for every kind.
"""

from __future__ import annotations

import sys
from typing import Any

import hydra
from omegaconf import DictConfig

from hybridsched.kinds.base import Run
from stages.common import check_group_options, run_stage


def train_late(run: Run) -> dict[str, Any]:
    """The kind's training, or the not-applicable outputs for a kind that has none."""
    from hybridsched.kinds import get_kind
    from hybridsched.not_applicable import skip_training

    fn = getattr(get_kind(run.kind), "train_late", None)
    if fn is not None:
        return fn(run)
    return skip_training("train_late", run.cfg["train_late"]["model_dir"], run.metrics_dir, "policy,step,cost",
                         f"not applicable to workload.kind {run.kind!r} (machine kind only)")


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_stage(train_late, cfg)


if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    main()
