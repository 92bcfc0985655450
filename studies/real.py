"""Real vs simulated serving (docs/serving.md): serve ``serving.real`` for real on this CPU and
in the simulator, write ``<paths.metrics_dir>/plots/kind/sim_vs_real.{csv,md}`` (``paths.metrics_dir``
left at the pipeline's ``metrics``: ``studies-out/real``, never a DVC output).

    python -m studies.real workload=serving serving.real.duration_s=30 serving.real.rate=1.0
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from stages.common import check_group_options, run_stage


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    if cfg.paths.metrics_dir == "metrics":
        OmegaConf.update(cfg, "paths.metrics_dir", "studies-out/real")
    table = run_stage("sim_vs_real", cfg)
    print(table.to_string(index=False))


if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    main()
