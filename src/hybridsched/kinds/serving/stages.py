"""The eight stage functions of the serving kind (kinds/base.py documents the interface).

Outputs use the same declared names as every kind: the profile table goes to
``serving.profile_path`` (default ``cluster.profile_path``), requests to data/workload/, the
predictor to ``serving.predictor.model_dir`` (models/rf), the dispatcher to
``serving.dqn.model_dir`` (models/dqn), traces to data/traces/, reports to metrics/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybridsched.errors import DataValidationError, HybridschedError
from hybridsched.io import TIMING_KEYS, atomic_dir, without_timings, write_frame, write_json, write_text
from hybridsched.kinds.base import Run, instantiate
from hybridsched.kinds.serving.settings import ServingSettings, settings_of
from hybridsched.kinds.serving.predictor import fit_predictor as _fit_predictor, pred_table as _pred_table
from hybridsched.kinds.serving.settings import config_block as _block
from hybridsched.evaluation import compare, write_report

BASELINE = "fifo"  # the speed-up columns are over this policy
HEADLINE = {"column": "slo_attainment", "label": "SLO attainment", "higher_is_better": True}  # evaluate ranks by it

SPLITS = ("train", "test")


def _tables(run: Run, s: ServingSettings) -> tuple[np.ndarray, pd.DataFrame]:
    from hybridsched.kinds.serving.latency import load_latency

    return load_latency(s)


def _served(run: Run) -> tuple[ServingSettings, np.ndarray, pd.DataFrame]:
    """(settings with the per-variant service sigma of the profile as served and the single-lane
    rows of the contention model, dense table, long table): what every stage that simulates runs
    with (latency.with_served_model: simulate with its load sweep, tune, train_dqn, train_cem)."""
    from hybridsched.kinds.serving.latency import with_served_model

    s = settings_of(run)
    lat, table = _tables(run, s)
    return with_served_model(s), lat, table


def _requests(run: Run, s: ServingSettings, split: str, lat: np.ndarray):
    """A split's requests, checked against the settings and the latency table; generated in
    memory under a multirun (the sweep may change the workload)."""
    from hybridsched.kinds.serving.latency import dense_latency, read_table, table_source
    from hybridsched.kinds.serving.workload import generate_splits, read_requests, to_requests

    if run.in_memory:
        train, test = generate_splits(run.cfg["workload"], s, lat)
        reqs = to_requests(train if split == "train" else test, s, f"{split} stream")
    else:
        reqs = read_requests(run.workload_dir / f"{split}.parquet", s)
    dense_latency(read_table(s), s, np.unique(reqs.variant), str(table_source(s)))  # coverage check
    return reqs


# ---- stages -----------------------------------------------------------------------------------
def check_config(run: Run) -> None:
    """Every setting this kind reads, checked before the pipeline runs anything (stage
    ``check``): the serving settings, the workload mix and SLO rule, and the policies."""
    from hybridsched.kinds.serving.workload import generate_stream

    s = settings_of(run)
    w = run.cfg["workload"]
    for key in ("n_train", "n_test"):
        if int(w.get(key, 0)) < 1:
            raise HybridschedError(f"workload.{key}: must be >= 1, got {w.get(key)}")
    # rate, arrival process, mix, SLO rule (latencies are the profile's: ones stand in) and trace file
    generate_stream(w, s, 2, int(w.get("seed", 0)), batch1_s=np.ones(s.n_variants))
    for spec in run.policy_specs().values():
        instantiate(spec)
    from hybridsched.kinds.serving.cem import ServingCEMSettings

    ServingCEMSettings.from_dict(run.cfg.get("cem", {}).get("serving"))  # what train_cem trains on
    if s.latency_table != "measured":  # the measured one is the profile stage's output, made later
        check_latency_table(s, w)


def check_latency_table(s: ServingSettings, w: dict[str, Any]) -> np.ndarray | None:
    """A given latency table (a file, or a published one) is read and checked against the mix
    and ``serving.max_batch`` now, before the profile stage measures for minutes; the measured
    table is checked where it is read (it does not exist before the profile stage).  Returns
    the dense table (None for ``measured`` when the profile has not written it)."""
    from hybridsched.kinds.serving.latency import dense_latency, read_table, table_source
    from hybridsched.kinds.serving.workload import mix_variants

    if s.latency_table == "measured" and not Path(s.profile_path).is_file():
        return None
    return dense_latency(read_table(s), s, mix_variants(w, s), str(table_source(s)))


def profile(run: Run) -> dict[str, Any]:
    """Measure the models on this machine; write the table to ``serving.profile_path``,
    metrics/profile.json and metrics/plots/profile/profile.png."""
    from hybridsched.kinds.serving.profile import ProfileSettings, profile_models
    from hybridsched.kinds.serving.report import save_profile_png

    s = settings_of(run)
    result = profile_models(ProfileSettings.from_dict(_block(run, "profile")))
    table = pd.DataFrame(result["table"])
    write_json(s.profile_path, result)
    write_json(run.metrics_dir / "profile.json", {k: v for k, v in result.items() if k != "table"} |
               {"rows": len(table), "fitted_rows": int(table["fitted"].sum()), "table": result["table"]})
    from hybridsched.plots import stage_plot_dir

    with atomic_dir(stage_plot_dir(run.metrics_dir, "profile")) as tmp:
        save_profile_png(table, tmp / "profile.png")
    run.track("profile", {"elapsed_s": result["elapsed_s"]}, [run.metrics_dir / "profile.json"])
    return {"rows": len(table), "elapsed_s": result["elapsed_s"]}


def generate(run: Run) -> dict[str, Any]:
    """Train and test request streams into data/workload/; metrics/import_report.json."""
    import sys

    from hybridsched.kinds.serving.latency import table_source
    from hybridsched.kinds.serving.workload import generate_splits, load_report, offered_rate

    s = settings_of(run)
    w = run.cfg["workload"]
    needs_table = (w.get("slo") or {}).get("rule") == "factor" or w.get("rate") is None  # factor SLOs, load
    if needs_table:  # the mix's variants checked against the table first: a missing model or batch is named
        check_latency_table(s, w)
    lat, _ = _tables(run, s) if needs_table else (None, None)
    train, test = generate_splits(w, s, lat)
    with atomic_dir(run.workload_dir) as tmp:
        write_frame(tmp / "train.parquet", train)
        write_frame(tmp / "test.parquet", test)
    if lat is not None:
        loads = load_report(w, s, lat, {"train": train, "test": test})
    else:
        loads = {"rate": offered_rate(w, s, None), "load": None, "offered_load": None, "load_warnings": []}
    print(f"generate: workload.load {loads['load']} (capacity in samples) -> rate {loads['rate']:.4g} requests/s; "
          f"offered load train/test {loads['offered_load']}")
    for msg in loads["load_warnings"]:
        print(f"warning: {msg}", file=sys.stderr)
    report = {"kind": "serving", "workload": w.get("name"), "arrival": w.get("arrival", "poisson"), **loads,
              "slo": w.get("slo"), "latency_table": s.latency_table,
              "latency_table_file": str(table_source(s)), "train": len(train), "test": len(test),
              "test_horizon_s": float(test["arrival"].iloc[-1]),
              "classes": test["cls"].value_counts().to_dict(), "models": test["model"].value_counts().to_dict()}
    write_json(run.metrics_dir / "import_report.json", report)
    return report


def validate(run: Run) -> dict[str, Any]:
    """Great Expectations on both splits; metrics/validation.json; DataValidationError on failure."""
    from hybridsched.validation import failure_summary
    from hybridsched.kinds.serving.validation import validate_requests

    report = validate_requests({sp: run.workload_dir / f"{sp}.parquet" for sp in SPLITS}, settings_of(run))
    out = run.metrics_dir / "validation.json"
    write_json(out, report)
    if not report["success"]:
        raise DataValidationError(f"{failure_summary(report)}\n  details: {out}")
    return report


def train_rf(run: Run) -> dict[str, Any]:
    """Latency predictor scored on held-out batch sizes, then fitted on the whole table."""
    from hybridsched.kinds.serving.predictor import held_out_scores, importance
    from hybridsched.plots import save_importance_png

    s = settings_of(run)
    p = _block(run, "predictor")
    lat, table = _tables(run, s)
    kind, n_est, seed = p.get("model", "random_forest"), int(p.get("n_estimators", 200)), int(p.get("seed", 0))
    scores = held_out_scores(table, s, list(p.get("test_batches", [2, 8, 32])), kind, seed, n_est)
    model = _fit_predictor(run, s, table)
    imp = importance(model)
    metrics = {"model": kind, **scores, "latency_table": s.latency_table, "importance": imp}
    model_dir = Path(p.get("model_dir", "models/rf"))
    with atomic_dir(model_dir) as tmp:
        np.save(tmp / "pred_latency.npy", model.dense())
        import joblib

        joblib.dump(model, tmp / "model.joblib")
        write_json(tmp / "meta.json", {"kind": "serving", "metrics": without_timings(metrics)})
    out = run.metrics_dir
    write_json(out / "train_rf.json", without_timings(metrics))
    write_frame(out / "plots" / "rf_importance.csv", pd.DataFrame({"feature": list(imp), "importance": list(imp.values())}))
    png = save_importance_png(imp, out / "plots" / "rf_importance.png", title=f"{kind} latency predictor: importance")
    run.track("train_rf", metrics, [out / "train_rf.json", png])
    return metrics


def train_dqn(run: Run) -> dict[str, Any]:
    """The learned dispatcher, trained on the training stream."""
    from hybridsched.kinds.serving import dqn

    cfg = _block(run, "dqn")
    s, lat, table = _served(run)
    reqs = _requests(run, s, "train", lat)
    pred, _ = _pred_table(run, s, lat, table)
    result = dqn.train(reqs, s, lat, pred, cfg)
    with atomic_dir(cfg.get("model_dir", "models/dqn")) as tmp:
        dqn.save(tmp, result)
    hist = pd.DataFrame(result["history"])
    metrics = {"n_train": len(reqs), "episodes": len(hist), "wall_s": round(result["wall_s"], 2),
               "n_state": result["n_obs"], "n_actions": result["n_actions"],
               "grad_steps": result["learner"].grad_steps,
               "final_mean_reward": float(hist["mean_reward"].iloc[-1]),
               "final_train_slo_attainment": float(hist["slo_attainment"].iloc[-1]),
               "best_train_slo_attainment": float(hist["slo_attainment"].max())}
    write_json(run.metrics_dir / "train_dqn.json", without_timings(metrics))
    write_frame(run.metrics_dir / "plots" / "train_dqn.csv", hist.drop(columns=list(TIMING_KEYS & set(hist))).round(6))
    run.track("train_dqn", metrics, [run.metrics_dir / "train_dqn.json"])
    return metrics


def train_cem(run: Run) -> dict[str, Any]:
    """The learned per-candidate dispatcher ``cem`` (cem.py): the cross-entropy method from the
    predictive heuristic on a mixture of synthetic streams; models/cem/theta.json,
    metrics/train_cem.json (with the held-out table) and the curve."""
    from hybridsched.kinds.serving import cem as C
    from hybridsched.rl.cem import CEMSettings

    cem_cfg = run.cfg["cem"]
    search, cs = CEMSettings.from_dict(cem_cfg), C.ServingCEMSettings.from_dict(cem_cfg.get("serving"))
    s, lat, _ = _served(run)
    pred, pred_source = _pred_table(run, s, lat)
    w = dict(run.cfg["workload"])
    result, selection = C.train_scorer(w, s, lat, pred, search, cs)
    held = C.heldout_table(result.theta, w, cs.heldout_trace, s, lat, pred, cs)
    wins = sum(r["cem_wins_or_ties"] for r in held)
    hist = pd.DataFrame(result.history)
    metrics = {"kind": "serving", "generations": search.generations, "population": search.population,
               "scenarios": cs.scenarios, "requests": cs.requests, "predictor": pred_source,
               "latency_table": s.latency_table, "wall_s": round(result.wall_s, 2),
               "first_mean_cost": float(hist["mean_cost"].iloc[0]), "last_mean_cost": float(hist["mean_cost"].iloc[-1]),
               "theta": [round(float(x), 6) for x in result.theta], **selection, "heldout": held,
               "heldout_wins_or_ties": wins, "heldout_target_met": wins >= 4}
    with atomic_dir(cem_cfg["model_dir"]) as tmp:
        write_json(tmp / "theta.json", {"format": C.FORMAT, "kind": "serving", "theta": result.theta.tolist(),
                                        "settings": cs.to_dict(), "search": search.to_dict()})
    out = run.metrics_dir
    write_json(out / "train_cem.json", without_timings(metrics))
    curve = hist[["generation", "mean_cost", "elite_cost", "best_cost", "population_cost", "std"]]
    write_frame(out / "plots" / "train_cem.csv", curve.round(6))
    run.track("train_cem", {k: v for k, v in metrics.items() if isinstance(v, int | float)},
              [out / "train_cem.json", out / "plots" / "train_cem.csv"])
    print(f"train_cem: {search.generations} generations x {search.population} on {cs.scenarios} streams in "
          f"{metrics['wall_s']:.1f} s; cost (1 + predictive's attainment - the member's) {metrics['first_mean_cost']:.4f} "
          f"-> {metrics['last_mean_cost']:.4f}; held-out: cem >= predictive on {wins} of {len(held)}")
    for r in held:
        print(f"  {r['stream']}: cem {r['cem']:.4f}  predictive {r['predictive']:.4f}")
    return metrics


def policies_read(cfg: dict[str, Any]) -> dict[str, list[str]]:
    """Stage -> the ``policies.serving`` entries it builds, for the stages that build only some
    (dvc.yaml lists just these as their params: :mod:`hybridsched.stage_params`)."""
    return {"tune": ["dynamic"]}


def tune(run: Run) -> dict[str, Any]:
    """Optuna over window, max batch, lanes and the dynamic weights; best_params.yaml and plots."""
    import yaml

    from hybridsched.kinds.serving.tuning import run_study
    from hybridsched.plots import save_axes, stage_plot_dir

    cfg = _block(run, "tune")
    s, lat, table = _served(run)
    pred, _ = _pred_table(run, s, lat, table)
    train = _requests(run, s, "train", lat).frame
    res = run_study(train, s, lat, pred, run.cfg["policies"]["serving"]["dynamic"], cfg)
    study = res.pop("study")
    write_text(run.path("best_params"), "# Written by the tune stage (serving); read when use_tuned=true.\n"
               + yaml.safe_dump(res["tuned_config"], sort_keys=True))
    with atomic_dir(cfg.get("dir", "models/tune")) as tmp:
        write_frame(tmp / "trials.csv", study.trials_dataframe())
    summary = {k: v for k, v in res.items() if k != "tuned_config"}
    write_json(run.metrics_dir / "tune.json", without_timings(summary))
    from optuna.visualization import matplotlib as ovm

    plots = stage_plot_dir(run.metrics_dir, "tune")
    with atomic_dir(plots) as tmp:
        save_axes(ovm.plot_optimization_history(study), tmp / "tune_history.png")
        if len(study.trials) > 2:  # importances need 3+ trials; with fewer there is no such chart
            save_axes(ovm.plot_param_importances(study), tmp / "tune_importance.png")
    pngs = sorted(plots.glob("*.png"))
    run.track("tune", {"best": summary["best"], "default": summary["default"]}, [run.metrics_dir / "tune.json", *pngs])
    return summary


def simulate(run: Run) -> pd.DataFrame:
    """Every policy on the test stream; traces, the bound and a load sweep into data/traces/."""
    from hybridsched.kinds.serving.bounds import slo_bound
    from hybridsched.kinds.serving.engine import service_noise, simulate as sim
    from hybridsched.kinds.serving.metrics import check_trace, summarize
    from hybridsched.kinds.serving.workload import generate_stream, offered_rate, to_requests

    s, lat, _ = _served(run)
    reqs = _requests(run, s, "test", lat)
    pred, pred_source = _pred_table(run, s, lat)
    policies = run.build_policies()
    seed = int(run.cfg.get("sim", {}).get("seed", 0))
    rows = {}
    with atomic_dir(run.traces_dir) as tmp:
        for name, policy in policies.items():
            tr = sim(reqs, s, lat, policy, pred, noise_seed=seed)
            problems = check_trace(tr.requests, tr.batches, s)
            if problems:
                raise HybridschedError(f"trace of policy {name!r} is invalid: {'; '.join(problems)}")
            write_frame(tmp / f"{name}.parquet", tr.requests)
            write_frame(tmp / f"{name}.batches.parquet", tr.batches)
            rows[name] = summarize(tr.requests, tr.batches, s)
            print(f"simulate: {name:<16} SLO attainment {rows[name]['slo_attainment']:.4f}  p95 {rows[name]['p95_ms']:.1f} ms")
        bound = slo_bound(reqs, s, lat, noise=service_noise(s, len(reqs), seed))  # min of both bounds
        print(f"simulate: upper bound on SLO attainment {bound['slo_attainment']:.4f}")
        sigma = {"/".join(s.variant_names(v)): round(float(x), 4) for v, x in enumerate(s.sigmas())}
        write_json(tmp / "bound.json", {**bound, "latency_table": s.latency_table, "predictor": pred_source,
                                        "sigma_source": s.sigma_source if s.variant_sigma else "fixed",
                                        "service_sigma": sigma, "contention": s.contention,
                                        "single_lane_rows": s.alone_lat is not None})
        sweep = []
        w = {**run.cfg["workload"], **(run.cfg["workload"].get("test") or {})}
        for factor in run.cfg["serving"].get("load_sweep") or []:
            wf = {**w, "rate": offered_rate(w, s, lat) * float(factor)}
            df = generate_stream(wf, s, len(reqs), int(w.get("seed", 0)) + 1, 1, lat)
            r = to_requests(df, s, f"load sweep x{factor}")
            b = slo_bound(r, s, lat, noise=service_noise(s, len(r), seed))
            sweep.append({"policy": "bound", "load_factor": factor, "rate": wf["rate"], "slo_attainment": b["slo_attainment"],
                          "clairvoyant_bound": b["clairvoyant.slo_attainment"],
                          "contention_bound": b["contention.slo_attainment"]})
            for name, policy in policies.items():
                tr = sim(r, s, lat, policy, pred, noise_seed=seed)
                m = summarize(tr.requests, tr.batches, s)
                sweep.append({"policy": name, "load_factor": factor, "rate": wf["rate"],
                              "slo_attainment": m["slo_attainment"], "p95_ms": m["p95_ms"]})
        write_frame(tmp / "load_sweep.csv", pd.DataFrame(sweep))
    table = compare(rows, bound, baseline=BASELINE)
    run.track("simulate", {"bound": bound, **table[["slo_attainment", "p95_ms"]].to_dict(orient="index")})
    return table.assign(workload=run.cfg["workload"].get("name"))


def sim_vs_real(run: Run) -> pd.DataFrame:
    """Real vs simulated P50/P95 per policy and class (real.py) into metrics/plots/kind/
    (``python -m studies.real``; the evaluate stage runs it when ``serving.real.enabled``)."""
    from hybridsched.kinds.serving.real import sim_vs_real as real_report

    return real_report(run, run.metrics_dir / "plots" / "kind")


def evaluate(run: Run) -> pd.DataFrame:
    """Per policy and class metrics, audit, summary.json, policies.csv, plot tables and PNGs."""
    import json

    from hybridsched.kinds.serving.metrics import check_trace, summarize
    from hybridsched.kinds.serving.report import save_pngs

    s = settings_of(run)
    names = run.policy_names()
    traces, rows = {}, {}
    for name in names:
        p = run.traces_dir / f"{name}.parquet"
        if not p.exists():
            raise HybridschedError(f"{p}: no trace for policy {name!r} (run the simulate stage)")
        req, bat = pd.read_parquet(p), pd.read_parquet(run.traces_dir / f"{name}.batches.parquet")
        problems = check_trace(req, bat, s)
        if problems:
            raise HybridschedError(f"{p}: invalid trace: {'; '.join(problems)}")
        traces[name], rows[name] = req, summarize(req, bat, s)
    bound = json.loads((run.traces_dir / "bound.json").read_text())
    table = compare(rows, bound, baseline=BASELINE)
    sweep_path = run.traces_dir / "load_sweep.csv"
    sweep = pd.read_csv(sweep_path) if sweep_path.exists() else None
    out = run.metrics_dir
    summary = {"kind": "serving", "workload": run.cfg["workload"].get("name"), "n_requests": len(next(iter(traces.values()))),
               "latency_table": s.latency_table, "slo": run.cfg["workload"].get("slo"), "bound": bound,
               "policies": table.round(6).to_dict(orient="index")}
    util = pd.DataFrame([{"policy": n, "device": d, "utilisation": float(table.loc[n, f"{d}_utilisation"])}
                         for n in table.index for d in ("lane", "token")])
    util["policy_device"] = util["policy"] + "/" + util["device"]
    served = {n: t[~t["dropped"]] for n, t in traces.items()}
    pngs = write_report(out, summary, table, served, util)
    kind_dir = out / "plots" / "kind"  # this kind's own plots (a declared output of every kind)
    with atomic_dir(kind_dir) as tmp:
        if sweep is not None:
            write_frame(tmp / "attainment_vs_load.csv", sweep)
        pngs += [kind_dir / p.name for p in save_pngs(traces, table, sweep, s.classes, tmp)]
        if _block(run, "real").get("enabled", False):  # minutes of wall time: off by default
            from hybridsched.kinds.serving.real import sim_vs_real as real_report

            real_report(run, tmp)
    from hybridsched.headline import MainMetric, report  # only evaluate reads it: not a dep of every stage

    head_files, head = report(run, table, MainMetric(**HEADLINE), bound.get("slo_attainment"))
    run.track("evaluate", {"bound": bound["slo_attainment"], **table[["slo_attainment"]].to_dict(orient="index")},
              [out / "summary.json", out / "policies.csv", *pngs, *head_files], headline=head)
    return table
