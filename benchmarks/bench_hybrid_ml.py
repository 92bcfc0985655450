"""hybrid_ml decision speed: tasks/s on 10^5 tasks INCLUDING the batched run-time predictions,
static and with online retraining (every 50 completions), for RandomForest and XGBoost models.

Run: `python -m benchmarks.bench_hybrid_ml [--tasks 100000] [--forest-tasks 10000] [--model-dir models/rf]
[--smoke] [OVERRIDE ...]`.  Settings (``rf``, ``policies.machine.hybrid_ml``) are conf/ composed by Hydra.
Without --model-dir, models are trained here with the ``rf`` settings on 3,000
tasks of the default workload (a few seconds).  Target (2 cores): the online ridge
variant (the shipped default: ``ridge_update: incremental``) >= 500,000 tasks/s at 10^5 tasks;
static, the full ridge refit (``ridge_update: refit``) and the forest correction are shown for context.
Each timing is one whole ``simulate`` call: features, one batched predict, the compiled
event loop and (online) every residual refit and re-prediction.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.common import measure, parse, project_path, report, settings
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.runtime_model import load_model, train_runtime_model
from hybridsched.kinds.machine.policies.hybrid_ml import HybridML
from hybridsched.kinds.machine.sim import simulate, task_matrix
from hybridsched.kinds.machine.workload import WorkloadSpec, generate

TARGET_TASKS_PER_S = 500_000  # hybrid_ml online (ridge) at 10^5 tasks


def _models(cluster: Cluster, model_dir: str | None, cfg: dict, n_train: int = 3000) -> dict:
    if model_dir:
        m = load_model(project_path(model_dir))
        return {m.kind: m}
    X = task_matrix(generate(WorkloadSpec(rate=6.0), n_train, np.random.default_rng(0)), cluster)
    return {kind: train_runtime_model(X, cluster, {**cfg, "model": kind})[0] for kind in ("random_forest", "xgboost")}


def _variants(conf: dict) -> dict[str, dict]:
    """Policy settings per variant: the shipped config, static and online (ridge / forest correction)."""
    base = {k: v for k, v in conf.items() if k not in ("_target_", "model_dir")}
    return {"static": {**base, "online": False},
            "online_ridge": {**base, "online": True, "correction": "ridge"},
            "online_ridge_refit": {**base, "online": True, "correction": "ridge", "ridge_update": "refit"},
            "online_forest": {**base, "online": True, "correction": "forest"}}


def _best_time(fn, repeats: int = 3) -> tuple[float, float]:
    """Best wall time and best CPU time (this process) of ``repeats`` calls (plain clocks:
    tracemalloc would slow the Python-side refits several-fold); stops early once a call takes
    over 10 s.  On a shared machine CPU time leaves out the waits for a core."""
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        best, best_cpu = min(best, time.perf_counter() - t0), min(best_cpu, time.process_time() - c0)
        if best > 10:
            break
    return best, best_cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--forest-tasks", type=int, default=10_000,
                    help="tasks for the forest-correction variant (its refits dominate: tasks/s does not "
                         "depend on the count); 0 leaves it out")
    ap.add_argument("--model-dir", default=None, help="benchmark this saved model instead of training two")
    args = parse(ap)
    cfg = settings(args.overrides)
    if args.smoke:
        args.tasks, args.forest_tasks = 2000, 500
    cluster = Cluster()
    models = _models(cluster, args.model_dir, cfg["rf"], 500 if args.smoke else 3000)
    variants = _variants(cfg["policies"]["machine"]["hybrid_ml"])
    sizes = {"static": args.tasks, "online_ridge": args.tasks, "online_ridge_refit": args.tasks,
             "online_forest": args.forest_tasks}

    warm = generate(WorkloadSpec(rate=6.0), 300, np.random.default_rng(1))
    warm_real = cluster.sample_noise(len(warm), np.random.default_rng(1))
    workloads = {}
    for n in sorted(set(v for v in sizes.values() if v > 0)):
        rng = np.random.default_rng(0)
        tasks = generate(WorkloadSpec(rate=6.0), n, rng)
        workloads[n] = (tasks, cluster.sample_noise(n, rng), task_matrix(tasks, cluster))
    rows = []
    for kind, model in models.items():
        static_us = None
        for variant, kw in variants.items():
            n = sizes[variant]
            if n <= 0:
                continue
            tasks, real, X = workloads[n]
            policy = HybridML(model=model, **kw)
            simulate(warm, cluster, policy, warm_real)  # compile / load the numba cache outside the timing
            t0 = time.perf_counter()
            policy.prepare(tasks, cluster, X)
            prepare_s = time.perf_counter() - t0
            dt, cpu = _best_time(lambda: simulate(tasks, cluster, policy, real))
            peak = measure(lambda: simulate(tasks, cluster, policy, real))[1] if variant != "online_forest" else None
            us = dt / n * 1e6
            static_us = us if static_us is None else static_us  # "static" comes first
            # online overhead per refit: the extra time over the static run, spread over the refits
            per_refit = (us - static_us) * n / 1000 / policy.n_refits if policy.n_refits else None
            rows.append({"model": kind, "variant": variant, "tasks": n, "seconds": round(dt, 3),
                         "tasks_per_s": round(n / dt), "tasks_per_cpu_s": round(n / cpu), "prepare_s": round(prepare_s, 3), "refits": policy.n_refits,
                         "ms_per_refit": None if per_refit is None else round(per_refit, 3),
                         "peak_mb": None if peak is None else round(peak, 1)})
    # the target is the online ridge variant's (the shipped default); the others are context
    ok = {f"{r['model']}/{r['variant']}": r["tasks_per_s"] >= TARGET_TASKS_PER_S for r in rows
          if r["variant"] == "online_ridge"}
    report("bench_hybrid_ml", rows, {"target_tasks_per_s": TARGET_TASKS_PER_S, "target_met": ok,
                                     "retrain_every": variants["static"]["retrain_every"]})
    for name, met in ok.items():
        row = next(r for r in rows if f"{r['model']}/{r['variant']}" == name)
        print(f"{name}: {'met' if met else 'MISSED'} ({row['tasks_per_s']:,} tasks/s wall; target >= {TARGET_TASKS_PER_S:,}; "
              f"{row['tasks_per_cpu_s']:,} per CPU second, which leaves out the waits for a core on a shared machine)")


if __name__ == "__main__":
    main()
