"""DVC stages ``results_cluster`` and ``results_serving``: another kind's pipeline at the
default settings, for its results page.

The pipeline's own outputs are the workload in params.yaml (the machine kind by default).
``python -m stages.results workload=NAME`` runs the same stage scripts for workload ``NAME``,
composed from conf/ (never params.yaml, so ``dvc exp run -S`` leaves it alone), in the order
of :data:`ORDER`, each in a fresh process with its working directory in a scratch folder: every
relative path (data/, models/, metrics/) lands there, so the workspace's are never read or
written.  The run's headline and per-policy table are copied to ``metrics/results/<kind>/``,
from which docs/results/ generates its tables.  Further overrides (``workload.max_tasks=300``)
reach every stage but ``paths.*`` (``paths.metrics_dir``: where this stage writes).  A stage
that fails ends this one with its last line, and nothing is written.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import hydra
from omegaconf import DictConfig

from stages.common import check_group_options, run_stage

ROOT = Path(__file__).resolve().parents[1]
# the pipeline's stages in an order that runs each after the stages whose outputs it reads
ORDER = ("check", "profile", "generate", "validate", "tune", "tune_heuristics", "train_ppo", "train_rf", "train_dqn",
         "train_cem", "train_late", "simulate", "evaluate")
KEPT = ("headline.json", "headline.md", "policies.csv", "summary.json")  # copied from the run's metrics/
# and its charts, where the kind draws them (docs/img/ copies them for the results pages)
CHARTS = ("plots/headline.png", "plots/kind/attainment_vs_load.png")
HYDRA = ("hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled")


def kind_results(kind: str, overrides: list[str], traces: Path, out: Path) -> None:
    """Run :data:`ORDER` with ``overrides`` in a scratch folder; :data:`KEPT` and the
    :data:`CHARTS` it drew into ``out`` (whole or not at all)."""
    from hybridsched.errors import HybridschedError
    from hybridsched.io import atomic_dir

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    with tempfile.TemporaryDirectory(prefix=f"results-{kind}-") as tmp:
        for stage in ORDER:
            cmd = [sys.executable, "-m", f"stages.{stage}", "-cp", str(ROOT / "conf"), "-cn", "config", *HYDRA,
                   *overrides, f"paths.traces={traces}", "tracking.enabled=false"]
            print(f"results: {kind}: {stage}", flush=True)
            r = subprocess.run(cmd, cwd=tmp, env=env, stderr=subprocess.PIPE, text=True)
            if r.returncode:
                last = ([line for line in r.stderr.splitlines() if line.strip()] or [f"exit {r.returncode}"])[-1]
                raise HybridschedError(f"results: the {stage} stage of the {kind} kind failed: {last}")
        with atomic_dir(out) as dst:
            for name in KEPT:
                (dst / name).write_bytes((Path(tmp) / "metrics" / name).read_bytes())
            for chart in CHARTS:
                if (Path(tmp) / "metrics" / chart).is_file():
                    (dst / Path(chart).name).write_bytes((Path(tmp) / "metrics" / chart).read_bytes())
    print((out / "headline.md").read_text())


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    # paths.* stay this stage's own: every other path of the run is in its scratch folder
    overrides = [o for o in HydraConfig.get().overrides.task if not o.startswith(("hydra.", "hydra/", "paths."))]
    kind, traces = cfg.workload.kind, Path(cfg.paths.traces).resolve()
    run_stage(lambda run: kind_results(kind, overrides, traces, Path(cfg.paths.metrics_dir) / "results" / kind), cfg)


if __name__ == "__main__":
    check_group_options(sys.argv[1:])
    main()
