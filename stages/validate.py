"""DVC stage: check the generated workloads with the Great Expectations suite before anything uses them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from hybridsched.kinds.machine.devices import Cluster
from hybridsched.errors import DataValidationError
from hybridsched.io import write_json
from hybridsched.kinds.machine.validation import failure_summary, validate_files
from stages import alibaba
from stages.common import as_dict, run_stage

SPLITS = ("train", "test")


def validate(cfg: DictConfig) -> dict[str, Any]:
    """Write metrics/validation.json; raise DataValidationError listing every failed expectation."""
    if alibaba.is_alibaba(cfg):  # pod tables of a trace workload
        return alibaba.validate(cfg)
    # memory limits come from the configured devices (the profile never changes them)
    max_memory_mb = Cluster.from_dict(as_dict(cfg.cluster)).max_task_memory_mb
    workload_dir = Path(cfg.paths.workload_dir)
    report = validate_files({s: workload_dir / f"{s}.parquet" for s in SPLITS}, max_memory_mb)
    out = Path(cfg.paths.metrics_dir) / "validation.json"
    write_json(out, report)  # written on failure too: it is where the details are
    if not report["success"]:
        raise DataValidationError(f"{failure_summary(report)}\n  details: {out}")
    return report


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    report = run_stage(validate, cfg)
    for name, f in report["files"].items():
        print(f"validate: {f['path']}: {len(f['expectations'])} expectations passed on {f['n_rows']} rows")


if __name__ == "__main__":
    main()
