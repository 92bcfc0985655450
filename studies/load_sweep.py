"""Every policy's mean and P99 latency against offered load, with the solo and LP bounds:

    python -m studies.load_sweep 'load_sweep.loads=[0.5,0.9]' load_sweep.n_tasks=500

Settings ``load_sweep`` (conf/load_sweep/default.yaml); writes under ``load_sweep.out``
(``studies-out/load_sweep``)."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from hybridsched.kinds.base import Run
from stages.common import check_group_options, run_stage


def sweep(run: Run):  # -> pandas.DataFrame
    """Write load_sweep.{csv,md,png} under ``load_sweep.out``; return the table."""
    from hybridsched.devices import cluster_from_config
    from hybridsched.kinds.machine.scenarios import SweepSettings, load_sweep, policy_factories, write_sweep

    c, s = run.cfg, run.cfg["load_sweep"]
    settings = SweepSettings(loads=tuple(s["loads"]), n_tasks=int(s["n_tasks"]), seed=int(s["seed"]), lp=bool(s["lp"]))
    table = load_sweep(c["workload"], cluster_from_config(c["cluster"]), policy_factories(c, s.get("policies")), settings,
                       bound_cache=c["paths"].get("bound_cache"))
    write_sweep(table, Path(s["out"]), title=f"workload {c['workload']['name']}, {settings.n_tasks} tasks per point")
    return table


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    table = run_stage(sweep, cfg)
    print(table.pivot_table(index="policy", columns="offered_load", values="mean_latency").round(3).to_string())


if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    main()
