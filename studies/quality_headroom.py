"""How much room does the eft_rank family leave? Per workload, eft_rank with three sets of weights.

- ``cross``: the YAML weights (tuned once on the default workload's training split), the
  heuristic every learned policy is compared with in docs/findings/machine.md;
- ``own``: tuned by the project's Optuna study (``tuning.run_study``) on *that workload's*
  training split (for a held-out draw: a fresh training draw of the same parameters, task
  stream ``[7, k]``, never the test stream ``k``), then run on the test split;
- ``in_sample``: tuned on the test split itself, with the evaluation's noise draw, trial 0 =
  the YAML weights. Not a fair policy: it is the ceiling of any fixed-weight rule of the family
  on that workload (up to the search's ``--ceiling-trials``).

and the clairvoyant ``oracle_rank`` (eft_rank's cost on the true run times and device free
times, as ``oracle`` is to ``eft``), with the YAML weights. Test splits and noise seeds as in
``studies.quality_eval`` (named workloads: noise seed ``sim.seed``; held-out draw k: tasks
and noise from seed k).

    python -m studies.quality_headroom --trials 20 --ceiling-trials 40 --heldout 5   # ~10 min on 2 loaded cores

Writes ``<out>/headroom.csv`` and ``<out>/quality_headroom.json`` (benchmarks.common.report); ``--out`` by
default: studies-out/quality, git-ignored.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.common import report
from studies.quality_eval import WORKLOADS, compose, heldout_spec
from hybridsched.io import write_frame
from hybridsched.kinds.base import instantiate
from hybridsched.devices import Cluster, cluster_from_config
from hybridsched.kinds.machine.metrics import summarize
from hybridsched.kinds.machine.scenarios import heldout_workloads
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.tuning import TuneSettings, merge, run_study, suggest
from hybridsched.kinds.machine.workload import generate, generate_splits

TARGET = "eft_rank"


def mean_latency(spec: dict[str, Any], tasks, cluster: Cluster, real) -> float:
    """Mean latency of the policy built from ``spec`` on ``tasks`` with noise ``real``."""
    return float(summarize(simulate(tasks, cluster, instantiate(spec), real).to_frame(), cluster)["mean_latency"])


def tune_own(cfg: dict[str, Any], train, cluster: Cluster, trials: int) -> dict[str, Any]:
    """eft_rank's config tuned by the project's study on ``train`` (its validation part)."""
    with tempfile.TemporaryDirectory(prefix="headroom-") as d:  # the study's journal is not kept
        s = TuneSettings.from_dict({**cfg["tune"], "target": TARGET, "n_trials": trials, "n_jobs": 1,
                                    "storage": str(Path(d) / "study.journal")})
        return merge(cfg["policies"]["machine"][TARGET], run_study(s, cfg, train, cluster)["best_params"])


def tune_in_sample(cfg: dict[str, Any], tasks, cluster: Cluster, real, trials: int) -> float:
    """The best mean latency over ``trials`` TPE trials of eft_rank's weights on ``tasks`` itself."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    base = cfg["policies"]["machine"][TARGET]
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    study.enqueue_trial({k: float(base[k]) for k in cfg["tune"]["spaces"][TARGET]})
    study.optimize(lambda tr: mean_latency(merge(base, suggest(tr, TARGET, cfg, cfg["tune"]["spaces"])
                                                 ["policies"]["machine"][TARGET]), tasks, cluster, real),
                   n_trials=trials)
    return float(study.best_value)


def row(name: str, cfg: dict[str, Any], train, test, cluster: Cluster, seed: int, trials: int,
        ceiling_trials: int) -> dict[str, Any]:
    """The four eft_rank figures on one workload."""
    real = cluster.sample_noise(len(test), np.random.default_rng(seed))
    base = cfg["policies"]["machine"][TARGET]
    cross = mean_latency(base, test, cluster, real)
    own = mean_latency(tune_own(cfg, train, cluster, trials), test, cluster, real)
    ceiling = tune_in_sample(cfg, test, cluster, real, ceiling_trials)
    oracle = mean_latency({**base, "_target_": "hybridsched.kinds.machine.policies.weighted.OracleRankEFT"},
                          test, cluster, real)
    out = {"workload": name, "cross": cross, "own": own, "in_sample": ceiling, "oracle_rank": oracle,
           "own_vs_cross": own / cross, "in_sample_vs_cross": ceiling / cross, "oracle_rank_vs_cross": oracle / cross}
    print({k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--heldout", type=int, default=5)
    ap.add_argument("--heldout-tasks", type=int, default=3000)
    ap.add_argument("--trials", type=int, default=20, help="Optuna trials per study (trial 0 = the YAML weights)")
    ap.add_argument("--ceiling-trials", type=int, default=40, help="TPE trials of the in-sample search")
    ap.add_argument("--out", default="studies-out/quality")
    args = ap.parse_args()
    rows = []
    for wname in [w for w in args.workloads.split(",") if w]:
        cfg = compose(WORKLOADS[wname])
        cluster = cluster_from_config(cfg["cluster"])
        train, test = generate_splits(cfg["workload"], cpu_gflops=cluster.cpu_gflops)
        rows.append(row(wname, cfg, train, test, cluster, int(cfg["sim"]["seed"]), args.trials, args.ceiling_trials))
    if args.heldout:
        cfg = compose([])
        cluster = cluster_from_config(cfg["cluster"])
        for k, w in enumerate(heldout_workloads(args.heldout, cluster)):
            spec = heldout_spec(w)
            test = generate(spec, args.heldout_tasks, np.random.default_rng(k), cpu_gflops=cluster.cpu_gflops)
            train = generate(spec, args.heldout_tasks, np.random.default_rng([7, k]), cpu_gflops=cluster.cpu_gflops)
            rows.append(row(w["name"], cfg, train, test, cluster, k, args.trials, args.ceiling_trials))
    write_frame(Path(args.out) / "headroom.csv", pd.DataFrame(rows))
    report("quality_headroom", rows, {"trials": args.trials, "ceiling_trials": args.ceiling_trials}, folder=Path(args.out))


if __name__ == "__main__":
    main()
