"""DVC stage ``scenarios``: issue 22's report per scenario (arrival against late dispatch, the
learned policies against the best heuristic of their own mode, the best policy against the LP
bound), settings ``scenarios`` (conf/scenarios/default.yaml), outputs under ``paths.metrics_dir``.

The work is the kind's ``scenarios(run)`` (the machine kind's: kinds/machine/scenarios_late.py);
a kind without one writes every declared output saying "not applicable", so
``dvc exp run -S workload=NAME`` runs for every kind.
"""

from __future__ import annotations

import sys
from typing import Any

import hydra
from omegaconf import DictConfig

from hybridsched.kinds.base import Run
from stages.common import check_group_options, run_stage


def scenarios(run: Run) -> dict[str, Any]:
    """The kind's report, or the not-applicable outputs for a kind that has none."""
    from hybridsched.kinds import get_kind
    from hybridsched.not_applicable import skip_scenarios

    fn = getattr(get_kind(run.kind), "scenarios", None)
    if fn is None:
        return skip_scenarios(run.metrics_dir, run.metrics_dir / "plots",
                                    f"not applicable to workload.kind {run.kind!r} (machine kind only)")
    return fn(run)


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    metrics = run_stage(scenarios, cfg, outputs=("metrics_dir",))
    if "policies" in metrics:
        for name, v in metrics["policies"].items():
            figs = "; ".join(f"{where} geomean {f['geomean']:.3f} worst {f['worst']:.3f} ({f['worst_at']})"
                             for where, f in v.items() if where != "met")
            print(f"scenarios: {name} ÷ best heuristic: {figs}")
        print(f"scenarios: target {metrics['target']['what']}: "
              f"{'met by ' + ', '.join(metrics['met_by']) if metrics['met_by'] else 'missed'}; {metrics['wall_s']} s")

if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    main()
