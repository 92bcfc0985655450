"""DVC stage (named experiment ``fgd_atc23``): the FGD paper's fragmentation experiment on the
cluster kind, settings ``fgd`` (conf/fgd/default.yaml), outputs under ``paths.metrics_dir``."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from stages.common import as_dict, run_stage


def fgd_atc23(cfg: DictConfig) -> dict:
    """Every policy x seed of the protocol; metrics/fgd_atc23*.{json,csv,md}, plots/fgd_atc23_*."""
    from hybridsched.errors import HybridschedError
    from hybridsched.kinds.cluster.fgd_protocol import run_experiment

    if cfg.get("fgd") is None:
        raise HybridschedError("no `fgd` settings: add `- fgd: default` to conf/config.yaml or pass +fgd=default")
    summary = run_experiment(as_dict(cfg.fgd), cfg.paths.metrics_dir)
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
    main()
