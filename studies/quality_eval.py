"""Every machine policy against the solo and LP bounds, per workload and on held-out draws.

Per workload (a Hydra override list, composed from conf/): generate the splits, train the
run-time model and the DQN on the training split, tune each heuristic of ``tune.spaces``
with the project's Optuna study on the training split, then simulate every policy on the
test split (one noise seed) and solve the bounds. Held-out draws
(``scenarios.heldout_workloads``, their own seed) reuse the default workload's trained
models and tuned weights unchanged.

    python -m studies.quality_eval --out studies-out/quality      # all, ~20-40 min on 2 cores
    python -m studies.quality_eval --workloads default --heldout 0 --trials 10
    python -m studies.quality_eval --trials 0 --no-learned --no-lp      # heuristics + cem, no LP
    python -m studies.quality_eval --trials 0 --learned-from models --lp-rho 1   # the pipeline's models, unchanged

The ``cem`` scorer is trained once on a workload mixture (stage train_cem) and is evaluated
unchanged everywhere, from ``--cem-model`` (default models/cem); ``<out>/cem_actions.csv``
says how it splits work by task intensity against eft_rank's.

Writes ``<out>/<workload>.csv``, ``<out>/tuned_<workloads>.json`` and ``<out>/quality.md`` (over
every csv in ``<out>``, so runs of separate workloads add up).
"""

from __future__ import annotations

import argparse
import atexit
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybridsched.errors import HybridschedError
from hybridsched.io import write_frame, write_json, write_text
from hybridsched.kinds.base import instantiate
from hybridsched.kinds.machine.bounds_lp import LPSettings
from hybridsched.devices import Cluster, cluster_from_config
from hybridsched.kinds.machine.engine import task_matrix
from hybridsched.kinds.machine.scenarios import evaluate_workload, heldout_workloads
from hybridsched.kinds.machine.tuning import merge, tune_each
from hybridsched.kinds.machine.workload import WorkloadSpec, generate, generate_splits

WORKLOADS = {"default": [], "shifted": ["workload=shifted"], "bursty": ["workload=bursty"], "dag": ["workload=dag"],
             "rate8": ["workload.rate=8"]}
HEURISTICS = ("eft", "oracle", "round_robin", "random", "greedy")
LEARNED = ("hybrid_ml", "hybrid_ml_static", "dqn")


def compose(overrides: list[str]) -> dict[str, Any]:
    """The resolved config of conf/ with ``overrides``."""
    from hydra import compose as hcompose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with initialize_config_dir(version_base=None, config_dir=conf):
        return OmegaConf.to_container(hcompose("config", overrides=["tracking.enabled=false", *overrides]), resolve=True)


def train_models(cfg: dict[str, Any], train, cluster: Cluster, work: Path, episodes: int | None) -> dict[str, Any]:
    """Factories of the learned policies, trained on ``train``."""
    from hybridsched.kinds.machine.policies.dqn import DQNPolicy
    from hybridsched.kinds.machine.policies.hybrid_ml import HybridML
    from hybridsched.kinds.machine.runtime_model import train_runtime_model
    from hybridsched.kinds.machine.dqn import DQNSettings, save_model
    from hybridsched.kinds.machine.dqn_train import train as train_dqn

    model, _ = train_runtime_model(task_matrix(train, cluster), cluster, {**cfg["rf"], "importance_repeats": 0})
    dqn_dir = work / "dqn"
    dqn_cfg = {**cfg["dqn"], **({"episodes": episodes} if episodes else {})}
    save_model(dqn_dir, train_dqn(train, cluster, DQNSettings.from_dict(dqn_cfg)))

    def hml(name: str):
        kw = {k: v for k, v in cfg["policies"]["machine"][name].items() if k not in ("_target_", "model_dir")}
        return lambda: HybridML(model=model, **kw)

    return {"hybrid_ml": hml("hybrid_ml"), "hybrid_ml_static": hml("hybrid_ml_static"),
            "dqn": lambda: DQNPolicy(model_dir=str(dqn_dir))}


def pipeline_models(cfg: dict[str, Any], models: Path) -> dict[str, Any]:
    """Factories of the learned policies from the pipeline's trained models (``<models>/rf``,
    ``<models>/dqn``, trained on the default workload), evaluated unchanged on every workload."""
    for sub in ("rf", "dqn"):
        if not (models / sub).is_dir():
            raise HybridschedError(f"--learned-from: no trained model at {models / sub} (run train_rf and train_dqn)")
    dirs = {"hybrid_ml": "rf", "hybrid_ml_static": "rf", "hybrid_ml_own": "rf", "dqn": "dqn", "dqn_online": "dqn"}
    specs = {name: {**cfg["policies"]["machine"][name], "model_dir": str(models / sub)} for name, sub in dirs.items()}
    return {name: (lambda spec=spec: instantiate(spec)) for name, spec in specs.items()}


def tune_heuristics(cfg: dict[str, Any], train, cluster: Cluster, trials: int, work: Path) -> dict[str, Any]:
    """Tuned weights of each heuristic in ``tune.spaces`` (the project's Optuna study)."""
    return tune_each(cfg, train, cluster, list(cfg["tune"]["spaces"]), trials, work)


def factories(cfg: dict[str, Any], tuned: dict[str, Any], learned: dict[str, Any]) -> dict[str, Any]:
    """Name -> factory for every policy: classic, tuned heuristics (and their defaults), learned."""
    out = {n: (lambda n=n: instantiate(cfg["policies"]["machine"][n])) for n in HEURISTICS}
    for name, t in tuned.items():
        out[f"{name}_default"] = lambda name=name: instantiate(cfg["policies"]["machine"][name])
        spec = merge(cfg["policies"]["machine"][name], t["params"])
        out[name] = lambda spec=spec: instantiate(spec)
    return {**out, **learned}


def cem_factory(model_dir: str):
    """The trained cem scorer, unchanged on every workload."""
    from hybridsched.kinds.machine.policies.scorer import CEMScorer

    return lambda: CEMScorer(model_dir=model_dir)


def action_frequencies(tasks, cluster: Cluster, pols: dict[str, Any], seed: int, names=("eft_rank", "cem")) -> pd.DataFrame:
    """Mean share of each task run on the CPU (1 - f), by task-intensity bin, per policy."""
    from hybridsched.kinds.machine.sim import simulate

    real = cluster.sample_noise(len(tasks), np.random.default_rng(seed))
    bins = pd.cut(tasks.intensity, np.linspace(0, 1, 6), include_lowest=True)
    cols = {}
    for name in names:
        if name in pols:
            tr = simulate(tasks, cluster, pols[name](), real)
            cols[name] = pd.Series(1.0 - tr.fraction).groupby(bins, observed=False).mean()
    return pd.DataFrame(cols).assign(n_tasks=pd.Series(1, index=range(len(tasks))).groupby(bins, observed=False).sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--heldout", type=int, default=5, help="held-out draws (0 = none)")
    ap.add_argument("--heldout-tasks", type=int, default=3000)
    ap.add_argument("--trials", type=int, default=30, help="Optuna trials per heuristic (0: the YAML weights)")
    ap.add_argument("--dqn-episodes", type=int, default=None, help="default: dqn.episodes of the config")
    ap.add_argument("--no-learned", action="store_true", help="heuristics and bounds only (no training)")
    ap.add_argument("--no-lp", action="store_true", help="solo bound only (the LP takes minutes per workload)")
    ap.add_argument("--lp-rho", type=float, default=None, help="LP grid (sim.bound_lp.rho; smaller = coarser, faster, looser)")
    ap.add_argument("--lp-delta", type=float, default=None, help="LP base interval (s; sim.bound_lp.delta)")
    ap.add_argument("--learned-from", default=None, metavar="DIR",
                    help="evaluate the pipeline's trained models (DIR/rf, DIR/dqn; e.g. models) unchanged on every "
                         "workload, instead of training hybrid_ml and dqn per workload")
    ap.add_argument("--cem-model", default="models/cem", help="the trained cem scorer (stage train_cem)")
    ap.add_argument("--only", default=None, help="comma-separated policy names to run (default: all)")
    ap.add_argument("--out", default="studies-out/quality")
    args = ap.parse_args()
    out = Path(args.out)
    lp = lp_grid(args)
    tables, all_tuned = {}, {}
    default_kit = None
    actions = []
    for wname in [w for w in args.workloads.split(",") if w]:
        t0 = time.perf_counter()
        cfg = compose(WORKLOADS[wname])
        cluster = cluster_from_config(cfg["cluster"])
        train, test = generate_splits(cfg["workload"], cpu_gflops=cluster.cpu_gflops)
        work = Path(tempfile.mkdtemp(prefix=f"quality-{wname}-"))
        atexit.register(shutil.rmtree, work, ignore_errors=True)  # studies and models trained here: not kept
        tuned = tune_heuristics(cfg, train, cluster, args.trials, work) if args.trials else {}
        if not tuned:  # no tuning here: the weights in the YAMLs (tuned on the default workload)
            tuned = {n: {"params": {}} for n in cfg["tune"]["spaces"]}
        if args.learned_from:
            learned = pipeline_models(cfg, Path(args.learned_from))
        else:
            learned = {} if args.no_learned else train_models(cfg, train, cluster, work, args.dqn_episodes)
        pols = only(args, {**factories(cfg, tuned, learned), "cem": cem_factory(args.cem_model)})
        table = evaluate_workload(test, cluster, pols, int(cfg["sim"]["seed"]), lp=lp)
        actions.append(action_frequencies(test, cluster, pols, int(cfg["sim"]["seed"])).assign(workload=wname))
        tables[wname], all_tuned[wname] = table.assign(workload=wname), tuned
        write_frame(out / f"{wname}.csv", tables[wname])
        print(f"{wname}: {time.perf_counter() - t0:.0f} s, LP {table['lp_solve_s'].iloc[0]:.1f} s")
        print(table[["policy", "mean_latency", "p99_latency", "vs_bound"]].round(3).to_string(index=False))
        if wname == "default":
            default_kit = (cfg, cluster, pols)
    if args.heldout:
        if default_kit is None:  # held-out draws without the default workload in this run: its tuned YAML weights
            cfg = compose([])
            cluster = cluster_from_config(cfg["cluster"])
            yaml_tuned = {n: (lambda n=n: instantiate(cfg["policies"]["machine"][n])) for n in cfg["tune"]["spaces"]}
            learned = pipeline_models(cfg, Path(args.learned_from)) if args.learned_from else {}
            default_kit = (cfg, cluster, {**factories(cfg, {}, learned), **yaml_tuned, "cem": cem_factory(args.cem_model)})
        cfg, cluster, pols = default_kit
        pols = only(args, pols)
        for k, w in enumerate(heldout_workloads(args.heldout, cluster)):
            spec = heldout_spec(w)
            tasks = generate(spec, args.heldout_tasks, np.random.default_rng(k), cpu_gflops=cluster.cpu_gflops)
            table = evaluate_workload(tasks, cluster, pols, k, lp=lp).assign(workload=w["name"], offered_load=w["offered_load"])
            tables[w["name"]] = table
            write_frame(out / f"{w['name']}.csv", table)
            print(f"{w['name']} (load {w['offered_load']:.2f}):")
            print(table[["policy", "mean_latency", "vs_bound"]].round(3).to_string(index=False))
        write_json(out / "heldout_workloads.json", heldout_workloads(args.heldout, cluster))
    if actions:
        write_frame(out / "cem_actions.csv", pd.concat(actions).rename_axis("intensity").reset_index().astype({"intensity": str}))
    write_json(out / f"tuned_{args.workloads.replace(',', '_')}.json", all_tuned)
    # every table in the folder, so separate runs (e.g. one per workload) add up to one summary
    tables = {p.stem: pd.read_csv(p) for p in sorted(out.glob("*.csv")) if p.stem != "cem_actions"}
    write_text(out / "quality.md", summary_markdown(tables))


def only(args: argparse.Namespace, pols: dict[str, Any]) -> dict[str, Any]:
    """The policies named by ``--only`` (all without it); an unknown name is an error."""
    if not args.only:
        return pols
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(pols))
    if unknown:
        raise HybridschedError(f"--only: unknown policies {unknown}; known: {sorted(pols)}")
    return {n: pols[n] for n in names}


def heldout_spec(draw: dict[str, Any]) -> WorkloadSpec:
    """The WorkloadSpec of one held-out draw (``scenarios.heldout_workloads``)."""
    return WorkloadSpec(**{key: v for key, v in draw.items() if key not in ("name", "offered_load")})


def lp_grid(args: argparse.Namespace) -> LPSettings | bool:
    """The LP bound's grid from the command line: False (no LP), or LPSettings (default grid unless overridden)."""
    if args.no_lp:
        return False
    base = LPSettings()
    return LPSettings(delta=args.lp_delta if args.lp_delta is not None else base.delta,
                      rho=args.lp_rho if args.lp_rho is not None else base.rho, max_levels=base.max_levels)


def summary_markdown(tables: dict[str, pd.DataFrame]) -> str:
    """Mean latency per policy and workload, and the bounds."""
    wide = pd.DataFrame({w: t.set_index("policy")["mean_latency"] for w, t in tables.items()})
    bounds = pd.DataFrame({w: {"bound (solo)": t["bound_solo"].iloc[0], "bound (LP)": t["bound_lp"].iloc[0]}
                           for w, t in tables.items()})
    return "Mean latency (s)\n\n" + pd.concat([wide, bounds]).to_markdown(floatfmt=".3g") + "\n"


if __name__ == "__main__":
    main()
