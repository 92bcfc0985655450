"""Late dispatch against placement at arrival: the per-scenario table.

Per scenario (default, shifted, bursty, dag, rate 8 and the held-out draws of
``scenarios.heldout_workloads``): the LP bound, every arrival-mode heuristic and every
late-mode heuristic with the weights in their YAMLs (tuned on the default workload's
training split; ``eft_late_plain`` is ``eft_late`` untuned, all weights 0, as ``eft`` is to
eft_rank), and the learned ``cem`` (arrival, ``--cem-model``) and ``cem_late`` (late,
``--cem-late-model``) unchanged on every scenario.  Same tasks and noise as
``studies.quality_eval`` (test split, noise seed ``sim.seed``; held-out draw k: tasks and
noise from seed k).

    python -m studies.late_eval --out /tmp/late --lp-rho 1             # ~25 min on a loaded 2-core box (LP)
    python -m studies.late_eval --out /tmp/late --no-lp --heldout 0 --workloads default
    python -m studies.late_eval --tune 1000 --out /tmp/late_tune    # tune the late heuristics (default train split)
    python -m studies.late_eval --validate models/late/cem_late,/tmp/other --out /tmp/v   # models on the validation draws
    python -m studies.late_eval --train-dqn /tmp/dqn_late --out /tmp/dqn_late  # train dqn_late (~10 min)
    python -m studies.late_eval --train-pg /tmp/pg_late --out /tmp/pg_late \
        --pg-set b_beta_cpu=11.0,b_beta_gpu=7.14,b_backlog_s=1.6,c_option=1,hidden=32,reserved_order=rank   # train pg_late (~11 min)
    python -m studies.late_eval --analyse wspt_late,eft_late,eft_late_plain --out /tmp/late_an   # idle analysis
    python -m studies.late_eval --hold-scan 1,2,4,8,16 --out /tmp/late_hold   # the split hold on the validation draws
    python -m studies.late_eval --analyse eft_late,pg_late --analyse-on shifted --out /tmp/late_an_shifted
    python -m studies.late_eval --sweep --out /tmp/late_sweep      # the load sweep 0.5-1.2 (1,500 tasks per load)
    python -m studies.late_eval --noise-seeds 10 --out /tmp/late_noise   # the learned target under 10 noise seeds
    python -m studies.late_eval --gantt docs/img/late_gantt.png --gantt-policies rollout_late,heft_late,pg_late  # one busy minute

The LP bound of each scenario is kept in the bound memo under ``<out>/bounds`` (same tasks,
noise and grid give the same bound), so re-running with another model only simulates.  Writes
``<out>/<scenario>.csv`` and ``<out>/late.md`` (``--out`` by default: studies-out/late, git-ignored).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from studies.quality_eval import WORKLOADS, compose, heldout_spec
from hybridsched.errors import HybridschedError
from hybridsched.io import write_frame, write_json, write_text
from hybridsched.kinds.base import instantiate
from hybridsched.kinds.machine.bounds_lp import LPSettings
from hybridsched.devices import cluster_from_config
from hybridsched.kinds.machine.scenarios import heldout_workloads
# the table's code is the scenarios stage's (the pipeline measures the same numbers)
from hybridsched.kinds.machine.scenarios_late import config_roster, evaluate, markdown, ratios, summary, wide
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.workload import generate, generate_splits

# the learned late models behind docs/machine.md's figures: the pipeline's (models/late/<name>,
# written by DVC); --cem-late-model, --dqn-late-model and --pg-late-model name others
MODELS = "models/late"


def policies(cfg: dict[str, Any], cem_model: str, cem_late_model: str, dqn_late_model: str = "",
             pg_late_model: str = MODELS + "/pg_late") -> dict[str, Any]:
    """Name -> factory; the learned ones only where their model file exists."""
    specs = cfg["policies"]["machine"]
    out = {n: (lambda n=n: instantiate(specs[n])) for n in config_roster(cfg).heuristics}
    # the untuned late list scheduler by earliest finish: late mode's counterpart of plain eft
    out["eft_late_plain"] = lambda: instantiate({"_target_": specs["eft_late"]["_target_"]})
    if (Path(cem_model) / "model.json").is_file():
        out["cem"] = lambda: instantiate({**specs["cem"], "model_dir": cem_model})
    if (Path(cem_late_model) / "model.json").is_file() and "cem_late" in specs:
        out["cem_late"] = lambda: instantiate({**specs["cem_late"], "model_dir": cem_late_model})
    if dqn_late_model and (Path(dqn_late_model) / "model.json").is_file():
        from hybridsched.kinds.machine.policies.late_dqn import DQNLate

        out["dqn_late"] = lambda: DQNLate(model_dir=dqn_late_model)
    if pg_late_model and (Path(pg_late_model) / "model.json").is_file():
        from hybridsched.kinds.machine.policies.late_dqn import PGLate

        out["pg_late"] = lambda: PGLate(model_dir=pg_late_model)
    return out


def sweep(cfg: dict[str, Any], pols: dict[str, Any], loads: list[float], n_tasks: int, lp, out: Path) -> list[pd.DataFrame]:
    """The load sweep of ``scenarios.load_sweep`` (the default test split's task mix at the rate
    of each offered load, ``n_tasks`` tasks, tasks and noise from seed 0) over every policy;
    one frame per load in ``summary``'s shape, plus ``load_sweep.{csv,md,png}``.  The bounds are
    cached per load as in ``evaluate``."""
    from hybridsched.kinds.machine.scenarios import rate_for_load, write_sweep
    from hybridsched.kinds.machine.workload import WorkloadSpec, spec_from_config

    cluster = cluster_from_config(cfg["cluster"])
    spec = spec_from_config(cfg["workload"], "test")
    frames = []
    for load in loads:
        rate = rate_for_load(spec, cluster, load)
        s = WorkloadSpec(**{**{k: getattr(spec, k) for k in spec.__dataclass_fields__}, "rate": rate})
        tasks = generate(s, n_tasks, np.random.default_rng(0), cpu_gflops=cluster.cpu_gflops)
        frames.append(evaluate(f"load{load:g}", tasks, cluster, 0, pols, lp, out).assign(offered_load=load, rate=rate))
    write_sweep(pd.concat(frames, ignore_index=True), out, "late against arrival dispatch, default task mix")
    return frames


def busiest_minute(arrival: np.ndarray, latency: np.ndarray, window_s: float = 60.0) -> float:
    """The start (on a 10 s grid) of the window whose arriving tasks have the most total
    latency in a reference trace: one busy minute."""
    starts = np.arange(0.0, max(float(arrival.max()) - window_s, 0.0) + 10.0, 10.0)
    cum = np.concatenate([[0.0], np.cumsum(latency)])
    tot = cum[np.searchsorted(arrival, starts + window_s)] - cum[np.searchsorted(arrival, starts)]
    return float(starts[int(np.argmax(tot))])


def analyse(cfg: dict[str, Any], pols: dict[str, Any], names: list[str]) -> pd.DataFrame:
    """Where the latency goes on ``cfg``'s test split: mean wait (ready to first start),
    mean service (first start to end) against the best time alone, the split kinds, and per
    device its utilisation and the share of time it is idle while tasks wait in the pool
    (sampled on a 10 ms grid)."""
    from hybridsched.kinds.machine.bounds import best_alone_seconds
    from hybridsched.kinds.machine.engine import CPU_S, GPU_S, MAX_F, task_matrix

    cluster = cluster_from_config(cfg["cluster"])
    _, test = generate_splits(cfg["workload"], cpu_gflops=cluster.cpu_gflops)
    real = cluster.sample_noise(len(test), np.random.default_rng(int(cfg["sim"]["seed"])))
    X = task_matrix(test, cluster)
    alone = best_alone_seconds(X[:, CPU_S], X[:, GPU_S], np.full(len(test), cluster.launch_s), X[:, MAX_F])
    rows = []
    for name in names:
        tr = simulate(test, cluster, pols[name](), real)
        first = np.fmin(tr.cpu_start, tr.gpu_start)
        f = tr.fraction
        grid = np.arange(0.0, float(np.nanmax(tr.end)) + 1.0, 0.01)

        def level(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
            ok = ~np.isnan(starts)
            x = np.zeros(len(grid))
            np.add.at(x, np.searchsorted(grid, starts[ok]), 1)
            np.add.at(x, np.searchsorted(grid, ends[ok]), -1)
            return np.cumsum(x)

        waiting = level(tr.ready, first) > 0
        row = {"policy": name, "mean latency": float(np.mean(tr.end - tr.arrival)),
               "wait": float(np.mean(first - tr.ready)), "service": float(np.mean(tr.end - first)),
               "best alone": float(alone.mean()), "CPU only": float(np.mean(f == 0)),
               "GPU only": float(np.mean(f >= 1)), "split": float(np.mean((f > 0) & (f < 1)))}
        for d in range(cluster.n_devices):
            if d == 0:
                busy = level(tr.cpu_start, tr.cpu_end) > 0
            else:
                on = tr.gpu == d - 1
                busy = level(np.where(on, tr.gpu_start, np.nan), np.where(on, tr.gpu_end, np.nan)) > 0
            dev = "CPU" if d == 0 else f"GPU{d - 1}"
            row[f"{dev} util"] = float(busy.mean())
            row[f"{dev} idle while waiting"] = float(np.mean(~busy & waiting))
        rows.append(row)
    return pd.DataFrame(rows)


def gantt(cfg: dict[str, Any], pols: dict[str, Any], names: list[str], path: Path) -> Path:
    """Gantt chart of one busy minute of the default test split for ``names`` (late policies)."""
    from hybridsched.kinds.machine.gantt import plot_gantt

    cluster = cluster_from_config(cfg["cluster"])
    _, test = generate_splits(cfg["workload"], cpu_gflops=cluster.cpu_gflops)
    real = cluster.sample_noise(len(test), np.random.default_rng(int(cfg["sim"]["seed"])))
    traces = {}
    start = 0.0
    for k, n in enumerate(names):
        tr = simulate(test, cluster, pols[n](), real)
        lat = tr.end - tr.arrival
        if k == 0:  # the window: busiest for the first policy (the best late heuristic)
            start = busiest_minute(np.asarray(tr.arrival, dtype=np.float64), lat)
        traces[f"{k + 1}. {n} (mean latency {float(lat.mean()):.3f} s over the run)"] = tr.to_frame()
    print(f"gantt: {path} window [{start:g}, {start + 60:g}] s")
    return plot_gantt(traces, path, window_s=60.0, start=start, n_devices=cluster.n_devices)


def tune_late(trials: int, out: Path, overrides: list[str] | None = None, names: list[str] | None = None
              ) -> dict[str, Any]:
    """Tune heuristics with the project's Optuna study on the default workload's training split
    (``names``; default: every late heuristic with a search space, as the arrival heuristics'
    YAML weights were tuned); writes ``<out>/tuned.json``."""
    from hybridsched.kinds.machine.tuning import tune_each

    cfg = compose(overrides or [])
    cluster = cluster_from_config(cfg["cluster"])
    train, _ = generate_splits(cfg["workload"], cpu_gflops=cluster.cpu_gflops)
    # the late heuristics with a search space; the others are variants without weights to tune
    # (eft_late_plain, eft_late_spt, eft_late_rank: eft_late's untuned rule)
    names = names or [n for n in config_roster(cfg).late if n in cfg["tune"]["spaces"]]
    with tempfile.TemporaryDirectory(prefix="late-tune-") as studies:  # the Optuna journals are not kept
        tuned = tune_each(cfg, train, cluster, names, trials, Path(studies), log=print)
    write_json(out / "tuned.json", tuned)
    return tuned


def validate_models(dirs: list[str], policy: str = "cem_late", overrides: list[str] | None = None) -> dict[str, Any]:
    """Models of ``policy`` (a conf entry with a ``model_dir``: ``cem_late``, ``pg_late``, ...) and
    the late heuristics (YAML weights) on the validation stream's draws of ``cem.machine``
    (``[cem.seed, 2, 0]``: never training, selection or evaluation), as mean latency / untuned
    late EFT's per draw; each model also ÷ the draw's best late heuristic (``vs_best_late``) and
    on how many draws that is at most 0.9 (the learned policies' target).  ``overrides``: Hydra overrides of conf/ (e.g. of the mixture)."""
    from hybridsched.kinds.machine.cem_train import _VALID_STREAM, MachineCEMSettings, draw_set

    cfg = compose(overrides or [])
    cluster = cluster_from_config(cfg["cluster"])
    s = MachineCEMSettings.from_dict(cfg["cem"]["machine"])
    spec = cfg["policies"]["machine"].get(policy)
    if not isinstance(spec, dict) or "model_dir" not in spec:
        raise HybridschedError(f"--validate-policy: {policy!r} is not a policy with a model_dir in policies.machine")
    pols = policies(cfg, "", "", "", "")
    late = config_roster(cfg).late
    runs = {n: pols[n] for n in late}
    runs.update({d: (lambda d=d: instantiate({**spec, "model_dir": d})) for d in dirs})
    draws = draw_set(int(cfg["cem"]["seed"]), _VALID_STREAM, 0, s, cluster, s.validation_scenarios)
    ratios: dict[str, list[float]] = {n: [] for n in runs}
    for _, tasks, real in draws:
        lat = {n: float(np.mean((tr := simulate(tasks, cluster, make(), real)).end - tr.arrival)) for n, make in runs.items()}
        for n in runs:
            ratios[n].append(lat[n] / lat["eft_late_plain"])
    out = {n: {"mean": float(np.mean(r)), "per_draw": np.round(r, 3).tolist()} for n, r in ratios.items()}
    # the learned policies' target on these draws: each model / the best late heuristic of the draw
    best = np.min([ratios[n] for n in late], axis=0)
    for d in dirs:
        vs = np.asarray(ratios[d]) / best
        out[d].update(vs_best_late=np.round(vs, 3).tolist(), draws_at_most_0_9=int(np.sum(vs <= 0.9)))
    for n, r in out.items():
        print(f"{n}: {r['mean']:.4f} {r['per_draw']}")
    for d in dirs:
        print(f"{d} / the best late heuristic per draw: {out[d]['vs_best_late']} "
              f"(<= 0.9 on {out[d]['draws_at_most_0_9']} of {len(draws)})")
    return out


HELDOUT_DRAWS, HELDOUT_TASKS = 5, 3000  # the report's held-out draws and their size
HELDOUT = tuple(f"heldout{k}" for k in range(HELDOUT_DRAWS))  # their names as a --workload choice


def one_scenario(name: str, heldout_tasks: int, overrides: list[str]) -> tuple[str, Any, Any, int, dict[str, Any]]:
    """One scenario of the report by name: a workload's test split, or ``heldoutK`` (held-out
    draw k, ``heldout_tasks`` tasks), as :func:`scenarios` builds it."""
    if name in HELDOUT:
        return scenarios([], HELDOUT.index(name) + 1, heldout_tasks, overrides)[-1]
    return scenarios([name], 0, 0, overrides)[0]


def scenarios(workloads: list[str], heldout: int, heldout_tasks: int,
              overrides: list[str]) -> list[tuple[str, Any, Any, int, dict[str, Any]]]:
    """The report's scenarios as ``(name, tasks, cluster, noise seed, config)``: each named
    workload's test split (noise seed ``sim.seed``), then held-out draws 0 .. ``heldout`` - 1
    (tasks and noise from seed k)."""
    out = []
    for wname in workloads:
        cfg = compose([*WORKLOADS[wname], *overrides])
        cluster = cluster_from_config(cfg["cluster"])
        _, test = generate_splits(cfg["workload"], cpu_gflops=cluster.cpu_gflops)
        out.append((wname, test, cluster, int(cfg["sim"]["seed"]), cfg))
    if heldout == 0:
        return out
    cfg = compose(overrides)
    cluster = cluster_from_config(cfg["cluster"])
    for k, w in enumerate(heldout_workloads(heldout, cluster)):
        tasks = generate(heldout_spec(w), heldout_tasks, np.random.default_rng(k), cpu_gflops=cluster.cpu_gflops)
        out.append((w["name"], tasks, cluster, k, cfg))
    return out


def noise_seeds(n_seeds: int, scen: list[tuple[str, Any, Any, int, dict[str, Any]]], pols_of, out: Path) -> dict[str, Any]:
    """The learned target under other run-time noise: the scenario table (no LP) with noise seed
    ``seed + 1000 s`` for ``s < n_seeds`` (``s = 0``: the committed table's noise; the tasks never
    change), per seed how many scenarios each learned policy is ≤ 0.9× the best heuristic of its
    own mode, and per scenario the range of each ratio over the seeds.  ``pols_of(cfg)``: the
    policies of a scenario's config."""
    per_seed, rows = [], []
    # the policies do not change with a scenario's workload
    roster = config_roster(scen[0][4] if scen else compose([]))
    for s in range(n_seeds):
        frames = [evaluate(name, tasks, cl, seed + 1000 * s, pols_of(cfg), None, None, quiet=True)
                  for name, tasks, cl, seed, cfg in scen]
        r = ratios(frames, roster.learned, roster.heuristics)
        r.insert(0, "noise", s)
        per_seed.append(r)
        rows.append({"noise": s, **{n: int((r[f"{n}_vs_heuristic"] <= 0.9).sum())
                                    for n in roster.learned if f"{n}_vs_heuristic" in r}})
        print(f"noise {s}: scenarios at most 0.9x the best heuristic of the same mode: {rows[-1]}", flush=True)
    allr = pd.concat(per_seed, ignore_index=True)
    learned = [n for n in roster.learned if f"{n}_vs_heuristic" in allr]
    counts = pd.DataFrame(rows)
    spread = allr.groupby("scenario", sort=False)[[f"{n}_vs_heuristic" for n in learned]].agg(["min", "median", "max"])
    spread.columns = [f"{a.removesuffix('_vs_heuristic')} {b}" for a, b in spread.columns]
    write_frame(out / "noise_seeds.csv", allr)
    text = (f"Scenarios (of {len(scen)}) where each learned policy is ≤ 0.9× the best heuristic of its mode, per noise seed:\n\n"
            + markdown(counts) + "\n\nEach ratio's min / median / max over the seeds:\n\n" + markdown(spread.round(3).reset_index()))
    write_text(out / "noise_seeds.md", text)
    print(text)
    return {"counts": counts.to_dict(orient="records")}


def srpt_mean_flow(release: np.ndarray, work: np.ndarray) -> float:
    """Mean flow time of preemptive SRPT on one machine (optimal for total flow time there)."""
    import heapq

    order = np.argsort(release, kind="stable")
    t, k, total, n = 0.0, 0, 0.0, len(order)
    heap: list[list[float]] = []
    while k < n or heap:
        if not heap:
            t = max(t, float(release[order[k]]))
        while k < n and release[order[k]] <= t:
            heapq.heappush(heap, [float(work[order[k]]), float(release[order[k]])])
            k += 1
        nxt = float(release[order[k]]) if k < n else np.inf
        job = heap[0]
        if t + job[0] <= nxt:
            t += job[0]
            total += t - job[1]
            heapq.heappop(heap)
        else:
            job[0] -= nxt - t
            t = nxt
    return total / max(n, 1)


def hold_scan(slacks: list[float], overrides: list[str] | None = None) -> dict[str, Any]:
    """Plain late EFT with each ``queue_slack`` on the validation draws of ``cem.machine`` (never
    training, selection or evaluation), as mean latency / the best late heuristic's (YAML
    weights) per draw; with each draw's CPU-bound floor: preemptive SRPT on the CPU work no
    split can avoid (``(1 - m) C`` of the memory-capped tasks), summed over those tasks and
    divided by all (a lower bound on the mean latency)."""
    from hybridsched.kinds.machine.cem_train import _VALID_STREAM, MachineCEMSettings, draw_set
    from hybridsched.kinds.machine.engine import CPU_S, MAX_F, task_matrix
    from hybridsched.kinds.machine.policies.late import EFTLate

    cfg = compose(overrides or [])
    cluster = cluster_from_config(cfg["cluster"])
    s = MachineCEMSettings.from_dict(cfg["cem"]["machine"])
    pols = policies(cfg, "", "", "", "")
    # the bar of the documented scan: the five late heuristics that existed before the hold
    # (eft_late_hold is what the scan tried; eft_late_spt and eft_late_rank, reserved parts
    # shortest first, and rollout_late came after)
    heur = ["spt_late", "wspt_late", "eft_late", "heft_late", "eft_late_plain"]
    rows = []
    for j, (_, tasks, real) in enumerate(draw_set(int(cfg["cem"]["seed"]), _VALID_STREAM, 0, s, cluster,
                                                  s.validation_scenarios)):
        lat = {n: float(np.mean((tr := simulate(tasks, cluster, pols[n](), real)).end - tr.arrival)) for n in heur}
        best = min(lat, key=lat.__getitem__)
        X = task_matrix(tasks, cluster)
        capped = X[:, MAX_F] < 1.0
        floor = srpt_mean_flow(tasks.arrival[capped], ((1.0 - X[:, MAX_F]) * X[:, CPU_S] * real.cpu_factor)[capped])
        row = {"draw": j, "best_late_heuristic": best, "best": lat[best], "eft_late_plain": lat["eft_late_plain"],
               "cpu_floor": floor * capped.sum() / len(tasks)}
        for q in slacks:
            tr = simulate(tasks, cluster, EFTLate(queue_slack=q), real)
            row[f"slack_{q:g}"] = float(np.mean(tr.end - tr.arrival)) / lat[best]
        rows.append(row)
        print(" ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    return {"slacks": slacks, "draws": rows}


def _non_negative(text: str) -> int:
    """An argparse type: an integer >= 0 (argparse prints the one-line error)."""
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def settings_from(cls, text: str, flag: str):
    """A settings dataclass from ``key=value,...`` (``--pg-set``, ``--dqn-set``)."""
    from dataclasses import fields

    types = {f.name: f.type for f in fields(cls)}
    kv = dict(x.split("=", 1) for x in text.split(",") if x)
    unknown = sorted(set(kv) - set(types))
    if unknown:
        raise SystemExit(f"{flag}: unknown {cls.__name__} key(s) {unknown}; known: {sorted(types)}")
    return cls(**{k: v if types[k] in ("str", str) else float(v) if types[k] in ("float", float) else int(v)
                  for k, v in kv.items()})


def train_pg(model_dir: Path, pg_set: str, out: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """Train ``pg_late`` (late_pg_train) on ``cem.machine``'s mixture (``overrides``: Hydra
    overrides of conf/, e.g. of the mixture); the report also goes to ``<out>``."""
    from hybridsched.kinds.machine.cem_train import MachineCEMSettings
    from hybridsched.kinds.machine.late_pg_train import REPORT_FILE, LatePGSettings, train

    settings = settings_from(LatePGSettings, pg_set, "--pg-set")
    cfg = compose(overrides or [])
    cluster = cluster_from_config(cfg["cluster"])
    report = train(settings, MachineCEMSettings.from_dict(cfg["cem"]["machine"]), cluster, model_dir)
    write_json(out / REPORT_FILE, report)
    return report


def train_dqn(model_dir: Path, dqn_set: str, out: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """Train ``dqn_late`` on ``cem.machine``'s workload mixture (late_dqn_train); the report also
    goes to ``<out>/train_dqn_late.json``."""
    from hybridsched.kinds.machine.cem_train import MachineCEMSettings
    from hybridsched.kinds.machine.late_dqn_train import LateDQNSettings, train

    settings = settings_from(LateDQNSettings, dqn_set, "--dqn-set")
    cfg = compose(overrides or [])
    cluster = cluster_from_config(cfg["cluster"])
    report = train(settings, MachineCEMSettings.from_dict(cfg["cem"]["machine"]), cluster, model_dir)
    write_json(out / "train_dqn_late.json", report)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--heldout", type=int, default=HELDOUT_DRAWS)
    ap.add_argument("--heldout-tasks", type=int, default=HELDOUT_TASKS)
    ap.add_argument("--no-lp", action="store_true")
    ap.add_argument("--lp-rho", type=float, default=1.0)
    ap.add_argument("--cem-model", default="models/cem")
    ap.add_argument("--cem-late-model", default=MODELS + "/cem_late")
    ap.add_argument("--tune", type=int, default=0, metavar="TRIALS",
                    help="only tune heuristics (--tune-policies) on the default training split")
    ap.add_argument("--tune-policies", default=None, metavar="NAMES",
                    help="--tune: these heuristics of tune.spaces (comma-separated; default: the late ones)")
    ap.add_argument("--validate", default=None, metavar="DIRS",
                    help="only score these cem_late model dirs (comma-separated) on the validation draws")
    ap.add_argument("--dqn-late-model", default=MODELS + "/dqn_late")
    ap.add_argument("--sweep", action="store_true", help="only the load sweep (--loads, --sweep-tasks)")
    ap.add_argument("--loads", default="0.5,0.6,0.7,0.8,0.9,1.0,1.1,1.2")
    ap.add_argument("--sweep-tasks", type=int, default=1500)
    ap.add_argument("--gantt", default=None, metavar="PNG",
                    help="only the Gantt chart of one busy minute (default workload) of --gantt-policies")
    ap.add_argument("--analyse", default=None, metavar="POLICIES",
                    help="only the wait/service/idle analysis of these policies on a test split (--analyse-on)")
    ap.add_argument("--analyse-on", default="default", choices=list(WORKLOADS),
                    help="the workload whose test split --analyse reads")
    ap.add_argument("--gantt-policies", default="rollout_late,heft_late,pg_late")
    ap.add_argument("--train-dqn", default=None, metavar="DIR",
                    help="only train dqn_late into DIR (late_dqn_train.LateDQNSettings; --dqn-set key=value,...)")
    ap.add_argument("--dqn-set", default="", help="LateDQNSettings overrides, e.g. iterations=2,tasks=300")
    ap.add_argument("--hold-scan", default=None, metavar="SLACKS",
                    help="only plain late EFT with each queue_slack on the validation draws (hold_scan.{json,md})")
    ap.add_argument("--pg-late-model", default=MODELS + "/pg_late")
    ap.add_argument("--train-pg", default=None, metavar="DIR",
                    help="only train pg_late into DIR (late_pg_train.LatePGSettings; --pg-set key=value,...)")
    ap.add_argument("--pg-set", default="", help="LatePGSettings overrides, e.g. iterations=2,init=DIR")
    ap.add_argument("--noise-seeds", type=_non_negative, default=0, metavar="N",
                    help="the learned target under N run-time noise seeds (no LP): <out>/noise_seeds.md")
    ap.add_argument("--out", default="studies-out/late")
    ap.add_argument("--validate-policy", default="cem_late", metavar="NAME",
                    help="--validate: the conf policy (policies.machine.NAME) whose model_dir each DIR replaces")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides of conf/ (after --), e.g. of cem.machine's mixture")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.tune:
        tune_late(args.tune, out, args.overrides, args.tune_policies.split(",") if args.tune_policies else None)
        return
    if args.train_dqn:
        train_dqn(Path(args.train_dqn), args.dqn_set, out, args.overrides)
        return
    if args.train_pg:
        train_pg(Path(args.train_pg), args.pg_set, out, args.overrides)
        return
    if args.validate:
        write_json(out / "validate_late.json", validate_models(args.validate.split(","), args.validate_policy, args.overrides))
        return
    if args.hold_scan:
        r = hold_scan([float(x) for x in args.hold_scan.split(",")], args.overrides)
        write_json(out / "hold_scan.json", r)
        write_text(out / "hold_scan.md", pd.DataFrame(r["draws"]).to_markdown(index=False, floatfmt=".4g"))
        return
    def pols_of(cfg: dict[str, Any]) -> dict[str, Any]:
        return policies(cfg, args.cem_model, args.cem_late_model, args.dqn_late_model, args.pg_late_model)

    if args.noise_seeds:
        scen = scenarios([w for w in args.workloads.split(",") if w], args.heldout, args.heldout_tasks, args.overrides)
        write_json(out / "noise_seeds.json", noise_seeds(args.noise_seeds, scen, pols_of, out))
        return
    lp = None if args.no_lp else LPSettings(rho=args.lp_rho)
    if args.analyse:
        cfg = compose([*WORKLOADS[args.analyse_on], *args.overrides])
        pols = pols_of(cfg)
        table = analyse(cfg, pols, [n for n in args.analyse.split(",") if n in pols])
        write_frame(out / "analyse.csv", table)
        write_text(out / "analyse.md", markdown(table.round(3)))
        print(markdown(table.round(3)))
        return
    if args.gantt:
        cfg = compose(args.overrides)
        pols = pols_of(cfg)
        gantt(cfg, pols, [n for n in args.gantt_policies.split(",") if n in pols], Path(args.gantt))
        return
    if args.sweep:
        cfg = compose(args.overrides)
        frames = sweep(cfg, pols_of(cfg),
                       [float(x) for x in args.loads.split(",")], args.sweep_tasks, lp, out)
        r = config_roster(cfg)
        text = wide(frames) + "\n" + summary(frames, r.learned, r.heuristics)
        write_text(out / "late_sweep.md", text)
        print(text)
        return
    scen = scenarios([w for w in args.workloads.split(",") if w], args.heldout, args.heldout_tasks, args.overrides)
    frames = [evaluate(name, tasks, cluster, seed, pols_of(cfg), lp, out) for name, tasks, cluster, seed, cfg in scen]
    r = config_roster(scen[0][4] if scen else compose(args.overrides))
    text = wide(frames) + "\n" + summary(frames, r.learned, r.heuristics)
    write_text(out / "late.md", text)
    print(text)


if __name__ == "__main__":
    from hybridsched.errors import HybridschedError

    try:
        main()
    except HybridschedError as e:  # bad settings or model files: one line, exit 1 (as the stages)
        raise SystemExit(f"error: {e}") from None
