"""DVC stage: check every setting of the workload's kind before anything runs.

A bad value (``dvc exp run -S workload.rate=-1``) fails here with one line, before DVC deletes
the outputs of the stages after it.  Its output never changes, so it never reruns them.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from stages.common import check_group_options, run_stage

# Said after a refusal under `dvc exp run -S ...` (the stage reads params.yaml): DVC has
# already written the refused value into params.yaml and deleted this stage's output, so every
# later `dvc repro` would fail too until both are restored (docs/bad-input.md, "Getting back").
# `git checkout params.yaml` may not restore it: DVC can leave git's index holding the committed
# blob with the rewritten file's size and time, so git takes the file for unchanged.  `make
# params` composes conf/ as `dvc exp run` does; the rerun check writes its output again.
GET_BACK = ("; params.yaml keeps the refused value: `make params` recomposes it from conf/, "
            "then `dvc repro` reruns this check")


def refusal_hint() -> str:
    """:data:`GET_BACK` when this run reads params.yaml (DVC's stages), else nothing."""
    from hydra.core.hydra_config import HydraConfig

    return GET_BACK if HydraConfig.initialized() and HydraConfig.get().job.config_name == "params" else ""


def check_and_record(run) -> None:  # noqa: ANN001 (a hybridsched.kinds.base.Run)
    """Check every setting, warn about a policy a stage reads that dvc.yaml does not declare
    for it, then write the stage's output (inside run_stage, so an unwritable metrics/ is one
    line too)."""
    from hybridsched.io import write_json
    from hybridsched.kinds import get_kind
    from hybridsched.settings_schema import check_run
    from hybridsched.stage_params import check_dvc_yaml

    check_run(run)
    for line in check_dvc_yaml(run.cfg, get_kind(run.kind)):  # a setting naming a policy dvc.yaml leaves out
        print(f"check: warning: {line}", file=sys.stderr)
    write_json(run.metrics_dir / "config_check.json", {"ok": True})


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_stage(check_and_record, cfg, hint=refusal_hint())
    print(f"check: the {cfg.workload.kind} kind's settings are valid")


if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    main()
