"""The per-scenario report: arrival against late dispatch, per scenario, against the LP bound.

Per scenario (the named workloads, the held-out draws of ``scenarios.heldout_workloads`` and
optionally a load sweep): the LP bound, every heuristic of either mode (the YAML weights,
tuned on the default workload's training split) and the learned policies, unchanged on every
scenario.  Tasks and noise as ``studies.quality_eval``: a named workload's test split with
noise seed ``sim.seed``; held-out draw k: tasks and noise from seed k; sweep: the default
test split's task mix at each load's rate, tasks and noise from seed 0.

The verdict is the report's target for one learned policy, one model, unchanged on every
scenario: its mean latency ÷ the best heuristic of any dispatch mode on the same scenario
(picked in hindsight per scenario), with a geometric mean at most ``targets.geomean`` and a
worst at most ``targets.worst``, over the named and held-out scenarios and over the load sweep.
Every learned policy's three figures (geometric mean, worst, scenarios at most 1.0) are
reported, and the best policy × the LP bound per scenario.

Used by the ``scenarios`` stage (:func:`run_report`) and by ``studies.late_eval``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybridsched.devices import Cluster
from hybridsched.errors import HybridschedError
from hybridsched.io import without_timings, write_frame, write_json, write_text
from hybridsched.kinds.machine.bound_memo import memo_lower_bound
from hybridsched.kinds.machine.bounds_lp import LPSettings
from hybridsched.kinds.machine.sim import simulate
from hybridsched.kinds.machine.workload import TaskTable, WorkloadSpec, generate, generate_splits, spec_from_config

Factories = dict[str, Callable[[], Any]]


@dataclass(frozen=True)
class Roster:
    """The report's policies, as their classes declare them (:func:`roster`): the heuristics
    placed at arrival (``arrival`` and ``ordered`` dispatch), the late-dispatch heuristics and the
    learned policies, each in the order of ``policies.machine``."""

    arrival: tuple[str, ...]
    late: tuple[str, ...]
    learned: tuple[str, ...]
    dispatch: dict[str, str] = field(default_factory=dict, compare=False)  # name -> its dispatch mode

    @property
    def heuristics(self) -> tuple[str, ...]:
        """Every heuristic, arrival ones first."""
        return (*self.arrival, *self.late)

    @property
    def learned_late(self) -> tuple[str, ...]:
        """The learned policies that dispatch late."""
        return tuple(n for n in self.learned if self.dispatch.get(n) == "late")


def roster(specs: dict[str, dict[str, Any]], skip_trained_by: Sequence[str], exclude: Sequence[str] = ()) -> Roster:
    """The policies of ``specs`` (``policies.machine``) the report runs: every heuristic and every
    learned policy (a class's ``role``) but those whose model a stage of ``skip_trained_by``
    writes (a class's ``trained_by``: ``scenarios.skip_trained_by``), less the names in
    ``exclude``.  Baselines and clairvoyant policies are not in it.  A stage named in
    ``skip_trained_by`` that trains none of ``specs`` is one line naming the setting."""
    from hybridsched.kinds.base import declaration

    declared = {n: declaration(spec) for n, spec in specs.items()}
    trainers = sorted({d.trained_by for d in declared.values() if d.trained_by is not None})
    stray = [s for s in skip_trained_by if s not in trainers]
    if stray:
        raise HybridschedError(f"scenarios.skip_trained_by: {stray} train(s) no policy of policies.machine; "
                               f"the learned policies' stages: {trainers}")
    kept = {n: d for n, d in declared.items() if n not in exclude}
    return Roster(arrival=tuple(n for n, d in kept.items() if d.role == "heuristic" and d.dispatch != "late"),
                  late=tuple(n for n, d in kept.items() if d.role == "heuristic" and d.dispatch == "late"),
                  learned=tuple(n for n, d in kept.items()
                                if d.role == "learned" and d.trained_by not in skip_trained_by),
                  dispatch={n: d.dispatch for n, d in kept.items()})


def config_roster(cfg: dict[str, Any]) -> Roster:
    """:func:`roster` of a composed config (``policies.machine`` and ``scenarios.skip_trained_by``
    / ``.exclude``): the studies' policy lists are the pipeline's."""
    s = cfg["scenarios"]
    return roster(cfg["policies"]["machine"], tuple(s["skip_trained_by"]), tuple(s.get("exclude") or ()))


def bound_of(tasks: TaskTable, cluster: Cluster, real, lp: LPSettings | None,
             memo: str | Path | None = None) -> dict[str, Any]:
    """The lower bounds as a dict; ``memo``: the folder of the content-addressed memo
    (``paths.bound_cache``, :mod:`bound_memo`), so the same tasks, noise and grid are solved
    once; None: solved here."""
    return asdict(memo_lower_bound(tasks, cluster, real, lp, memo))


def evaluate(name: str, tasks: TaskTable, cluster: Cluster, seed: int, pols: Factories, lp: LPSettings | None,
             out: Path | None, quiet: bool = False, memo: str | Path | None = None) -> pd.DataFrame:
    """One row per policy (its dispatch mode, mean and P99 latency) plus the bounds, on one
    scenario; noise from ``seed``.  With ``out``: the rows are written to ``<out>/<name>.csv``;
    ``memo``: the bound memo's folder (:func:`bound_of`), ``<out>/bounds`` when None and ``out`` is set."""
    real = cluster.sample_noise(len(tasks), np.random.default_rng(seed))
    t0 = time.perf_counter()
    b = bound_of(tasks, cluster, real, lp, out / "bounds" if memo is None and out is not None else memo)
    rows = []
    for pname, make in pols.items():
        policy = make()
        tr = simulate(tasks, cluster, policy, real)
        lat = tr.end - tr.arrival
        rows.append({"scenario": name, "policy": pname, "dispatch": getattr(policy, "dispatch", "arrival"),
                     "mean_latency": float(lat.mean()), "p99_latency": float(np.percentile(lat, 99))})
    df = pd.DataFrame(rows).assign(bound_lp=b["mean_latency_lp"], bound_solo=b["mean_latency_solo"], bound=b["mean_latency"])
    if out is not None:
        write_frame(out / f"{name}.csv", df)
    if not quiet:
        print(f"{name}: {time.perf_counter() - t0:.0f} s (LP {b['mean_latency_lp']:.4g} s)")
        print(df[["policy", "mean_latency", "p99_latency"]].round(4).to_string(index=False))
    return df


def ratios(frames: Sequence[pd.DataFrame], learned: Sequence[str], heuristics: Sequence[str]) -> pd.DataFrame:
    """One row per scenario, numbers only: the bound, the best of ``heuristics`` in each mode (a
    policy's mode is its ``dispatch``; a policy in neither list only counts as the best policy), each
    learned policy's latency and its ratios to the best heuristic of its own mode and to the
    best of any mode (``best_heuristic``, the ordered mode too), the best learned ratio of its
    own mode and the best policy × the bound."""
    rows = []
    for df in frames:
        d = df.set_index("policy")
        m = d["mean_latency"]
        b = float(df["bound"].iloc[0])
        row: dict[str, Any] = {"scenario": df["scenario"].iloc[0], "bound": b}
        best: dict[str, float] = {}
        for mode in ("arrival", "late"):
            h = m[(d["dispatch"] == mode) & d.index.isin(list(heuristics))]
            row[f"best_{mode}_heuristic"] = h.idxmin() if len(h) else None
            row[f"best_{mode}"] = best[mode] = float(h.min()) if len(h) else float("nan")
        row["late_vs_arrival"] = best["late"] / best["arrival"]
        h = m[d.index.isin(list(heuristics))]  # every dispatch mode, the ordered one too
        row["best_heuristic"] = h.idxmin() if len(h) else None
        row["best_heuristic_latency"] = any_best = float(h.min()) if len(h) else float("nan")
        lr = []
        for name in learned:
            if name in m.index:
                mode = d.loc[name, "dispatch"]
                row[name] = float(m[name])
                row[f"{name}_vs_heuristic"] = float(m[name]) / best[mode]
                row[f"{name}_vs_best"] = float(m[name]) / any_best
                row[f"{name}_dispatch"] = mode
                lr.append((row[f"{name}_vs_heuristic"], name))
        row["best_learned"] = min(lr)[1] if lr else None
        row["best_learned_vs_heuristic"] = min(lr)[0] if lr else float("nan")
        row["best_policy"] = m.idxmin()
        row["best_policy_x_bound"] = float(m.min()) / b
        rows.append(row)
    return pd.DataFrame(rows)


def summary(frames: Sequence[pd.DataFrame], learned: Sequence[str], heuristics: Sequence[str]) -> str:
    """One markdown row per scenario: LP bound, best heuristic per mode, each learned policy (÷
    the best heuristic of any mode) and the best policy × the bound."""
    rows = []
    for r in ratios(frames, learned, heuristics).to_dict(orient="records"):
        row = {"scenario": r["scenario"], "LP bound": r["bound"],
               "best arrival heuristic": f"{r['best_arrival']:.4g} ({r['best_arrival_heuristic']})",
               "best late heuristic": f"{r['best_late']:.4g} ({r['best_late_heuristic']})",
               "late ÷ arrival (best heuristics)": round(r["late_vs_arrival"], 3)}
        for name in learned:
            if name in r and not pd.isna(r[name]):
                row[f"{name} ({r[f'{name}_dispatch']})"] = f"{r[name]:.4g} ({r[f'{name}_vs_best']:.3f}×)"
        row["best policy × LP"] = f"{r['best_policy_x_bound']:.2f} ({r['best_policy']})"
        rows.append(row)
    return markdown(pd.DataFrame(rows))


def wide_frame(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Mean latency of every policy per scenario, with the LP bound (one row per scenario)."""
    rows = []
    for df in frames:
        m = df.set_index("policy")["mean_latency"]
        rows.append({"scenario": df["scenario"].iloc[0], "LP bound": float(df["bound"].iloc[0]),
                     **{k: float(v) for k, v in m.items()}})
    return pd.DataFrame(rows)


def wide(frames: Sequence[pd.DataFrame]) -> str:
    """:func:`wide_frame` as a markdown table."""
    return markdown(wide_frame(frames))


def markdown(df: pd.DataFrame) -> str:
    """A plain markdown table (no tabulate: its version check fails in some environments)."""
    def fmt(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


# ---- the pipeline's stage ---------------------------------------------------------------------


@dataclass(frozen=True)
class ScenarioSettings:
    """The ``scenarios`` config block (conf/scenarios/default.yaml), with its policies resolved
    (:func:`roster`)."""

    heuristics: tuple[str, ...] = ()
    learned: tuple[str, ...] = ()
    heldout: int = 5
    heldout_tasks: int = 3000
    max_tasks: int | None = None        # cap on a named workload's test split (None: its n_test)
    lp: LPSettings | None = field(default_factory=lambda: LPSettings(rho=1.0))
    loads: tuple[float, ...] = ()
    sweep_tasks: int = 1500
    workers: int = 1
    split: str = "test"                 # the named workloads' split: test, or train (to choose among designs)
    geomean_target: float = 0.98        # one learned policy ÷ the per-scenario best heuristic ...
    worst_target: float = 1.05          # ... geometric mean and worst, on the scenarios and the sweep

    @classmethod
    def from_dict(cls, s: dict[str, Any], specs: dict[str, dict[str, Any]]) -> ScenarioSettings:
        """From the config block and ``specs`` (``policies.machine``, whose classes say which
        policies the report runs: :func:`roster`); ``lp.enabled: false``: the solo bound only."""
        r = roster(specs, tuple(s["skip_trained_by"]), tuple(s.get("exclude") or ()))
        lp = s.get("lp") or {}
        grid = (LPSettings(delta=lp.get("delta"), rho=float(lp.get("rho", 4.0)), max_levels=int(lp.get("max_levels", 24)),
                           piece_cuts=int(lp.get("piece_cuts", LPSettings.piece_cuts)))
                if lp.get("enabled", True) else None)
        return cls(heuristics=r.heuristics, learned=r.learned, heldout=int(s["heldout"]),
                   heldout_tasks=int(s["heldout_tasks"]),
                   max_tasks=None if s.get("max_tasks") is None else int(s["max_tasks"]), lp=grid,
                   loads=tuple(float(x) for x in s.get("loads") or ()), sweep_tasks=int(s["sweep_tasks"]),
                   workers=int(s["workers"]), split=str(s.get("split", "test")),
                   geomean_target=float(s["targets"]["geomean"]),
                   worst_target=float(s["targets"]["worst"]))


def factories(specs: dict[str, dict[str, Any]], names: Sequence[str]) -> Factories:
    """Name -> factory of a fresh policy from ``policies.machine.<name>``; a learned policy's
    model must exist (one line naming the file and the setting otherwise)."""
    from hybridsched.kinds.base import instantiate

    unknown = [n for n in names if n not in specs]
    if unknown:
        raise HybridschedError(f"scenarios: unknown machine policy name(s) {unknown}; known: {sorted(specs)}")
    for n in names:
        d = specs[n].get("model_dir")
        if d is not None and not (Path(d).is_dir() and any(Path(d).iterdir())):
            raise HybridschedError(f"policies.machine.{n}.model_dir: no trained model in {d} (`dvc repro train_late` "
                                   f"or train_cem makes the pipeline's)")

    def make(name: str) -> Callable[[], Any]:
        return lambda: instantiate(specs[name])

    return {n: make(n) for n in names}


def scenario_jobs(workloads: dict[str, dict[str, Any]], cluster: Cluster, s: ScenarioSettings,
                  sim_seed: int) -> list[tuple[str, TaskTable, int, dict[str, Any]]]:
    """(name, tasks, noise seed, extra columns) of every scenario: the named workloads' test
    splits (their training splits with ``s.split == "train"``), the held-out draws, the sweep's
    loads."""
    from hybridsched.kinds.machine.scenarios import heldout_workloads, rate_for_load

    jobs: list[tuple[str, TaskTable, int, dict[str, Any]]] = []
    for name, w in workloads.items():
        if w.get("kind", "machine") != "machine":
            raise HybridschedError(f"scenarios.workloads.{name}.kind: must be 'machine', got {w['kind']!r}")
        if s.max_tasks is not None:
            w = {**w, "n_train": min(int(w["n_train"]), s.max_tasks), "n_test": min(int(w["n_test"]), s.max_tasks)}
        train, test = generate_splits(w, cpu_gflops=cluster.cpu_gflops)
        jobs.append((name, train if s.split == "train" else test, sim_seed, {"kind": "workload"}))
    if s.heldout:
        for k, w in enumerate(heldout_workloads(s.heldout, cluster)):
            spec = WorkloadSpec(**{key: v for key, v in w.items() if key not in ("name", "offered_load")})
            tasks = generate(spec, s.heldout_tasks, np.random.default_rng(k), cpu_gflops=cluster.cpu_gflops)
            jobs.append((w["name"], tasks, k, {"kind": "heldout", "offered_load": w["offered_load"]}))
    if s.loads:
        if "default" not in workloads:
            raise HybridschedError("scenarios.loads: the load sweep uses scenarios.workloads.default's task mix; "
                                   "it is missing")
        spec = spec_from_config(workloads["default"], "test")
        for load in s.loads:
            rate = rate_for_load(spec, cluster, load)
            sw = WorkloadSpec(**{**{k: getattr(spec, k) for k in spec.__dataclass_fields__}, "rate": rate})
            tasks = generate(sw, s.sweep_tasks, np.random.default_rng(0), cpu_gflops=cluster.cpu_gflops)
            jobs.append((f"load{load:g}", tasks, 0, {"kind": "sweep", "offered_load": load, "rate": rate}))
    return jobs


def _run_job(args: tuple) -> pd.DataFrame:
    """One scenario (a worker process's job): every policy and the bound."""
    name, tasks, seed, extra, cluster, specs, names, lp, memo = args
    df = evaluate(name, tasks, cluster, seed, factories(specs, names), lp, None, quiet=True, memo=memo)
    return df.assign(**{k: v for k, v in extra.items()})


def run_report(workloads: dict[str, dict[str, Any]], cluster: Cluster, specs: dict[str, dict[str, Any]],
               s: ScenarioSettings, sim_seed: int, out: Path, plots: Path,
               bound_cache: str | Path | None = None) -> dict[str, Any]:
    """Every scenario, every policy: writes under ``out`` (``scenarios/`` and ``scenarios.json``)
    and ``plots`` (``scenarios.csv``, ``scenarios/scenarios.png``); returns the metrics.
    ``bound_cache``: the folder of the LP bound memo (``paths.bound_cache``; None: none).

    ``workloads``: name -> workload config (their test splits are the named scenarios);
    ``specs``: ``policies.machine``.  Jobs run in ``s.workers`` processes; each job is seeded,
    so the numbers do not depend on the worker count."""
    names = [*s.heuristics, *s.learned]
    factories(specs, names)  # unknown names and missing models fail before any work
    t0 = time.perf_counter()
    jobs = scenario_jobs(workloads, cluster, s, sim_seed)
    args = [(n, t, seed, extra, cluster, specs, names, s.lp, bound_cache) for n, t, seed, extra in jobs]
    if s.workers > 1 and len(args) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(s.workers, len(args))) as pool:
            frames = list(pool.map(_run_job, args))
    else:
        frames = [_run_job(a) for a in args]
    for df in frames:
        b = df.iloc[0]
        lp = "off" if pd.isna(b["bound_lp"]) else f"{b['bound_lp']:.4g}"
        print(f"scenarios: {b['scenario']}: bound {b['bound']:.4g} s (LP {lp}), best {df['mean_latency'].min():.4g} s "
              f"({df.loc[df['mean_latency'].idxmin(), 'policy']})")
    main = [f for f in frames if f["kind"].iloc[0] != "sweep"]
    swept = [f for f in frames if f["kind"].iloc[0] == "sweep"]
    metrics = verdicts(ratios(main, s.learned, s.heuristics), s,
                       ratios(swept, s.learned, s.heuristics) if swept else None)
    write_outputs(main, swept, metrics, s, out, plots)
    metrics["wall_s"] = round(time.perf_counter() - t0, 1)  # printed and tracked, not in the committed json
    return metrics


def one_policy(r: pd.DataFrame, learned: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each learned policy's mean latency ÷ the best heuristic of any mode, over the scenarios
    of ``r`` (:func:`ratios`): geometric mean, worst (and where), and how many at most 1.0."""
    out: dict[str, dict[str, Any]] = {}
    for n in learned:
        col = f"{n}_vs_best"
        if col not in r or r[col].isna().any():
            continue
        x = r[col].to_numpy(dtype=float)
        worst = int(np.argmax(x))
        out[n] = {"geomean": round(float(np.exp(np.log(x).mean())), 4), "worst": round(float(x[worst]), 4),
                  "worst_at": str(r["scenario"].iloc[worst]), "at_most_1": int((x <= 1.0).sum()), "of": len(x)}
    return out


def verdicts(r: pd.DataFrame, s: ScenarioSettings, swept: pd.DataFrame | None = None) -> dict[str, Any]:
    """The report's target against the ratios of :func:`ratios` (one row per scenario; ``swept``:
    the load sweep's, or None): per learned policy its :func:`one_policy` figures on the
    scenarios and on the sweep, met when both are within ``geomean_target`` and
    ``worst_target``; per scenario the best policy, its multiple of the bound and the best
    learned policy."""
    per = {row["scenario"]: {"bound": round(row["bound"], 6), "best_policy": row["best_policy"],
                             "best_policy_x_bound": round(row["best_policy_x_bound"], 4),
                             "best_heuristic": row["best_heuristic"],
                             "best_learned": row["best_learned"],
                             "best_learned_vs_heuristic": round(row["best_learned_vs_heuristic"], 4),
                             "late_vs_arrival": round(row["late_vs_arrival"], 4)}
           for row in r.to_dict(orient="records")}
    on = {"scenarios": one_policy(r, s.learned)}
    if swept is not None:
        on["load_sweep"] = one_policy(swept, s.learned)

    def met(n: str) -> bool:
        return all(n in f and f[n]["geomean"] <= s.geomean_target and f[n]["worst"] <= s.worst_target
                   for f in on.values())

    policies = {n: {**{k: f[n] for k, f in on.items() if n in f}, "met": met(n)} for n in s.learned if n in on["scenarios"]}
    # one policy across the scenarios: picking the best learned policy per scenario is a choice
    # made on the test scenarios, so the verdict counts single policies only
    return {"n_scenarios": len(r),
            "target": {"geomean": s.geomean_target, "worst": s.worst_target,
                       "what": "one learned policy's mean latency ÷ the best heuristic of any mode per scenario: "
                               f"geometric mean <= {s.geomean_target:g} and worst <= {s.worst_target:g}, "
                               f"over the scenarios{' and over the load sweep' if swept is not None else ''}"},
            "policies": policies, "met_by": [n for n, v in policies.items() if v["met"]], "scenarios": per}


def write_outputs(main: list[pd.DataFrame], swept: list[pd.DataFrame], metrics: dict[str, Any],
                  s: ScenarioSettings, out: Path, plots: Path) -> list[Path]:
    """``scenarios/{table.csv, wide.md, summary.csv, summary.md, load_sweep.*}``, ``scenarios.json``
    under ``out``; ``scenarios.csv`` and ``scenarios/scenarios.png`` under ``plots``."""
    from hybridsched.kinds.machine.scenarios import write_sweep

    d = out / "scenarios"
    d.mkdir(parents=True, exist_ok=True)
    paths = [d / "table.csv", d / "summary.csv", d / "wide.md", d / "summary.md"]
    write_frame(paths[0], pd.concat([*main, *swept], ignore_index=True))
    r = ratios(main, s.learned, s.heuristics)
    write_frame(paths[1], r)
    write_text(paths[2], wide(main))
    write_text(paths[3], summary(main, s.learned, s.heuristics) + "\n" + verdict_lines(metrics))
    if swept:
        table = pd.concat(swept, ignore_index=True)
        paths += write_sweep(table, d, f"late against arrival dispatch, default task mix, {s.sweep_tasks} tasks per load")
        write_text(d / "load_sweep_summary.md", wide(swept) + "\n" + summary(swept, s.learned, s.heuristics))
        paths.append(d / "load_sweep_summary.md")
    paths += plot_ratios(r, s, plots)
    write_json(out / "scenarios.json", without_timings(metrics))
    return [*paths, out / "scenarios.json"]


def verdict_lines(m: dict[str, Any]) -> str:
    """The target and every learned policy's figures as markdown bullets."""
    t = m["target"]
    lines = [f"- target: {t['what']} — {'met by ' + ', '.join(m['met_by']) if m['met_by'] else 'missed'}"]
    for n, v in m["policies"].items():
        figs = "; ".join(f"{where.replace('_', ' ')}: geometric mean {f['geomean']:.3f}, worst {f['worst']:.3f} "
                         f"({f['worst_at']}), ≤ 1.0 on {f['at_most_1']} of {f['of']}"
                         for where, f in v.items() if where != "met")
        lines.append(f"- {n}: {figs}")
    return "\n".join(lines) + "\n"


def plot_ratios(r: pd.DataFrame, s: ScenarioSettings, plots: Path) -> list[Path]:
    """``scenarios.csv`` (long: scenario, series, ratio; for ``dvc plots``) and
    ``scenarios/scenarios.png`` (the stage's image folder): each learned policy ÷ the best
    heuristic of any mode (a log axis when the ratios span a decade), and the best policy × the
    LP bound."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hybridsched.io import atomic_dir
    from hybridsched.plots import spans_decades

    plots.mkdir(parents=True, exist_ok=True)
    rows = [{"scenario": row["scenario"], "series": f"{n} ÷ best heuristic",
             "ratio": round(float(row[f"{n}_vs_best"]), 4)}
            for row in r.to_dict(orient="records") for n in s.learned if f"{n}_vs_best" in row
            and not pd.isna(row[f"{n}_vs_best"])]
    rows += [{"scenario": row["scenario"], "series": "best policy × LP bound", "ratio": round(row["best_policy_x_bound"], 4)}
             for row in r.to_dict(orient="records")]
    long = pd.DataFrame(rows, columns=["scenario", "series", "ratio"])
    csv, png = plots / "scenarios.csv", plots / "scenarios" / "scenarios.png"
    write_frame(csv, long)
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.5))
    learned = long[long["series"] != "best policy × LP bound"]
    series = list(dict.fromkeys(learned["series"]))
    x = np.arange(len(r))
    for k, name in enumerate(series):
        g = learned[learned["series"] == name].set_index("scenario").reindex(r["scenario"])
        a.bar(x + (k - (len(series) - 1) / 2) * 0.8 / max(len(series), 1), g["ratio"], 0.8 / max(len(series), 1),
              label=name)
    a.axhline(1.0, color="k", lw=0.8)
    a.axhline(s.worst_target, color="r", ls="--", lw=0.8, label=f"target: worst ≤ {s.worst_target:g}")
    if spans_decades(learned["ratio"]):
        a.set_yscale("log")
        a.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        a.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}" if round(v / 10 ** np.floor(np.log10(v))) in (2, 5) else ""))
    a.set_xticks(x, r["scenario"], rotation=45, ha="right")
    a.set_ylabel("mean latency ÷ best heuristic (any mode)")
    a.legend(fontsize=7)
    b.bar(x, r["best_policy_x_bound"], color="tab:gray")
    b.set_yscale("log")
    b.set_ylim(bottom=1.0)
    b.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    b.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}" if v in (2, 3, 5) else ""))
    b.set_xticks(x, r["scenario"], rotation=45, ha="right")
    b.set_ylabel("best policy's mean latency × LP bound")
    for ax in (a, b):
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    with atomic_dir(png.parent) as tmp:
        fig.savefig(tmp / png.name, dpi=100, format="png")
    plt.close(fig)
    return [csv, png]

