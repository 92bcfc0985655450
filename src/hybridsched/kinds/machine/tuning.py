"""Optuna search of the learned policies' hyper-parameters against the simulated objective.

A trial trains the target on the first part of the training workload (by arrival) and
simulates it on the rest, the *validation* workload, whose metrics are the objective:
``mean_latency`` by default, or several (e.g. ``[mean_latency, energy_j]``) for a Pareto
front. The untuned configuration is always trial 0, so the reported best is never worse
than the default on the validation workload.

Storage (``tune.storage``) is Optuna's journal file, safe for several processes on one
machine, or a database URL (``postgresql+psycopg://user:password@host:5432/db``) that
workers on many machines share: ``n_jobs`` worker processes (or several
``python -m stages.tune`` runs, on any machine that reaches the database) share one study,
and a rerun with the same settings resumes it instead of starting over (the study name is a
hash of everything that defines it).  The study stops at ``n_trials`` finished trials in
all, however many processes work on it.

Besides the two learned policies, any policy named in ``tune.spaces`` is a target: its
weights (float ranges ``[low, high]``, or ``{low, high, log}``) and settings (``{choices: [a,
b, ...]}``, e.g. a late heuristic's ``reserved_order``) are searched directly, with no
training, by simulating it on the validation workload (the heuristics of
``policies/weighted.py`` and ``policies/late.py`` are tuned this way before they are compared).
"""

from __future__ import annotations

import copy
import hashlib
import json
import tempfile
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hybridsched.devices import Cluster
from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.metrics import summarize
from hybridsched.kinds.machine.sim import simulate, task_matrix
from hybridsched.kinds.machine.workload import TaskTable

TARGETS = ("hybrid_ml", "dqn")  # learned targets; heuristic targets come from ``spaces``


@dataclass
class TuneSettings:
    """The ``tune`` config group."""

    target: str = "hybrid_ml"
    objectives: list[str] = field(default_factory=lambda: ["mean_latency"])
    n_trials: int = 12
    n_jobs: int = 1
    seed: int = 0
    validation_fraction: float = 0.3
    storage: str = "models/tune/study.journal"
    pruning: bool = True
    dqn_episodes: int = 8  # DQN trials train this many episodes (the full run uses dqn.episodes)
    spaces: dict[str, dict[str, Any]] = field(default_factory=dict)  # heuristic policy -> param ranges

    def __post_init__(self) -> None:
        if self.target not in TARGETS and self.target not in self.spaces:
            known = list(TARGETS) + sorted(self.spaces)
            raise HybridschedError(f"tune.target: unknown {self.target!r}; known: {known}")
        for name, space in self.spaces.items():
            for param, rng in space.items():
                _check_param(name, param, rng)
        if not 0 < self.validation_fraction < 1:
            raise HybridschedError(f"tune.validation_fraction must be in (0, 1), got {self.validation_fraction}")
        if self.n_trials < 1 or self.n_jobs < 1:
            raise HybridschedError("tune.n_trials and tune.n_jobs must be >= 1")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TuneSettings:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: (list(v) if k == "objectives" else v) for k, v in d.items() if k in names})


# --- search spaces: each returns overrides shaped like the config ----------------------


def _range(name: str, param: str, rng: Any) -> tuple[float, float, bool]:
    """(low, high, log) of one heuristic parameter's search range; a clear error otherwise."""
    if isinstance(rng, dict):
        if set(rng) - {"low", "high", "log", "int"}:
            raise HybridschedError(f"tune.spaces.{name}.{param}: unknown key(s) {sorted(set(rng) - {'low', 'high', 'log', 'int'})} "
                                   f"in {rng!r}")
        low, high, log = rng.get("low"), rng.get("high"), bool(rng.get("log", False))
    elif isinstance(rng, list | tuple) and len(rng) == 2:
        (low, high), log = rng, False
    else:
        raise HybridschedError(f"tune.spaces.{name}.{param}: expected [low, high], {{low, high, log}} or "
                               f"{{choices: [...]}}, got {rng!r}")
    try:
        low, high = float(low), float(high)
    except (TypeError, ValueError):
        raise HybridschedError(f"tune.spaces.{name}.{param}: low and high must be numbers, got {rng!r}") from None
    if not low <= high or (log and low <= 0):
        raise HybridschedError(f"tune.spaces.{name}.{param}: need low <= high (and low > 0 with log), got {rng!r}")
    return low, high, log


def _choices(name: str, param: str, rng: Any) -> list[str] | None:
    """The options of a categorical parameter (``{choices: [a, b, ...]}``), None for a range."""
    if not (isinstance(rng, dict) and "choices" in rng):
        return None
    opts = rng["choices"]
    if (not isinstance(opts, list | tuple) or not opts or len(set(map(str, opts))) != len(opts)
            or not all(isinstance(o, str) for o in opts) or set(rng) != {"choices"}):
        raise HybridschedError(f"tune.spaces.{name}.{param}: choices must be a non-empty list of distinct names "
                               f"(and nothing else), got {rng!r}")
    return list(opts)


def _check_param(name: str, param: str, rng: Any) -> None:
    """A search-space entry is a range or a list of choices; one clear line otherwise."""
    if _choices(name, param, rng) is None:
        _range(name, param, rng)


def suggest(trial: Any, target: str, cfg: dict[str, Any], spaces: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Sample one configuration; the result mirrors the config's keys (rf / dqn / policies)."""
    if spaces and target in spaces:
        params = {}
        for param, rng in spaces[target].items():
            opts = _choices(target, param, rng)
            if opts is not None:
                params[param] = trial.suggest_categorical(param, opts)
                continue
            low, high, log = _range(target, param, rng)
            if isinstance(rng, dict) and rng.get("int"):  # a count, e.g. rollout_late's candidates
                params[param] = trial.suggest_int(param, int(low), int(high), log=log)
            else:
                params[param] = trial.suggest_float(param, low, high, log=log)
        return {"policies": {"machine": {target: params}}}
    if target == "hybrid_ml":
        kind = cfg["rf"].get("model", "random_forest")
        if kind == "xgboost":
            est = {"n_estimators": trial.suggest_int("n_estimators", 30, 300, log=True),
                   "max_depth": trial.suggest_int("max_depth", 2, 10),
                   "learning_rate": trial.suggest_float("learning_rate", 0.02, 0.3, log=True),
                   "subsample": trial.suggest_float("subsample", 0.5, 1.0)}
        else:
            est = {"n_estimators": trial.suggest_int("n_estimators", 10, 120, log=True),
                   "max_depth": trial.suggest_int("max_depth", 4, 20),
                   "min_samples_leaf": trial.suggest_int("min_samples_leaf", 1, 10),
                   "max_features": trial.suggest_float("max_features", 0.3, 1.0)}
        policy = {"retrain_every": trial.suggest_int("retrain_every", 10, 200, log=True),
                  "window": trial.suggest_int("window", 100, 3000, log=True)}
        return {"rf": {kind: est}, "policies": {"machine": {"hybrid_ml": policy}}}
    return {"dqn": {"learning_rate": trial.suggest_float("learning_rate", 1e-4, 3e-3, log=True),
                    "gamma": trial.suggest_float("gamma", 0.5, 0.99),
                    "exploration_fraction": trial.suggest_float("exploration_fraction", 0.1, 0.6),
                    "end_e": trial.suggest_float("end_e", 0.01, 0.1, log=True),
                    "hidden": trial.suggest_categorical("hidden", [32, 64, 128])}}


def defaults_of(target: str, cfg: dict[str, Any], spaces: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The untuned values of the search space's parameters (enqueued as trial 0)."""
    from hybridsched.kinds.base import class_defaults

    if spaces and target in spaces:
        pol = _policy_node(cfg, target)
        out: dict[str, Any] = {}
        for k, rng in spaces[target].items():
            opts = _choices(target, k, rng)
            if opts is None:
                # the YAML's value, else the class's default where it lies in the range
                value = pol.get(k, class_defaults(pol.get("_target_")).get(k))
                low, high, _ = _range(target, k, rng)
                if isinstance(value, int | float) and (k in pol or low <= value <= high):
                    out[k] = int(value) if isinstance(rng, dict) and rng.get("int") else float(value)
            else:  # a setting the YAML leaves out: trial 0 takes the first option (the untuned one)
                value = pol.get(k, opts[0])
                if value not in opts:
                    raise HybridschedError(f"tune.spaces.{target}.{k}: the policy's {k} {value!r} is not one of "
                                           f"the choices {opts}")
                out[k] = value
        return out
    if target == "hybrid_ml":
        kind = cfg["rf"].get("model", "random_forest")
        keys = (["n_estimators", "max_depth", "learning_rate", "subsample"] if kind == "xgboost"
                else ["n_estimators", "max_depth", "min_samples_leaf", "max_features"])
        out = {k: cfg["rf"][kind][k] for k in keys}
        pol = cfg["policies"]["machine"]["hybrid_ml"]
        return {**out, "retrain_every": pol["retrain_every"], "window": pol["window"]}
    keys = ["learning_rate", "gamma", "exploration_fraction", "end_e", "hidden"]
    return {k: cfg["dqn"][k] for k in keys}


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Deep merge of plain dicts (``over`` wins)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


# --- evaluation of one configuration ---------------------------------------------------


def split_validation(tasks: TaskTable, fraction: float) -> tuple[TaskTable, TaskTable]:
    """(fit part, validation part) by arrival order."""
    n_val = max(1, int(round(len(tasks) * fraction)))
    if len(tasks) - n_val < 10:
        raise HybridschedError(f"tune: {len(tasks)} training tasks are too few to hold out {fraction:.0%}")
    rows = np.arange(len(tasks))
    return tasks.subset(rows[:-n_val]), tasks.subset(rows[-n_val:])


def _policy_node(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """The config node of policy ``name`` (``policies.machine.<name>``)."""
    node = ((cfg.get("policies") or {}).get("machine") or {}).get(name)
    if not isinstance(node, dict) or "_target_" not in node:
        raise HybridschedError(f"policies.machine.{name}: no policy config with a _target_ to tune")
    return node


def evaluate_config(target: str, cfg: dict[str, Any], fit: TaskTable, val: TaskTable, cluster: Cluster,
                    seed: int, dqn_episodes: int = 8, on_episode=None) -> dict[str, float]:
    """Train ``target`` with ``cfg`` on ``fit`` and return its metrics on ``val`` (a heuristic
    target, one not in TARGETS, is built from ``policies.<target>`` and only simulated)."""
    real = cluster.sample_noise(len(val), np.random.default_rng(seed))
    if target not in TARGETS:
        from hybridsched.kinds.base import TUNED_KEY, instantiate

        # the trial's own values, never an earlier study's (the node's ``tuned`` file); a nested
        # policy (rollout_late's base) keeps its tuned values
        policy = instantiate({k: v for k, v in _policy_node(cfg, target).items() if k != TUNED_KEY})
    elif target == "hybrid_ml":
        from hybridsched.kinds.machine.runtime_model import train_runtime_model
        from hybridsched.kinds.machine.policies.hybrid_ml import HybridML

        rf_cfg = {**cfg["rf"], "importance_repeats": 0}
        model, _ = train_runtime_model(task_matrix(fit, cluster), cluster, rf_cfg)
        pol_cfg = {k: v for k, v in cfg["policies"]["machine"]["hybrid_ml"].items() if k not in ("_target_", "model_dir")}
        policy = HybridML(model=model, **pol_cfg)
    else:
        from hybridsched.kinds.machine.dqn import DQNSettings, save_model
        from hybridsched.kinds.machine.dqn_train import train
        from hybridsched.kinds.machine.policies.dqn import DQNPolicy

        settings = DQNSettings.from_dict({**cfg["dqn"], "episodes": dqn_episodes, "seed": seed})
        result = train(fit, cluster, settings, on_episode=on_episode)
        with tempfile.TemporaryDirectory(prefix="tune-dqn-") as tmp:  # the policy loads it in simulate
            save_model(tmp, result)
            trace = simulate(val, cluster, DQNPolicy(model_dir=tmp), real).to_frame()
        return summarize(trace, cluster)
    trace = simulate(val, cluster, policy, real).to_frame()
    return summarize(trace, cluster)


# --- the study ---------------------------------------------------------------------------


def study_name(settings: TuneSettings, cfg: dict[str, Any], tasks: TaskTable) -> str:
    """Same settings, same data, same search space -> same study (so reruns resume)."""
    from hybridsched.kinds.machine.runtime_model import recorded_config

    data = hashlib.sha1()
    for a in (tasks.task_id, tasks.arrival, tasks.size, tasks.intensity, tasks.memory_mb, tasks.parent_idx):
        data.update(np.ascontiguousarray(a).tobytes())
    key = json.dumps({"s": {k: v for k, v in vars(settings).items() if k not in ("n_trials", "n_jobs", "storage")},
                      "rf": recorded_config(cfg.get("rf") or {}, len(tasks)), "dqn": cfg.get("dqn"), "cluster": cfg.get("cluster"),
                      "policy": cfg.get("policies", {}).get("machine", {}).get(
                          "hybrid_ml" if settings.target in TARGETS else settings.target),
                      "data": data.hexdigest()},
                     sort_keys=True, default=str)
    return f"{settings.target}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"


def _storage(path: str):
    """A journal file for a path; an RDB storage for a URL (``scheme://...``)."""
    import optuna

    if "://" in path:
        # pre-ping: a worker's pooled connection may have been closed by the server between trials
        return optuna.storages.RDBStorage(path, engine_kwargs={"pool_pre_ping": True})
    from optuna.storages.journal import JournalFileBackend

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(str(path)))


def _objective_values(metrics: dict[str, float], objectives: list[str]) -> list[float]:
    missing = [o for o in objectives if o not in metrics]
    if missing:
        raise HybridschedError(f"tune.objectives: unknown metric(s) {missing}; known: {sorted(metrics)}")
    return [float(metrics[o]) for o in objectives]


def _worker(settings: TuneSettings, cfg: dict[str, Any], fit: TaskTable, val: TaskTable, cluster: Cluster,
            name: str, n_trials: int, worker: int) -> None:
    """Run ``n_trials`` trials of the shared study (one process of a parallel study)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    multi = len(settings.objectives) > 1
    pruner = optuna.pruners.MedianPruner(n_startup_trials=3) if settings.pruning and not multi else None
    study = optuna.load_study(study_name=name, storage=_storage(settings.storage),
                              sampler=optuna.samplers.TPESampler(seed=settings.seed + worker), pruner=pruner)

    def objective(trial):
        trial_cfg = merge(cfg, suggest(trial, settings.target, cfg, settings.spaces))

        def on_episode(stats: dict[str, float]) -> None:  # DQN: prune hopeless trials early
            if pruner is not None and "mean_latency" in stats:
                trial.report(stats["mean_latency"], int(stats.get("episode", 0)))
                if trial.should_prune():
                    raise optuna.TrialPruned()

        m = evaluate_config(settings.target, trial_cfg, fit, val, cluster, settings.seed, settings.dqn_episodes,
                            on_episode if settings.target == "dqn" else None)
        for k in ("energy_j", "makespan", "p95_latency"):
            trial.set_user_attr(k, m[k])
        values = _objective_values(m, settings.objectives)
        return values if multi else values[0]

    # the global cap: workers on other machines may have finished trials meanwhile; a bar
    # only on a terminal (DVC logs and CI stay quiet)
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    study.optimize(objective, n_trials=n_trials, show_progress_bar=sys.stderr.isatty(),
                   callbacks=[optuna.study.MaxTrialsCallback(settings.n_trials, states=done)])


def run_study(settings: TuneSettings, cfg: dict[str, Any], train: TaskTable, cluster: Cluster) -> dict[str, Any]:
    """Create or resume the study, run the missing trials (in ``n_jobs`` processes), and
    return the summary: best parameters shaped like the config, values, front, timings."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    fit, val = split_validation(train, settings.validation_fraction)
    name = study_name(settings, cfg, train)
    storage = _storage(settings.storage)
    directions = ["minimize"] * len(settings.objectives)
    # created once here, before any worker starts (no creation race)
    study = optuna.create_study(study_name=name, storage=storage, directions=directions, load_if_exists=True)
    if not study.trials:
        study.enqueue_trial(defaults_of(settings.target, cfg, settings.spaces), user_attrs={"default": True})
    done = sum(t.state.is_finished() for t in study.trials)
    todo = max(0, settings.n_trials - done)
    t0 = time.perf_counter()
    if todo and settings.n_jobs == 1:
        _worker(settings, cfg, fit, val, cluster, name, todo, 0)
    elif todo:
        shares = [todo // settings.n_jobs + (k < todo % settings.n_jobs) for k in range(settings.n_jobs)]
        with ProcessPoolExecutor(max_workers=settings.n_jobs) as pool:
            futures = [pool.submit(_worker, settings, cfg, fit, val, cluster, name, n, k)
                       for k, n in enumerate(shares) if n]
            for f in futures:
                f.result()
    wall = time.perf_counter() - t0
    study = optuna.load_study(study_name=name, storage=storage)
    return summarize_study(study, settings, cfg, wall)


def tune_each(cfg: dict[str, Any], train: TaskTable, cluster: Cluster, names: list[str], trials: int,
              work: Path, log=None) -> dict[str, Any]:
    """One study of ``trials`` per heuristic of ``names`` (each needs a ``tune.spaces`` entry),
    journals under ``work``; name -> best params, and the default's (trial 0) and best objectives."""
    missing = [n for n in names if n not in cfg["tune"]["spaces"]]
    if missing:
        raise HybridschedError(f"tune: no search space tune.spaces.<name> for {missing}; "
                               f"known: {sorted(cfg['tune']['spaces'])}")
    tuned = {}
    for name in names:
        s = TuneSettings.from_dict({**cfg["tune"], "target": name, "n_trials": trials, "n_jobs": 1,
                                    "storage": str(Path(work) / f"{name}.journal")})
        r = run_study(s, cfg, train, cluster)
        tuned[name] = {"params": r["best_params"], "default": r["default"], "best": r["best"]}
        if log is not None:
            log(f"{name}: {r['default']} -> {r['best']} {r['best_params']}")
    return tuned


def summarize_study(study: Any, settings: TuneSettings, cfg: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """Best parameters (config-shaped), default vs best objective values, Pareto front."""
    import optuna

    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        raise HybridschedError(f"tune: study {study.study_name} has no completed trial")
    default = next((t for t in complete if t.user_attrs.get("default")), None)
    front = study.best_trials
    if len(settings.objectives) == 1:
        best = min(complete, key=lambda t: t.values[0])
    else:  # the front's trial with the best equally weighted, default-normalised sum
        ref = np.array(default.values if default else front[0].values)
        best = min(front, key=lambda t: float(np.sum(np.array(t.values) / ref)))
    trial_cfg = _params_to_config(best.params, settings.target, cfg)
    return {
        "study": study.study_name,
        "target": settings.target,
        "objectives": settings.objectives,
        "n_trials": len(study.trials),
        "n_complete": len(complete),
        "n_pruned": sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials),
        "wall_s": round(wall_s, 2),
        "default": dict(zip(settings.objectives, default.values)) if default else None,
        "best": dict(zip(settings.objectives, best.values)),
        "best_trial": best.number,
        "best_params": best.params,
        "improvement": ({o: 1 - b / d for o, b, d in zip(settings.objectives, best.values, default.values)}
                        if default else None),
        "pareto_front": [{"trial": t.number, **dict(zip(settings.objectives, t.values))} for t in front],
        "tuned_config": trial_cfg,
    }


def _params_to_config(params: dict[str, Any], target: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Re-shape a trial's flat params into config keys (the inverse of ``suggest``)."""
    if target not in TARGETS:
        return {"policies": {"machine": {target: dict(params)}}}
    if target == "hybrid_ml":
        kind = cfg["rf"].get("model", "random_forest")
        pol = {k: params[k] for k in ("retrain_every", "window")}
        est = {k: v for k, v in params.items() if k not in pol}
        return {"rf": {kind: est}, "policies": {"machine": {"hybrid_ml": pol}}}
    return {"dqn": dict(params)}


def save_plots(settings: TuneSettings, name: str, out: Path) -> list[Path]:
    """The folder ``out`` with the study's optimisation history (``tune_history.png``) and, with
    3+ trials, its parameter importances (``tune_importance.png``); returns the written PNGs."""
    import warnings

    import optuna
    from optuna.visualization import matplotlib as ovm

    from hybridsched.io import atomic_dir
    from hybridsched.plots import save_axes

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    study = optuna.load_study(study_name=name, storage=_storage(settings.storage))
    target = None if len(settings.objectives) == 1 else (lambda t: t.values[0])
    with atomic_dir(out) as tmp:
        save_axes(ovm.plot_optimization_history(study, target=target, target_name=settings.objectives[0]),
                  tmp / "tune_history.png")
        if len(study.trials) > 2:  # importances need 3+ trials; with fewer there is no such chart
            save_axes(ovm.plot_param_importances(study, target=target), tmp / "tune_importance.png")
    return sorted(Path(out).glob("*.png"))
