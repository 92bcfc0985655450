"""DVC stage ``fgd_atc23``: the FGD paper's fragmentation experiment on the cluster kind,
settings ``fgd`` (conf/fgd/default.yaml), outputs under ``paths.metrics_dir``."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from hybridsched.kinds.base import Run
from stages.common import check_group_options, run_stage


def fgd_atc23(run: Run) -> dict:
    """Every policy x seed of the protocol; metrics/fgd_atc23*.{json,csv,md}, plots/fgd_atc23_*."""
    from hybridsched.kinds.cluster.fgd_protocol import run_experiment
    from hybridsched.settings_schema import check_files

    check_files(run.cfg, ("fgd.pod_list", "fgd.node_list"))  # before any worker starts
    summary = run_experiment(run.cfg["fgd"], run.metrics_dir)
    for row in summary["at"]:
        print(f"fgd_atc23: x = {row['x']:>3}%  fgd {row['fgd_unallocated_gpus']:7.1f} unallocated GPUs vs "
              f"{row['best_packing']} {row['best_packing_unallocated_gpus']:7.1f}: {row['gpus_saved']:+.1f} GPUs "
              f"({row['reduction_pct']:+.1f} %)")
    print(f"fgd_atc23: {summary['wall_seconds']} s on {summary['workers']} worker(s)")
    return summary


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_stage(fgd_atc23, cfg)


if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    main()
