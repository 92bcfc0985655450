"""DVC stage ``tune_heuristics``: the heuristics' weights, one Optuna study per policy of
``tune.spaces``, written to ``paths.tuned/<kind>/<policy>.yaml`` where each policy's ``tuned``
setting reads them (the kind's ``tune_heuristics(run)``).

A kind without tuned heuristics writes the stage's outputs saying "not applicable", so
``dvc exp run -S workload=NAME`` runs for every kind.
"""

from __future__ import annotations

import sys
from typing import Any

import hydra
from omegaconf import DictConfig

from hybridsched.kinds.base import Run
from stages.common import check_group_options, run_stage


def tune_heuristics(run: Run) -> dict[str, Any]:
    """The kind's studies, or the not-applicable outputs for a kind that has none."""
    from hybridsched.io import atomic_dir, write_json
    from hybridsched.kinds import get_kind

    fn = getattr(get_kind(run.kind), "tune_heuristics", None)
    if fn is not None:
        return fn(run)
    reason = f"not applicable to workload.kind {run.kind!r} (its policies have no tuned weights)"
    with atomic_dir(run.path("tuned") / run.kind) as tmp:
        write_json(tmp / "skipped.json", {"skipped": reason})
    write_json(run.metrics_dir / "tune_heuristics.json", {"skipped": reason})
    print(f"tune_heuristics: {reason}")
    return {"skipped": reason}


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    metrics = run_stage(tune_heuristics, cfg)
    for name, r in (metrics.get("policies") or {}).items():
        print(f"tune_heuristics: {name:<10} {metrics['objective']} {r['default']:.4f} -> {r['best']:.4f} "
              f"({metrics['trials']} trials)")


if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    main()
