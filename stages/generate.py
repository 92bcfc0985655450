"""DVC stage: draw the synthetic train and test workloads."""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from hybridsched.kinds.machine.devices import Cluster
from hybridsched.io import write_frame, write_json
from hybridsched.kinds.machine.workload import generate_splits
from stages import alibaba
from stages.common import as_dict, run_stage


def generate(cfg: DictConfig) -> dict[str, int]:
    """Write ``train.parquet`` and ``test.parquet`` under ``paths.workload_dir`` (a trace workload,
    ``workload.kind: alibaba``, is imported instead) and ``metrics/import_report.json``."""
    if alibaba.is_alibaba(cfg):
        return alibaba.generate(cfg)
    # deadlines scale with the configured CPU speed, so generate never waits on profile
    cpu_gflops = Cluster.from_dict(as_dict(cfg.cluster)).cpu_gflops
    train, test = generate_splits(as_dict(cfg.workload), cpu_gflops=cpu_gflops)
    out = Path(cfg.paths.workload_dir)
    write_frame(out / "train.parquet", train.to_frame())
    write_frame(out / "test.parquet", test.to_frame())
    write_json(Path(cfg.paths.metrics_dir) / "import_report.json",
               {"kind": "synthetic", "workload": cfg.workload.name, "train": len(train), "test": len(test)})
    return {"train": len(train), "test": len(test)}


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    counts = run_stage(generate, cfg, outputs=["workload_dir"])
    print(f"generate: {counts['train']} train and {counts['test']} test tasks ({cfg.workload.name})")


if __name__ == "__main__":
    main()
