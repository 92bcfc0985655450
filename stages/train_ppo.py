"""DVC stage ``train_ppo``: ``ppo_late``, sb3-contrib's MaskablePPO trained on the late-dispatch
env with episodes of the training mixture, into ``train_ppo.model_dir``
(kinds/machine/ppo_train.py).

A kind without late dispatch writes the stage's outputs saying "not applicable", so
``dvc exp run -S workload=NAME`` runs for every kind.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from hybridsched.kinds.base import Run
from stages.common import check_group_options, run_stage


def train_ppo(run: Run) -> dict[str, Any]:
    """The kind's training, or the not-applicable outputs for a kind that has none."""
    from hybridsched.io import atomic_dir, write_json, write_text
    from hybridsched.kinds import get_kind

    fn = getattr(get_kind(run.kind), "train_ppo", None)
    if fn is not None:
        return fn(run)
    reason = f"not applicable to workload.kind {run.kind!r} (machine kind only)"
    with atomic_dir(Path(run.cfg["train_ppo"]["model_dir"])) as tmp:
        write_json(tmp / "skipped.json", {"skipped": reason})
    write_json(run.metrics_dir / "train_ppo.json", {"skipped": reason})
    write_text(run.metrics_dir / "plots" / "train_ppo.csv", "step,episode,cost\n")
    print(f"train_ppo: {reason}")
    return {"skipped": reason}


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_stage(train_ppo, cfg)


if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    main()
