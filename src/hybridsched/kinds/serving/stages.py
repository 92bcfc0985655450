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
from hybridsched.kinds.serving.settings import ServingSettings
from hybridsched.evaluation import compare, write_report

BASELINE = "fifo"  # the speed-up columns are over this policy

# blocks of the ``serving`` config that are not machine settings
SUB_BLOCKS = ("profile", "predictor", "dqn", "tune", "real", "load_sweep")
SPLITS = ("train", "test")


def settings_of(run: Run) -> ServingSettings:
    """The machine settings of the ``serving`` block."""
    return ServingSettings.from_dict({k: v for k, v in run.cfg["serving"].items() if k not in SUB_BLOCKS})


def _block(run: Run, name: str) -> dict[str, Any]:
    return dict(run.cfg["serving"].get(name) or {})


def _tables(run: Run, s: ServingSettings) -> tuple[np.ndarray, pd.DataFrame]:
    from hybridsched.kinds.serving.latency import load_latency

    return load_latency(s)


def _requests(run: Run, s: ServingSettings, split: str, lat: np.ndarray):
    """A split's requests, checked against the settings and the latency table; generated in
    memory under a multirun (the sweep may change the workload)."""
    from hybridsched.kinds.serving.latency import dense_latency, read_table, table_source
    from hybridsched.kinds.serving.workload import generate_splits, read_requests, to_requests

    if run.in_memory:
        train, test = generate_splits(run.cfg["workload"], s, lat[:, 1])
        reqs = to_requests(train if split == "train" else test, s, f"{split} stream")
    else:
        reqs = read_requests(run.workload_dir / f"{split}.parquet", s)
    dense_latency(read_table(s), s, np.unique(reqs.variant), str(table_source(s)))  # coverage check
    return reqs


def _fit_predictor(run: Run, s: ServingSettings, table: pd.DataFrame):  # -> LatencyPredictor
    """The learned latency predictor of the ``serving.predictor`` settings, fitted on the
    latency table (seeded: the same table and settings give the same predictor)."""
    from hybridsched.kinds.serving.predictor import LatencyPredictor

    p = _block(run, "predictor")
    return LatencyPredictor.fit(table, s, p.get("model", "random_forest"), int(p.get("seed", 0)),
                                int(p.get("n_estimators", 200)))


def _pred_table(run: Run, s: ServingSettings, lat: np.ndarray, table: pd.DataFrame | None = None) -> tuple[np.ndarray, str]:
    """The scheduler's latency model: the learned predictor's table, or the profile table.

    With ``table`` (the stages that run before ``train_rf`` in the DAG: tune, train_dqn) the
    predictor is fitted here, in memory, from the latency table they declare as a dep: the same
    seeded fit that train_rf saves (well under a second), so no stage reads models/rf before
    train_rf writes it.  Without, it is read from train_rf's ``pred_latency.npy`` (simulate).
    """
    p = _block(run, "predictor")
    if p.get("use", "learned") == "table":
        return lat, "latency table"
    if table is not None:
        return _fit_predictor(run, s, table).dense(), "learned predictor"
    path = Path(p.get("model_dir", "models/rf")) / "pred_latency.npy"
    try:
        pred = np.load(path)
    except FileNotFoundError:
        raise HybridschedError(f"{path}: not found (run train_rf, or set serving.predictor.use=table)") from None
    if pred.shape != lat.shape:
        raise HybridschedError(f"{path}: shape {pred.shape} does not match the settings {lat.shape} (rerun train_rf)")
    return pred, "learned predictor"


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


def profile(run: Run) -> dict[str, Any]:
    """Measure the models on this machine; write the table to ``serving.profile_path``,
    metrics/profile.json and metrics/plots/profile.png."""
    from hybridsched.kinds.serving.profile import ProfileSettings, profile_models
    from hybridsched.kinds.serving.report import save_profile_png

    s = settings_of(run)
    result = profile_models(ProfileSettings.from_dict(_block(run, "profile")))
    table = pd.DataFrame(result["table"])
    write_json(s.profile_path, result)
    write_json(run.metrics_dir / "profile.json", {k: v for k, v in result.items() if k != "table"} |
               {"rows": len(table), "fitted_rows": int(table["fitted"].sum()), "table": result["table"]})
    save_profile_png(table, run.metrics_dir / "plots" / "profile.png")
    run.track("profile", {"elapsed_s": result["elapsed_s"]}, [run.metrics_dir / "profile.json"])
    return {"rows": len(table), "elapsed_s": result["elapsed_s"]}


def generate(run: Run) -> dict[str, Any]:
    """Train and test request streams into data/workload/; metrics/import_report.json."""
    from hybridsched.kinds.serving.latency import table_source
    from hybridsched.kinds.serving.workload import generate_splits, offered_rate

    s = settings_of(run)
    w = run.cfg["workload"]
    needs_table = (w.get("slo") or {}).get("rule") == "factor" or w.get("rate") is None  # factor SLOs, load
    lat, _ = _tables(run, s) if needs_table else (None, None)
    b1 = None if lat is None else lat[:, 1]
    train, test = generate_splits(w, s, b1)
    with atomic_dir(run.workload_dir) as tmp:
        write_frame(tmp / "train.parquet", train)
        write_frame(tmp / "test.parquet", test)
    report = {"kind": "serving", "workload": w.get("name"), "arrival": w.get("arrival", "poisson"),
              "rate": offered_rate(w, s, b1), "load": w.get("load") if w.get("rate") is None else None,
              "slo": w.get("slo"), "latency_table": s.latency_table,
              "latency_table_file": str(table_source(s)), "train": len(train), "test": len(test),
              "test_horizon_s": float(test["arrival"].iloc[-1]),
              "classes": test["cls"].value_counts().to_dict(), "models": test["model"].value_counts().to_dict()}
    write_json(run.metrics_dir / "import_report.json", report)
    return report


def validate(run: Run) -> dict[str, Any]:
    """Great Expectations on both splits; metrics/validation.json; DataValidationError on failure."""
    from hybridsched.kinds.machine.validation import failure_summary
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

    s = settings_of(run)
    cfg = _block(run, "dqn")
    lat, table = _tables(run, s)
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


def train_cem(run: Run) -> dict:
    """No ``cem`` policy on this kind: the stage's outputs say why."""
    from hybridsched.not_applicable import skip_train_cem

    return skip_train_cem(run, "not run: the serving kind has no `cem` policy (its learned dispatcher is the DQN)")


def tune(run: Run) -> dict[str, Any]:
    """Optuna over window, max batch, lanes and the dynamic weights; best_params.yaml and plots."""
    import yaml

    from hybridsched.kinds.serving.tuning import run_study
    from hybridsched.plots import save_axes

    s = settings_of(run)
    cfg = _block(run, "tune")
    lat, table = _tables(run, s)
    pred, _ = _pred_table(run, s, lat, table)
    train = _requests(run, s, "train", lat).frame
    res = run_study(train, s, lat, pred, run.cfg["policies"]["serving"]["dynamic"], cfg)
    study = res.pop("study")
    write_text(run.path("best_params"), f"# Written by the tune stage (serving); read when use_tuned=true.\n"
               + yaml.safe_dump(res["tuned_config"], sort_keys=True))
    with atomic_dir(cfg.get("dir", "models/tune")) as tmp:
        write_frame(tmp / "trials.csv", study.trials_dataframe())
    summary = {k: v for k, v in res.items() if k != "tuned_config"}
    write_json(run.metrics_dir / "tune.json", without_timings(summary))
    from optuna.visualization import matplotlib as ovm

    plots = run.metrics_dir / "plots"
    pngs = [save_axes(ovm.plot_optimization_history(study), plots / "tune_history.png")]
    if len(study.trials) > 2:
        pngs.append(save_axes(ovm.plot_param_importances(study), plots / "tune_importance.png"))
    else:  # a declared output of the tune stage: written either way, saying why it is empty
        from hybridsched.not_applicable import write_placeholders

        pngs += write_placeholders([plots / "tune_importance.png"],
                                   f"parameter importances need 3+ trials (this study has {len(study.trials)})")
    run.track("tune", {"best": summary["best"], "default": summary["default"]}, [run.metrics_dir / "tune.json", *pngs])
    return summary


def simulate(run: Run) -> pd.DataFrame:
    """Every policy on the test stream; traces, the bound and a load sweep into data/traces/."""
    from hybridsched.kinds.serving.bounds import slo_bound
    from hybridsched.kinds.serving.engine import service_noise, simulate as sim
    from hybridsched.kinds.serving.metrics import check_trace, summarize
    from hybridsched.kinds.serving.workload import generate_stream, offered_rate, to_requests

    s = settings_of(run)
    lat, _ = _tables(run, s)
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
        bound = slo_bound(reqs, s, lat, float(service_noise(s, len(reqs), seed).min()))
        write_json(tmp / "bound.json", {**bound, "latency_table": s.latency_table, "predictor": pred_source})
        sweep = []
        w = {**run.cfg["workload"], **(run.cfg["workload"].get("test") or {})}
        for factor in run.cfg["serving"].get("load_sweep") or []:
            wf = {**w, "rate": offered_rate(w, s, lat[:, 1]) * float(factor)}
            df = generate_stream(wf, s, len(reqs), int(w.get("seed", 0)) + 1, 1, lat[:, 1])
            r = to_requests(df, s, f"load sweep x{factor}")
            b = slo_bound(r, s, lat, float(service_noise(s, len(r), seed).min()))
            sweep.append({"policy": "bound", "load_factor": factor, "rate": wf["rate"], "slo_attainment": b["slo_attainment"]})
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
    (``python -m stages.real``; the evaluate stage runs it when ``serving.real.enabled``)."""
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
    run.track("evaluate", {"bound": bound["slo_attainment"], **table[["slo_attainment"]].to_dict(orient="index")},
              [out / "summary.json", out / "policies.csv", *pngs])
    return table
