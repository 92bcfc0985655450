"""DVC stage: check every setting of the workload's kind before anything runs.

A bad value (``dvc exp run -S workload.rate=-1``) fails here with one line, before DVC deletes
the outputs of the stages after it.  Its output never changes, so it never reruns them.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from stages.common import check_group_options, run_stage


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_stage("check_config", cfg)
    from hybridsched.io import write_json

    write_json(cfg.paths.metrics_dir + "/config_check.json", {"ok": True})
    print(f"check: the {cfg.workload.kind} kind's settings are valid")


if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    main()
