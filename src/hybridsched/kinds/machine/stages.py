"""The machine kind's stage functions (one CPU + ``cluster.n_gpus`` GPUs; see kinds/base.py).

Each takes a :class:`~hybridsched.kinds.base.Run`, writes the stage's declared outputs and
returns its metrics (``simulate`` / ``evaluate``: the per-policy table).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybridsched.errors import HybridschedError
from hybridsched.evaluation import (DISPATCH_FILE, EVALUATE_COLUMNS, compare, dispatch_mode, read_dispatch, with_dispatch,
                                   write_importance_report, write_report)
from hybridsched.io import TIMING_KEYS, atomic_dir, check_finite, without_timings, write_frame, write_json, write_text
from hybridsched.kinds.base import Run, instantiate, with_tuned, without_tuned
from hybridsched.devices import Cluster, cluster_from_config
from hybridsched.kinds.machine.workload import TaskTable, generate_splits, read_tasks
from hybridsched.parallel import background
from hybridsched.progress import progress

SPLITS = ("train", "test")


def _cluster(run: Run) -> Cluster:
    """The devices, with the profile's fitted constants when ``cluster.source: profile``."""
    return cluster_from_config(run.cfg["cluster"])


def _tasks(run: Run, split: str, cluster: Cluster) -> TaskTable:
    """A split of the workload: the generate stage's file, or under multirun (where the sweep
    may change the workload) the same tasks generated in memory from the config."""
    if run.in_memory:
        return generate_splits(run.cfg["workload"], cpu_gflops=float(run.cfg["cluster"]["cpu_gflops"]))[SPLITS.index(split)]
    return read_tasks(run.workload_dir / f"{split}.parquet", max_memory_mb=cluster.max_task_memory_mb)


def check_config(run: Run) -> None:
    """Every setting this kind reads, checked before the pipeline runs anything (stage
    ``check``): a bad value fails here, with one line, before DVC deletes any output."""
    from hybridsched.kinds.machine.cem_train import MachineCEMSettings, check_seed
    from hybridsched.kinds.machine.dqn import DQNSettings
    from hybridsched.rl.cem import CEMSettings
    from hybridsched.kinds.machine.tuning import TuneSettings
    from hybridsched.kinds.machine.user_file import load_with_report
    from hybridsched.kinds.machine.workload import spec_from_config

    Cluster.from_dict(run.cfg["cluster"])
    w = run.cfg["workload"]
    if w.get("path"):
        if not Path(str(w["path"])).is_file():
            raise HybridschedError(f"workload.path: file {w['path']!r} not found")
        # read and split as generate does (same header, type and range checks)
        load_with_report(w, max_memory_mb=Cluster.from_dict(run.cfg["cluster"]).max_task_memory_mb)
    else:
        for split in SPLITS:
            spec_from_config(w, split)
    DQNSettings.from_dict(run.cfg["dqn"])
    TuneSettings.from_dict(run.cfg["tune"])
    # the YAML's values: the tuned files come later in the DAG
    select_dispatch(run.cfg["sim"], {name: instantiate(without_tuned(spec)) for name, spec in run.policy_specs().items()},
                    named=run.policy is not None)
    check_seed(CEMSettings.from_dict(run.cfg["cem"]).seed)
    MachineCEMSettings.from_dict(run.cfg["cem"].get("machine"))


def profile(run: Run) -> dict[str, Any]:
    """Time matrix products on this machine's devices and fit the cost model's constants:
    metrics/profile.json, metrics/plots/profile/profile.png and ``cluster.profile_path``.  Only with
    ``cluster.source: profile``, where the fit is used: a measurement differs on every machine,
    and the default pipeline must give the same bytes wherever it runs."""
    from hybridsched.kinds.machine.profiling import (ProfileSettings, fit_from_profile, plot_profile,
                                                      profile_matmul, report)
    from hybridsched.not_applicable import empty_plot_dir
    from hybridsched.plots import stage_plot_dir

    plot_dir = stage_plot_dir(run.metrics_dir, "profile")
    if run.cfg["cluster"].get("source", "config") != "profile":
        reason = "not run: cluster.source is 'config' (the configured constants); set cluster.source=profile to measure"
        write_json(Path(run.cfg["cluster"]["profile_path"]), {"skipped": reason})
        write_json(run.metrics_dir / "profile.json", {"skipped": reason})
        empty_plot_dir(plot_dir)  # nothing measured, nothing to draw
        print(f"profile: {reason}")
        return {"skipped": reason}
    settings = ProfileSettings.from_dict(run.cfg["profile"])
    result = profile_matmul(settings)
    fitted = fit_from_profile(result, settings)
    write_json(run.metrics_dir / "profile.json", result)
    with atomic_dir(plot_dir) as tmp:
        plot_profile(result, tmp / "profile.png")
    write_json(Path(run.cfg["cluster"]["profile_path"]), fitted)
    print(report(result, fitted))
    return {"profile": result, "fitted": fitted}


def generate(run: Run) -> dict[str, int]:
    """The train and test workloads into ``paths.workload_dir``: drawn from the synthetic
    generator, or read from the user's own task file when ``workload.path`` is set."""
    from hybridsched.kinds.machine.user_file import load_with_report

    w = run.cfg["workload"]
    if w.get("path"):  # the user's file (workload=file), with the same checks as ours
        train, test, report = load_with_report(w, max_memory_mb=Cluster.from_dict(run.cfg["cluster"]).max_task_memory_mb)
    else:
        # deadlines scale with the configured CPU speed, so generate never waits on profile
        train, test = generate_splits(w, cpu_gflops=Cluster.from_dict(run.cfg["cluster"]).cpu_gflops)
        report = {"train": len(train), "test": len(test)}
    with atomic_dir(run.workload_dir) as tmp:
        write_frame(tmp / "train.parquet", train.to_frame())
        write_frame(tmp / "test.parquet", test.to_frame())
    write_json(run.metrics_dir / "import_report.json", {"kind": "machine", "workload": w["name"], **report})
    print(f"generate: {len(train)} train and {len(test)} test tasks ({w['name']})")
    return {"train": len(train), "test": len(test)}


def validate(run: Run) -> dict[str, Any]:
    """The task-table expectation suite on both splits: metrics/validation.json; raises
    DataValidationError listing every failed expectation."""
    from hybridsched.kinds.machine.validation import validate_files
    from hybridsched.expectations import check_report

    # memory limits come from the configured devices (the profile never changes them)
    max_memory_mb = Cluster.from_dict(run.cfg["cluster"]).max_task_memory_mb
    report = validate_files({s: run.workload_dir / f"{s}.parquet" for s in SPLITS}, max_memory_mb)
    return check_report(report, run.metrics_dir / "validation.json")


def train_rf(run: Run) -> dict:
    """Fit the run-time predictor (RandomForest or XGBoost), score it on a held-out split, save
    it to ``rf.model_dir``; metrics/train_rf.json and the importance plot."""
    from hybridsched.kinds.machine.engine import task_matrix
    from hybridsched.kinds.machine.runtime_model import save_model, train_runtime_model

    rf_cfg = run.cfg["rf"]
    cluster = _cluster(run)
    tasks = read_tasks(run.workload_dir / "train.parquet", max_memory_mb=cluster.max_task_memory_mb)
    model, metrics = train_runtime_model(task_matrix(tasks, cluster), cluster, rf_cfg)
    save_model(model, rf_cfg["model_dir"], {"workload": run.cfg["workload"]["name"], "metrics": without_timings(metrics)})
    files = write_importance_report(run.metrics_dir, metrics, f"{metrics['model']} run-time model: permutation importance")
    flavor = "xgboost" if metrics["model"] == "xgboost" else "sklearn"
    run.track("train_rf", metrics, [*files, Path(rf_cfg["model_dir"]) / "meta.json"], model=(flavor, model.estimator))
    mae = ", ".join(f"{k} {v:.3f} s" for k, v in metrics["mae_s"].items())
    print(f"train_rf: {metrics['model']} on {metrics['n_train']} tasks, held-out R² (log) {metrics['r2']}, MAE {mae}")
    if metrics.get("warning"):
        print(f"train_rf: warning: {metrics['warning']}")
    return metrics


def train_dqn(run: Run) -> dict:
    """Train the dueling DQN in the simulator on the training workload; ``dqn.model_dir``,
    metrics/train_dqn.json and the per-episode curve metrics/plots/train_dqn.csv."""
    from hybridsched.kinds.machine.dqn import DQNSettings, save_model  # torch
    from hybridsched.kinds.machine.dqn_train import train

    settings = DQNSettings.from_dict(run.cfg["dqn"])
    cluster = _cluster(run)
    tasks = read_tasks(run.workload_dir / "train.parquet", max_memory_mb=cluster.max_task_memory_mb)
    result = train(tasks, cluster, settings)
    with atomic_dir(run.cfg["dqn"]["model_dir"]) as tmp:
        save_model(tmp, result)
    curve = pd.DataFrame(result.history)
    last = result.history[-1]
    metrics = {
        "workload": run.cfg["workload"]["name"], "n_train": len(tasks), "episodes": settings.episodes,
        "decisions": settings.episodes * len(tasks), "grad_steps": result.learner.grad_steps,
        "target_updates": result.learner.target_updates, "wall_s": round(result.wall_s, 2),
        "n_state": result.spec.n_state, "n_actions": result.spec.n_actions,
        "final_mean_reward": last["mean_reward"], "best_mean_reward": float(curve["mean_reward"].max()),
        "final_loss": last["loss"], "final_epsilon": last["epsilon"],
        "final_train_mean_latency": last["mean_latency"], "final_train_makespan": last["makespan"],
        "time_scale_s": result.spec.time_scale, "energy_scale_j": result.spec.energy_scale,
    }
    write_json(run.metrics_dir / "train_dqn.json", without_timings(metrics))
    write_frame(run.metrics_dir / "plots" / "train_dqn.csv", curve.drop(columns=list(TIMING_KEYS & set(curve))).round(6))
    run.track("train_dqn", metrics, [run.metrics_dir / "train_dqn.json", run.metrics_dir / "plots" / "train_dqn.csv",
                                     Path(run.cfg["dqn"]["model_dir"]) / "meta.json"],
              model=("pytorch", result.learner.q, {"input_example": np.zeros((1, result.spec.n_state), np.float32)}))
    print(f"train_dqn: {metrics['episodes']} episodes on {metrics['n_train']} tasks in {metrics['wall_s']:.1f} s; "
          f"final mean reward {metrics['final_mean_reward']:.3f}, train mean latency {metrics['final_train_mean_latency']:.3f} s")
    return metrics


def train_cem(run: Run) -> dict:
    """Search the ``cem`` scorer's weights with the cross-entropy method on a mixture of
    workloads (``cem.machine``), from eft_rank's weights (``policies.machine.eft_rank``):
    ``cem.model_dir/model.json``, metrics/train_cem.json and the per-generation curve
    metrics/plots/train_cem.csv."""
    from hybridsched.kinds.machine.cem_train import MachineCEMSettings, model_from_theta, train_scorer
    from hybridsched.kinds.machine.policies.scorer import HIDDEN_INPUTS, LINEAR, MODEL_FILE, base_from_eft_rank
    from hybridsched.rl.cem import CEMSettings

    search = CEMSettings.from_dict(run.cfg["cem"])
    settings = MachineCEMSettings.from_dict(run.cfg["cem"].get("machine"))
    if settings.dispatch == "late":  # the late dispatcher cem_late (late_cem_train.py)
        from hybridsched.kinds.machine import late_cem_train as late
        from hybridsched.kinds.machine.policies import late_scorer

        specs = run.cfg["policies"]["machine"]
        if settings.late_base not in specs:
            raise HybridschedError(f"cem.machine.late_base: unknown machine policy {settings.late_base!r}")
        start = settings.late_base
        base0 = late_scorer.base_from_spec(specs[start])
        result, valid, selection = late.train_late_scorer(base0, search, settings, _cluster(run))
        model = {**late.model_from_theta(result.theta, base0, settings), "linear_terms": list(late_scorer.LINEAR),
                 "hidden_inputs": list(late_scorer.HIDDEN_INPUTS)}
    else:
        start = "eft_rank"
        base0 = base_from_eft_rank(with_tuned(run.cfg["policies"]["machine"]["eft_rank"]))
        result, valid, selection = train_scorer(base0, search, settings, _cluster(run))
        model = {**model_from_theta(result.theta, base0, settings), "linear_terms": list(LINEAR),
                 "hidden_inputs": list(HIDDEN_INPUTS)}
    model = {**model, "start": start, "start_weights": base0, "theta": result.theta.tolist(),
             "search": search.to_dict(), "machine": settings.to_dict()}
    with atomic_dir(run.cfg["cem"]["model_dir"]) as tmp:
        write_json(tmp / MODEL_FILE, model)
    curve = pd.DataFrame(result.history)
    first, last = result.history[0], result.history[-1]
    metrics = {"generations": search.generations, "population": search.population, "dim": int(result.theta.size),
               "scenarios_per_generation": settings.scenarios, "tasks_per_scenario": settings.tasks,
               "decisions": search.generations * (search.population + 1) * settings.scenarios * settings.tasks,
               "first_mean_cost": first["mean_cost"], "final_mean_cost": last["mean_cost"],
               "final_elite_cost": last["elite_cost"], "validation_cost": valid, **selection, "wall_s": round(result.wall_s, 2)}
    write_json(run.metrics_dir / "train_cem.json", without_timings(metrics))
    write_frame(run.metrics_dir / "plots" / "train_cem.csv", curve.drop(columns=list(TIMING_KEYS & set(curve))).round(6))
    run.track("train_cem", metrics, [run.metrics_dir / "train_cem.json", run.metrics_dir / "plots" / "train_cem.csv",
                                     Path(run.cfg["cem"]["model_dir"]) / MODEL_FILE])
    v = f"; validation cost {valid.get('cem', valid.get('cem_late')):.3f} ({start} 1.000)" if valid else ""
    print(f"train_cem: {search.generations} generations x {search.population} on {settings.scenarios} workloads "
          f"of {settings.tasks} tasks in {result.wall_s:.1f} s; mean cost {first['mean_cost']:.3f} -> "
          f"{last['mean_cost']:.3f} (latency / {start}'s){v}")
    return metrics


def tune(run: Run) -> dict:
    """Optuna search of a learned policy's hyper-parameters on a validation split of the
    training workload: ``paths.best_params``, metrics/tune.json and plots.  Under a multirun
    (Hydra's Optuna sweeper), evaluate just the configuration given and return its metrics."""
    import yaml

    from hybridsched.kinds.machine.tuning import TuneSettings, evaluate_config, run_study, save_plots, split_validation
    from hybridsched.plots import stage_plot_dir

    settings, cluster = TuneSettings.from_dict(run.cfg["tune"]), _cluster(run)
    train = read_tasks(run.workload_dir / "train.parquet", max_memory_mb=cluster.max_task_memory_mb)
    if run.in_memory:
        fit, val = split_validation(train, settings.validation_fraction)
        return evaluate_config(settings.target, run.cfg, fit, val, cluster, settings.seed, settings.dqn_episodes)
    summary = run_study(settings, run.cfg, train, cluster)
    header = f"# Written by the tune stage (study {summary['study']}); read when use_tuned=true.\n"
    write_text(run.path("best_params"), header + yaml.safe_dump(summary["tuned_config"], sort_keys=True))
    write_json(run.metrics_dir / "tune.json", without_timings({k: v for k, v in summary.items() if k != "tuned_config"}))
    pngs = save_plots(settings, summary["study"], stage_plot_dir(run.metrics_dir, "tune"))
    run.track("tune", {"best": summary["best"], "default": summary["default"] or {}}, [run.metrics_dir / "tune.json", *pngs])
    print(f"tune: {summary['n_complete']} trials, default {summary['default']} -> best {summary['best']}")
    return summary


def train_ppo(run: Run) -> dict[str, Any]:
    """``ppo_late``: sb3-contrib's MaskablePPO on the late-dispatch env over the ``cem.machine``
    mixture (kinds/machine/ppo_train.py), into ``train_ppo.model_dir``."""
    from hybridsched.kinds.machine import ppo_train

    return ppo_train.train_stage(run)


def policies_read(cfg: dict[str, Any]) -> dict[str, list[str]]:
    """Stage -> the ``policies.machine`` entries it builds under ``cfg``, for the stages that
    build only some (dvc.yaml lists just these as their params: :mod:`hybridsched.stage_params`)."""
    from hybridsched.kinds.machine.cem_train import MachineCEMSettings
    from hybridsched.kinds.machine.tuning import TARGETS

    t, late = cfg["tune"], cfg["train_late"]
    mix = MachineCEMSettings.from_dict(cfg["cem"].get("machine"))
    experts = [late[n]["expert"] for n in late["policies"] if "expert" in (late.get(n) or {})]
    return {"tune": ["hybrid_ml" if t["target"] in TARGETS else t["target"]],
            "tune_heuristics": sorted(t["spaces"]),
            "train_late": [late["base"], *experts],
            "train_cem": [mix.late_base if mix.dispatch == "late" else "eft_rank"]}


def train_late(run: Run) -> dict[str, Any]:
    """The learned late dispatchers of ``train_late.policies`` (kinds/machine/late_train.py),
    each from ``train_late.base``'s tuned weights on the ``cem.machine`` mixture's training
    stream: ``train_late.model_dir/<policy>/``, metrics/train_late.json and the curves
    metrics/plots/train_late.csv (cost ÷ the untuned or base heuristic's, per step)."""
    from hybridsched.kinds.machine.cem_train import MachineCEMSettings
    from hybridsched.kinds.machine.late_train import TRAINERS, train_one
    from hybridsched.parallel import run_parallel

    t = run.cfg["train_late"]
    specs = run.cfg["policies"]["machine"]
    unknown = [n for n in t["policies"] if n not in TRAINERS]
    if unknown:
        raise HybridschedError(f"train_late.policies: no trainer for {unknown}; known: {sorted(TRAINERS)}")
    if t["base"] not in specs:
        raise HybridschedError(f"train_late.base: unknown machine policy {t['base']!r}")
    base_spec = with_tuned(specs[t["base"]])
    settings = {name: dict(t.get(name) or {}) for name in t["policies"]}
    for name, values in settings.items():  # an imitated expert named by its policies.machine key
        if "expert" in values:
            if values["expert"] not in specs:
                raise HybridschedError(f"train_late.{name}.expert: unknown machine policy {values['expert']!r}")
            values["expert"] = with_tuned(specs[values["expert"]])
    mix, cluster = MachineCEMSettings.from_dict(run.cfg["cem"]["machine"]), _cluster(run)
    metrics: dict[str, Any] = {"base": t["base"], "policies": {}}
    curves = []
    with atomic_dir(Path(t["model_dir"])) as tmp:
        jobs = {name: (train_one, name, settings[name], base_spec, mix, cluster, tmp / name) for name in t["policies"]}
        # each trainer is seeded and single-threaded: running them side by side changes no number
        for name, out in run_parallel(jobs, int(t.get("workers", 1))).items():
            metrics["policies"][name] = {"validation": out["validation"], **{k: v for k, v in out["report"].items()
                                                                            if k in ("selected_iteration", "selected_generation",
                                                                                     "selection", "wall_s")}}
            curves += [{"policy": name, **row} for row in out["curve"]]
            print(f"train_late: {name}: validation cost {out['validation']}", flush=True)
    write_json(run.metrics_dir / "train_late.json", without_timings(metrics))
    write_frame(run.metrics_dir / "plots" / "train_late.csv", pd.DataFrame(curves, columns=["policy", "step", "cost"]).round(6))
    run.track("train_late", {n: v["validation"] for n, v in metrics["policies"].items() if v["validation"] is not None},
              [run.metrics_dir / "train_late.json", run.metrics_dir / "plots" / "train_late.csv"])
    return metrics


def _log_tuned(line: str) -> None:
    print(f"tune_heuristics: {line}", flush=True)


def _nested_tuned(node: Any, top: bool = True) -> set[Path]:
    """The ``tuned`` files a policy node's nested policies read (not the node's own)."""
    if isinstance(node, list):
        return set().union(*(_nested_tuned(v, False) for v in node))
    if not isinstance(node, dict):
        return set()
    found = {Path(node["tuned"])} if not top and node.get("tuned") else set()
    return found.union(*(_nested_tuned(v, False) for k, v in node.items() if k != "tuned"))


def _retarget(node: Any, moved: dict[Path, Path]) -> Any:
    """``node`` with every ``tuned`` path in ``moved`` replaced by where it is now."""
    if isinstance(node, list):
        return [_retarget(v, moved) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _retarget(v, moved) for k, v in node.items()}
    if out.get("tuned") and Path(out["tuned"]) in moved:
        out["tuned"] = str(moved[Path(out["tuned"])])
    return out


def tune_heuristics(run: Run) -> dict[str, Any]:
    """One Optuna study per policy of ``tune.spaces`` (``tune.heuristic_trials`` trials each,
    trial 0 the YAML's untuned values): each policy simulated on the validation part of the
    training split.  Writes ``paths.tuned/machine/<policy>.yaml`` (``params:``, read by the
    policy's ``tuned`` setting) and metrics/tune_heuristics.json (default and best objective,
    the tuned values).  A policy whose nested policy is tuned too (rollout_late's base) is tuned
    after it, with its tuned values."""
    import tempfile

    import yaml

    from hybridsched.kinds.machine.tuning import TuneSettings, tune_each
    from hybridsched.parallel import run_parallel

    t = run.cfg["tune"]
    settings, cluster = TuneSettings.from_dict(t), _cluster(run)
    names = sorted(settings.spaces)
    trials = int(t["heuristic_trials"])
    objective = settings.objectives[0]
    train = read_tasks(run.workload_dir / "train.parquet", max_memory_mb=cluster.max_task_memory_mb)
    own = {name: Path(run.path("tuned")) / "machine" / f"{name}.yaml" for name in names}
    needs = {name: {n for n, f in own.items() if f in _nested_tuned(run.cfg["policies"]["machine"][name])} for name in names}
    per: dict[str, dict[str, Any]] = {}
    with atomic_dir(run.path("tuned") / "machine") as tmp, \
            tempfile.TemporaryDirectory(prefix="tune-heuristics-") as work:  # a fresh study: same seed, same trials
        while len(per) < len(names):
            # the studies whose nested policies (rollout_late's base) are tuned, side by side, each
            # seeded and single-process (the same trials either way); they read the values written so far
            ready = [n for n in names if n not in per and needs[n] <= set(per)]
            if not ready:
                raise HybridschedError(f"tune.spaces: the tuned files of {sorted(set(names) - set(per))} depend on each other")
            cfg = {**run.cfg, "policies": {**run.cfg["policies"], "machine": _retarget(
                run.cfg["policies"]["machine"], {own[n]: tmp / f"{n}.yaml" for n in per})}}
            jobs = {name: (tune_each, cfg, train, cluster, [name], trials, Path(work), _log_tuned) for name in ready}
            for name, r in run_parallel(jobs, int(t.get("heuristic_workers", 1))).items():
                r = r[name]
                # ten significant digits: a sampler's last-bit noise never reaches the file (or what reads it)
                per[name] = {"default": r["default"][objective], "best": r["best"][objective],
                             "gain": round(1 - r["best"][objective] / r["default"][objective], 6),
                             "params": {k: float(f"{v:.10g}") if isinstance(v, float) else v for k, v in r["params"].items()}}
                header = (f"# Written by the tune_heuristics stage: the best of {trials} Optuna trials on the validation "
                          f"part of the training split ({objective} {per[name]['default']:.4g} -> {per[name]['best']:.4g}); "
                          f"read by policies.machine.{name}.tuned.\n")
                write_text(tmp / f"{name}.yaml", header + yaml.safe_dump({"params": per[name]["params"]}, sort_keys=True))
    per = {name: per[name] for name in names}
    metrics = {"objective": objective, "trials": trials, "seed": settings.seed,
               "validation_fraction": settings.validation_fraction, "policies": per}
    write_json(run.metrics_dir / "tune_heuristics.json", metrics)
    run.track("tune_heuristics", {f"{n}_{k}": v[k] for n, v in per.items() for k in ("default", "best")},
              [run.metrics_dir / "tune_heuristics.json"])
    return metrics


def simulate(run: Run) -> pd.DataFrame:
    """Run every chosen policy in its own dispatch mode (arrival, ordered or late) on the test
    workload with the same run-time noise: a ``<policy>.parquet`` trace each, ``dispatch.json``
    (policy -> mode) and ``lower_bound.json`` in ``paths.traces_dir``; returns the per-policy
    table with a ``dispatch`` column.  ``sim.dispatch`` filters by mode (``all``: every one)."""
    from hybridsched.kinds.machine.bound_memo import memo_lower_bound
    from hybridsched.kinds.machine.sim import simulate as run_policy

    cluster = _cluster(run)
    tasks = _tasks(run, "test", cluster)
    policies = select_dispatch(run.cfg["sim"], run.build_policies(), named=run.policy is not None)
    for policy in policies.values():  # trained models first: a broken one fails before the LP bound
        getattr(policy, "load", lambda: None)()
    realization = cluster.sample_noise(len(tasks), np.random.default_rng(int(run.cfg["sim"]["seed"])))
    traces, modes = {}, {name: dispatch_mode(p) for name, p in policies.items()}
    # the LP bound is solved in a second process while the policies run (the same numbers either
    # way), or reused from paths.bound_cache when this workload's bound was solved before
    with background(memo_lower_bound, tasks, cluster, realization, lp=lp_settings(run.cfg["sim"]),
                    folder=run.cfg["paths"].get("bound_cache")) as solving, \
            atomic_dir(run.traces_dir) as tmp:
        for name, policy in progress(policies.items(), desc="simulate", unit="policy"):
            traces[name] = run_policy(tasks, cluster, policy, realization, compiled=bool(run.cfg["sim"]["compiled"])).to_frame()
            write_frame(tmp / f"{name}.parquet", traces[name])
            print(f"simulate: {name:<16} {modes[name]:<8} makespan {traces[name]['end'].max() - tasks.arrival[0]:10.1f} s")
        bound = asdict(solving.result())
        print(f"simulate: lower bound on mean latency {bound['mean_latency']:.4f} s (solo {bound['mean_latency_solo']:.4f}, "
              f"LP {bound['mean_latency_lp']:.4f} in {bound['lp_solve_s']:.1f} s)")
        bound = without_timings(bound)
        write_json(tmp / "lower_bound.json", bound)
        write_json(tmp / DISPATCH_FILE, modes)
        table = _table(traces, cluster, bound, tasks, modes)
        # a trace whose metrics are not finite (a zero makespan) is refused before it is kept
        check_finite(table, run.traces_dir)
    run.track("simulate", {"lower_bound": bound, **table[["makespan", "mean_latency", "p95_latency", "energy_j"]].to_dict(orient="index")})
    return table.assign(workload=run.cfg["workload"]["name"])


HEADLINE = {"column": "mean_latency", "label": "mean latency (s)"}  # the evaluate stage ranks by it
DISPATCH_MODES = ("arrival", "ordered", "late")


def select_dispatch(sim: dict, policies: dict[str, Any], named: bool = False) -> dict[str, Any]:
    """The policies of ``sim.dispatch``'s mode (``all``: every one); a policy named by
    ``policy=NAME`` (``named``) runs whatever the filter.  One line when none is left."""
    mode = sim.get("dispatch", "all")
    if mode not in ("all", *DISPATCH_MODES):
        raise HybridschedError(f"sim.dispatch must be one of {['all', *DISPATCH_MODES]}, got {mode!r}")
    if named or mode == "all":
        return policies
    kept = {n: p for n, p in policies.items() if dispatch_mode(p) == mode}
    if not kept:
        raise HybridschedError(f"sim.dispatch={mode}: none of the chosen policies {sorted(policies)} dispatches {mode} "
                               f"(sim.dispatch=all runs every one in its own mode)")
    return kept


def lp_settings(sim: dict):  # -> LPSettings | None
    """The LP bound's grid from ``sim.bound_lp``, or None when it is off."""
    from hybridsched.kinds.machine.bounds_lp import LPSettings

    lp = dict(sim.get("bound_lp") or {"enabled": True})
    return LPSettings(**{k: v for k, v in lp.items() if k != "enabled"}) if lp.pop("enabled", True) else None


def _table(traces: dict[str, pd.DataFrame], cluster: Cluster, bound: dict, tasks: TaskTable,
           modes: dict[str, str]) -> pd.DataFrame:
    """The shared comparison over this kind's audited per-policy summaries, with each policy's
    dispatch mode first."""
    from hybridsched.errors import HybridschedError
    from hybridsched.kinds.machine.metrics import check_trace, summarize

    parents = {int(tasks.task_id[i]): tasks.task_id[tasks.parents(i)].tolist()
               for i in range(len(tasks)) if len(tasks.parents(i))}
    summaries = {}
    for name, tr in traces.items():
        problems = check_trace(tr, cluster, parents)
        if problems:
            raise HybridschedError(f"trace of policy {name!r} is invalid: {'; '.join(problems)}")
        summaries[name] = summarize(tr, cluster)
    return with_dispatch(compare(summaries, bound), modes)


def write_kind_plots(out: Path, traces: dict[str, pd.DataFrame], cluster: Cluster) -> list[Path]:
    """This kind's own plots in ``metrics/plots/kind``: a Gantt chart per policy of the same
    minute (the dashboard's view, for a window of each trace)."""
    from hybridsched.kinds.machine.gantt import plot_gantt

    kind_dir = out / "plots" / "kind"
    with atomic_dir(kind_dir) as tmp:
        plot_gantt(traces, tmp / "gantt.png", window_s=60.0, n_devices=cluster.n_devices)
    return sorted(kind_dir.glob("*.png"))


def evaluate(run: Run) -> pd.DataFrame:
    """metrics/summary.json, metrics/policies.csv, the plot tables and PNGs from the traces."""
    from hybridsched.evaluation import load_traces, utilisation_table

    cluster = _cluster(run)
    traces, bound = load_traces(run.traces_dir, order=list(run.cfg["policies"]["machine"]))
    modes = read_dispatch(run.traces_dir)
    tasks = read_tasks(run.workload_dir / "test.parquet")
    table = _table(traces, cluster, bound, tasks, modes)
    summary = {"workload": run.cfg["workload"]["name"], "kind": "machine", "n_tasks": len(tasks), "lower_bound": bound,
               "policies": table.round(6).to_dict(orient="index")}
    check_finite(table, run.metrics_dir / "summary.json", "policies")  # before any file of the report
    files = write_report(run.metrics_dir, summary, table, traces, utilisation_table(table, cluster.n_gpus))
    files += write_kind_plots(run.metrics_dir, traces, cluster)
    print(table[[c for c in EVALUATE_COLUMNS if c in table]].round(3).to_string())
    from hybridsched.headline import MainMetric, report  # only evaluate reads it: not a dep of every stage

    head_files, head = report(run, table, MainMetric(**HEADLINE), bound.get("mean_latency"))
    run.track("evaluate", {"lower_bound": bound, **summary["policies"]}, files + head_files, headline=head)
    return table


def scenarios(run: Run) -> dict[str, Any]:
    """The per-scenario report (``scenarios`` stage): every heuristic of both dispatch modes and the
    learned policies on ``scenarios.workloads``, the held-out draws and the load sweep, with the
    LP bound; metrics/scenarios.json, metrics/scenarios/, metrics/plots/scenarios.{csv,png}."""
    from hybridsched.kinds.machine.scenarios_late import ScenarioSettings, run_report

    s, specs = run.cfg["scenarios"], run.cfg["policies"]["machine"]
    metrics = run_report(s["workloads"], _cluster(run), specs, ScenarioSettings.from_dict(s, specs),
                         int(run.cfg["sim"]["seed"]), run.metrics_dir, run.metrics_dir / "plots",
                         bound_cache=run.cfg["paths"].get("bound_cache"))
    run.track("scenarios", {k: v for k, v in metrics.items() if isinstance(v, int | float)},
              [run.metrics_dir / "scenarios.json", run.metrics_dir / "scenarios" / "summary.md"])
    return metrics
