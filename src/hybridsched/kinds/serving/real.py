"""Real mode: serve a short request stream through the real models on this machine's CPU, then
compare it with the simulator on the same stream.

* **Lanes**: one worker thread per lane, each running one batch at a time on one CPU thread
  (``torch.set_num_threads(1)`` in the thread; an ONNX Runtime InferenceSession per lane with
  ``intra_op_num_threads=1``).  The models are profile.py's (transformers configs, random
  weights, ``HF_HUB_OFFLINE=1``); the lanes share one torch model per architecture.
* **Dispatcher** (the calling thread): the simulator's own decision step at wall-clock time —
  ``engine.decide`` (free lanes, token memory, predictive drops, online correction, candidate
  batches within the window and up to the max batch) and the policy's numba kernel, then
  ``engine.start_batch``.  A candidate is eligible only once it has closed, and the clock
  guarantees that every request in it has arrived by then, so no future is seen.
* **Trace**: the simulator's schema (``engine.trace_frames``); ``start``/``end`` are the
  worker's clock readings around the inference call.

:func:`sim_vs_real` runs both on one stream and writes ``sim_vs_real.{csv,md}``: P50 / P95
per policy and class, measured and simulated, and their relative gap (target: within 15 %).
Simulations: ``sim`` with the configured latency table as served (the profile, measured
earlier) for every batch; for a profile with single-lane rows ``alone``, ``dyn`` (contention
``start``) and ``overlap`` (contention ``overlap``, the pipeline's default); and ``cal`` with the
served table scaled per variant to the service times measured during the real run (median
ratio) and the service noise measured around it (lognormal sigma), which separates a drifted
table (a shared machine's load changes) from the simulator's queueing and batching model.
Command: ``python -m studies.real workload=serving`` (studies/real.py), or the evaluate stage
with ``serving.real.enabled=true``.
"""

from __future__ import annotations

import queue
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybridsched.errors import HybridschedError
from hybridsched.kinds.serving import engine as E

TARGET_GAP = 0.15  # |sim - real| / real of P50 and P95


class Lanes:
    """Worker threads, one per lane, with the real models of the variants a stream uses."""

    def __init__(self, settings, variants: np.ndarray, n_lanes: int, workdir: str) -> None:
        from hybridsched.kinds.serving.profile import IMAGE, Runner, build_model

        self.settings = settings
        models = {m: build_model(m) for m in {settings.variant_names(int(v))[0] for v in variants}}
        # runners[lane][variant]: the torch model is shared, each lane has its own ORT session
        self.runners = [{int(v): Runner(*settings.variant_names(int(v))[:2], threads=1, workdir=workdir,
                                        model=models[settings.variant_names(int(v))[0]]) for v in variants}
                        for _ in range(n_lanes)]
        self.x = np.random.default_rng(0).standard_normal((settings.max_batch, *IMAGE), dtype=np.float32)
        self._start(n_lanes)

    def _start(self, n_lanes: int) -> None:
        """The job queues, the completion queue and one worker thread per lane."""
        self.jobs = [queue.Queue() for _ in range(n_lanes)]
        self.done: queue.Queue = queue.Queue()
        self.t0 = time.perf_counter()
        self.threads = [threading.Thread(target=self._work, args=(k,), daemon=True) for k in range(n_lanes)]
        for th in self.threads:
            th.start()

    def clock(self) -> float:
        """Seconds since the stream's time 0."""
        return time.perf_counter() - self.t0

    def _work(self, lane: int) -> None:
        import torch

        torch.set_num_threads(1)  # one CPU thread per lane
        while (job := self.jobs[lane].get()) is not None:
            nb, v, s = job
            try:
                t_start = self.clock()
                self._infer(lane, v, s)
                self.done.put((lane, nb, t_start, self.clock(), None))
            except Exception as e:  # surfaced in the dispatcher
                self.done.put((lane, nb, 0.0, 0.0, e))

    def _infer(self, lane: int, v: int, s: int) -> None:
        self.runners[lane][v].infer(self.x[:s])

    def warm_up(self, sizes=(1, 2)) -> None:
        """Untimed first calls (lazy initialisation) of every runner on every lane."""
        for lane in self.runners:
            for r in lane.values():
                for b in sizes:
                    r.infer(self.x[:b])

    def close(self) -> None:
        for q in self.jobs:
            q.put(None)
        for th in self.threads:
            th.join()


class _Dispatcher:
    """The simulator's decision state for one real run: what has arrived, closed and started."""

    def __init__(self, reqs, settings, policy, pred_lat: np.ndarray, n_lanes: int) -> None:
        n, G = len(reqs), settings.n_groups
        self.reqs, self.G = reqs, G
        self.gptr, self.gidx = E.group_index(reqs.group, G)
        self.gvar, self.gcls = E.group_arrays(settings)
        self.pred = np.nan_to_num(pred_lat, nan=np.inf)
        self.tok = settings.token_table()
        self.pdata, self.pparams = policy.kernel_data(settings, pred_lat)
        self.choose = getattr(policy.kernel, "__func__", policy.kernel)  # the kernel, not bound to the policy
        self.ep = E.engine_params(settings, policy)
        self.head, self.cand_end, self.cand_s = self.gptr[:G].copy(), np.empty(G, np.int64), np.zeros(G, np.int64)
        self.ready, self.trim_end, self.trim_s = np.full(G, np.inf), np.empty(G, np.int64), np.zeros(G, np.int64)
        E.init_candidates(self.gptr, self.gidx, reqs.arrival, reqs.size, self.ep, self.head, self.cand_end,
                          self.cand_s, self.ready)
        # a busy lane is free at +inf until it reports
        self.lane_free, self.run_tok = np.zeros(n_lanes), np.zeros(n_lanes)
        self.run_var, self.run_ratio = np.full(n_lanes, -1, np.int64), np.ones(n_lanes)
        self.corr = np.ones(self.pred.shape[0])
        self.gs, self.elig = np.zeros((G + 1, E.NF)), np.empty(G, np.int64)
        self.gs[G, E.G_MAX_BATCH] = settings.max_batch
        self.r_batch, self.r_drop = np.full(n, -2, np.int64), np.full(n, np.nan)
        self.b = {k: np.empty(n, dt) for k, dt in E.BATCH_FIELDS}
        self.nb = 0

    def finished(self, lane: int, k: int, t_start: float, t_end: float) -> None:
        """Batch ``k`` ran on ``lane`` from ``t_start`` to ``t_end``: the lane and its tokens are free."""
        b = self.b
        b["start"][k], b["end"][k] = t_start, t_end
        self.lane_free[lane] = t_end
        self.run_ratio[lane] = (t_end - t_start) / self.pred[self.gvar[b["group"][k]], b["samples"][k]]

    def step(self, t: float) -> tuple[int, int, int, int] | None:
        """One decision at time ``t``: ``(lane, batch, variant, samples)`` of the batch started, or
        None when no candidate is eligible."""
        r = self.reqs
        ne = E.decide(t, self.gptr, self.gidx, r.arrival, r.deadline, r.size, self.gvar, self.gcls, self.pred,
                      self.tok, self.ep, self.lane_free, self.run_tok, self.run_var, self.run_ratio, self.corr,
                      self.head, self.cand_end, self.cand_s, self.ready, self.trim_end, self.trim_s, self.gs,
                      self.elig, self.r_batch, self.r_drop)
        if ne <= 0:
            return None
        g = int(self.choose(t, self.gs, self.elig, ne, self.pdata, self.pparams))
        if g < 0 or g >= self.G or self.gs[g, E.ELIGIBLE] == 0.0:
            g = int(self.elig[0])
        lane = int(np.argmin(self.lane_free))  # as the simulator: the lane free earliest
        v, s, nb, b = int(self.gvar[g]), int(self.trim_s[g]), self.nb, self.b
        self.lane_free[lane], self.run_tok[lane], self.run_var[lane] = np.inf, self.tok[v, s], v
        b["lane"][nb], b["group"][nb], b["samples"][nb], b["tokens"][nb] = lane, g, s, self.tok[v, s]
        b["first"][nb], b["count"][nb] = self.head[g], self.trim_end[g] - self.head[g]
        E.start_batch(g, nb, self.gptr, self.gidx, r.arrival, r.size, self.ep, self.head, self.cand_end, self.cand_s,
                      self.ready, self.trim_end, self.r_batch)
        self.nb += 1
        return lane, nb, v, s


def serve(reqs, settings, policy, pred_lat: np.ndarray, lanes: Lanes) -> E.Trace:
    """Serve ``reqs`` in real time on ``lanes`` with ``policy``; its trace (engine schema)."""
    E.check_inputs(reqs, settings, pred_lat, pred_lat)
    n_lanes = len(lanes.jobs)
    # one untimed decision on a throwaway state first: it compiles the numba calls (decide, the policy's
    # kernel, start_batch), which would otherwise delay the first requests of the first run by ~1.6 s
    warm = _Dispatcher(reqs, settings, policy, pred_lat, n_lanes)
    warm.step(float(warm.ready.min()))  # when the first candidate closes: nothing is late yet
    d = _Dispatcher(reqs, settings, policy, pred_lat, n_lanes)
    busy = 0
    lanes.t0 = time.perf_counter()
    while True:
        while True:  # completions first: they free lanes and tokens
            try:
                lane, k, t_start, t_end, err = lanes.done.get_nowait()
            except queue.Empty:
                break
            if err is not None:
                raise HybridschedError(f"real mode: inference failed on lane {lane}: {type(err).__name__}: {err}")
            d.finished(lane, k, t_start, t_end)
            busy -= 1
        t = lanes.clock()
        if d.ready.min() == np.inf and busy == 0:
            break
        if busy < n_lanes and d.ready.min() <= t:
            started = d.step(t)
            if started is not None:
                lane, nb, v, s = started
                lanes.jobs[lane].put((nb, v, s))
                busy += 1
                continue
        # sleep until the next candidate closes or a lane reports
        future = d.ready[(d.ready > t) & np.isfinite(d.ready)]
        wait = float(future.min() - t) if len(future) else None
        try:
            lanes.done.put(lanes.done.get(timeout=wait))  # handled at the top of the loop
        except queue.Empty:
            pass
    raw = E.RawRun(d.r_batch, d.r_drop, d.b, d.nb, np.zeros((0, 1), np.float32), np.zeros(0, np.int64))
    df, batches = E.trace_frames(reqs, policy.name, raw)
    return E.Trace(policy.name, df, batches, raw.obs, raw.dec_batch)


def _percentiles(tr: pd.DataFrame, classes) -> dict[str, dict[str, float]]:
    out = {}
    for c in ("all", *classes):
        sub = tr if c == "all" else tr[tr["cls"] == c]
        lat = sub.loc[~sub["dropped"], "latency"].to_numpy() * 1e3
        q = np.quantile(lat, [0.5, 0.95]) if len(lat) else np.full(2, np.nan)
        out[c] = {"n": len(sub), "p50_ms": float(q[0]), "p95_ms": float(q[1]),
                  "service_ms": float(sub["service"].mean() * 1e3) if len(lat) else float("nan"),
                  "slo_attainment": float(sub["met_slo"].mean()) if len(sub) else float("nan")}
    return out


def compare_traces(real: dict[str, pd.DataFrame], sims: dict[str, dict[str, pd.DataFrame]], classes) -> pd.DataFrame:
    """One row per (policy, class incl. ``all``): measured P50/P95, mean service time and SLO
    attainment, the same for each simulation in ``sims`` (prefix -> policy -> trace), and the
    relative gaps ``<prefix>_p50_gap = (sim - real) / real`` (and p95)."""
    rows = []
    for name in real:
        pr = _percentiles(real[name], classes)
        ps = {prefix: _percentiles(traces[name], classes) for prefix, traces in sims.items()}
        for c in pr:
            row = {"policy": name, "class": c, "n": pr[c]["n"]}
            for k in ("p50_ms", "p95_ms", "service_ms", "slo_attainment"):
                row[f"real_{k}"] = pr[c][k]
                for prefix in sims:
                    row[f"{prefix}_{k}"] = ps[prefix][c][k]
            for prefix in sims:
                for k in ("p50_ms", "p95_ms"):
                    row[f"{prefix}_{k[:3]}_gap"] = (ps[prefix][c][k] - pr[c][k]) / pr[c][k] if pr[c][k] > 0 else float("nan")
                row[f"{prefix}_within"] = (abs(row[f"{prefix}_p50_gap"]) <= TARGET_GAP) & \
                    (abs(row[f"{prefix}_p95_gap"]) <= TARGET_GAP)
            rows.append(row)
    return pd.DataFrame(rows)


def by_backend(real: dict[str, pd.DataFrame], sim: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """P50 / P95 per policy, class and backend, measured and simulated (one simulation), with the
    gaps: a class that mixes backends of different speeds has a two-mode latency, and its P50 can
    fall between the modes, where a small shift in one mode's tail moves it far; these rows show
    whether each mode is simulated well."""
    rows = []
    for name, tr in real.items():
        st = sim[name]
        for (c, b), sub in tr.groupby(["cls", "backend"]):
            q = {w: _percentiles(t[(t["cls"] == c) & (t["backend"] == b)], ())["all"]
                 for w, t in (("real", sub), ("sim", st))}
            row = {"policy": name, "class": c, "backend": b, "n": q["real"]["n"]}
            for k in ("p50_ms", "p95_ms"):
                row[f"real_{k}"], row[f"sim_{k}"] = q["real"][k], q["sim"][k]
                row[f"{k[:3]}_gap"] = (q["sim"][k] - q["real"][k]) / q["real"][k] if q["real"][k] > 0 else float("nan")
            rows.append(row)
    return pd.DataFrame(rows)


def calibrated_table(lat: np.ndarray, batches: list[pd.DataFrame], settings) -> tuple[np.ndarray, float, dict[str, float]]:
    """(``lat`` with each variant scaled by the median of measured service / table latency over
    the real batches of that variant, the lognormal sigma of measured service around that,
    the factors by variant name): the latency table and noise this machine had *during* the run."""
    b = pd.concat(batches, ignore_index=True)
    v = (b["group"].to_numpy() // len(settings.classes)).astype(int)
    ratio = pd.Series((b["end"] - b["start"]).to_numpy() / lat[v, b["samples"].to_numpy()])
    med = ratio.groupby(v).median()
    resid = np.log(ratio.to_numpy() / med.loc[v].to_numpy())
    sigma = float(np.std(resid)) if len(resid) > 1 else 0.0
    out = lat.copy()
    for var, r in med.items():
        out[var] *= r
    return out, sigma, {"/".join(settings.variant_names(int(k))[:2]): round(float(r), 3) for k, r in med.items()}


def real_stream(workload: dict[str, Any], settings, real_cfg: dict[str, Any], batch1_s: np.ndarray):
    """The real run's requests: the workload's arrival process and mix at ``real.rate`` for
    ``real.duration_s`` seconds (a different seed from train and test)."""
    from hybridsched.kinds.serving.workload import generate_stream, to_requests

    rate, duration = float(real_cfg.get("rate", 2.0)), float(real_cfg.get("duration_s", 30.0))
    if not (rate > 0 and duration > 0):
        raise HybridschedError(f"serving.real: rate and duration_s must be > 0, got {rate} and {duration}")
    w = {**workload, "rate": rate, **({"mix": real_cfg["mix"]} if real_cfg.get("mix") else {})}
    df = generate_stream(w, settings, max(1, int(round(rate * duration))), int(workload.get("seed", 0)) + 7, 0,
                         batch1_s)
    return to_requests(df, settings, "serving.real stream")


OVERLAP_BINS = (0.0, 1e-3, 0.25, 0.5, 0.75, 1.0)  # share of a batch's time with another lane busy
OVERLAP_LABELS = ("none (< 0.1 %)", "0.1-25 %", "25-50 %", "50-75 %", "75-100 %")


def service_vs_overlap(real: dict[str, pd.DataFrame], settings, alone: np.ndarray, served: np.ndarray) -> pd.DataFrame:
    """What the contention model rests on, measured: per policy, backend and bin of overlap (the
    share of a real batch's time during which another lane ran a batch), the batches, and the
    median of measured service / the profile's single-lane row (``alone``); ``served_over_alone``
    is the profile's ratio for the same batches (what a batch overlapped all the way would take)."""
    rows = []
    for name, req in real.items():
        b = _batches_of(req)
        if b.empty:
            continue
        st, en, ln = b["start"].to_numpy(), b["end"].to_numpy(), b["lane"].to_numpy()
        other = ln[None, :] != ln[:, None]
        ov = (np.clip(np.minimum(en[None, :], en[:, None]) - np.maximum(st[None, :], st[:, None]), 0, None) * other).sum(1)
        dur = en - st
        v = (b["group"].to_numpy() // len(settings.classes)).astype(int)
        s = b["samples"].to_numpy()
        frame = pd.DataFrame({"backend": [settings.variant_names(int(x))[1] for x in v],
                              "overlap": pd.cut(ov / np.maximum(dur, 1e-12), OVERLAP_BINS, labels=OVERLAP_LABELS,
                                                include_lowest=True),
                              "ratio": dur / alone[v, s], "served_over_alone": served[v, s] / alone[v, s]})
        g = frame.groupby(["backend", "overlap"], observed=True)
        out = g.agg(batches=("ratio", "size"), service_over_alone=("ratio", "median"),
                    served_over_alone=("served_over_alone", "median")).reset_index()
        rows.append(out.assign(policy=name, overlap=out["overlap"].astype(str)))
    cols = ["policy", "backend", "overlap", "batches", "service_over_alone", "served_over_alone"]
    return pd.concat(rows, ignore_index=True)[cols] if rows else pd.DataFrame(columns=cols)


def _pipeline_row(contention: str, single_lane: bool) -> str:
    """The report's row that runs the pipeline's contention model (``sim`` without single-lane rows)."""
    if not single_lane:
        return "sim"
    return {"served": "sim", "alone": "alone (with the per-variant sigma)", "start": "dyn", "overlap": "overlap"}[contention]


def _within(table: pd.DataFrame, prefix: str) -> tuple[int, int]:
    """(figures within the target, figures): P50 and P95 of every policy and class with data."""
    gaps = table[[f"{prefix}_p50_gap", f"{prefix}_p95_gap"]].to_numpy().ravel()
    gaps = gaps[np.isfinite(gaps)]
    return int((np.abs(gaps) <= TARGET_GAP).sum()), len(gaps)


def _batches_of(requests: pd.DataFrame) -> pd.DataFrame:
    """The per-batch rows (group, samples, start, end, lane) of a saved real trace."""
    r = requests[requests["batch_id"] >= 0]
    return r.groupby("batch_id").agg(group=("group", "first"), samples=("size", "sum"), start=("start", "first"),
                                     end=("end", "first"), lane=("lane", "first")).reset_index()


def sim_vs_real(run, out_dir: Path, replay: Path | None = None) -> pd.DataFrame:
    """Run ``serving.real.policies`` for real and in the simulator on one stream; write
    ``sim_vs_real.{csv,md}`` and the real traces (``real_<policy>.parquet``) into ``out_dir``.
    ``replay``: a directory with the ``real_<policy>.parquet`` of an earlier run of the same
    configuration, compared again without serving (a new contention model, the same measurements).

    Simulations of the same stream (:data:`SIMULATIONS`): ``sim`` (the table as served, i.e. the
    profile's rows timed with ``lanes`` concurrent workers, for every batch, and each variant's
    measured sigma: ``serving.contention: served``), and for a profile as served: ``alone`` (its
    single-lane rows with the fixed ``serving.service_sigma``: no contention, one sigma),
    ``dyn`` (``contention: start``: single-lane rows for a batch that starts while the other
    lanes are idle, served rows otherwise), ``overlap`` (``contention: overlap``: processor
    sharing between the two, engine.share_lanes), then ``cal`` (calibrated on this run)."""
    import os
    from dataclasses import replace

    from hybridsched.io import write_frame, write_text
    from hybridsched.kinds.serving.latency import load_latency, table_source, with_served_model
    from hybridsched.kinds.serving.metrics import check_trace
    from hybridsched.kinds.serving.predictor import pred_table
    from hybridsched.kinds.serving.settings import settings_of

    rc = dict(run.cfg["serving"].get("real") or {})
    s = settings_of(run)
    s = with_served_model(replace(s, lanes=int(rc.get("lanes", s.lanes))))
    lat, _ = load_latency(s)
    pred, pred_source = pred_table(run, s, lat)
    reqs = real_stream(run.cfg["workload"], s, rc, lat[:, 1])
    E.check_inputs(reqs, s, lat, pred)
    names = list(rc.get("policies") or ["fifo"])
    policies = run.build_policies()
    unknown = [p for p in names if p not in policies]
    if unknown:
        raise HybridschedError(f"serving.real.policies: {unknown[0]!r} is not among sim.policies.serving {list(policies)}")
    served_lanes = s.served_lanes
    alone = s.alone_lat
    if alone is not None:  # the single-lane rows must cover the stream's variants (one-line error otherwise)
        E.check_inputs(reqs, s, alone, alone)
    src = table_source(s)
    profile_age = time.time() - src.stat().st_mtime if src.exists() else float("nan")
    real, loadavg = {}, [os.getloadavg()[0]]
    if replay is not None:  # an earlier run's measurements, compared again
        for name in names:
            path = Path(replay) / f"real_{name}.parquet"
            if not path.is_file():
                raise HybridschedError(f"{path}: no real trace of policy {name!r} to replay")
            req = pd.read_parquet(path)
            if len(req) != len(reqs) or not np.allclose(req["arrival"].to_numpy(), reqs.arrival):
                raise HybridschedError(f"{path}: not this configuration's real stream ({len(req)} requests, "
                                       f"{len(reqs)} expected)")
            real[name] = E.Trace(name, req, _batches_of(req), np.zeros((0, 1), np.float32), np.zeros(0, np.int64))
        loadavg = [float("nan")]
    else:
        with tempfile.TemporaryDirectory(prefix="serving_real_") as work:
            lanes = Lanes(s, np.unique(reqs.variant), s.lanes, work)
            try:
                lanes.warm_up()
                for name in names:
                    real[name] = serve(reqs, s, policies[name], pred, lanes)
                    loadavg.append(os.getloadavg()[0])
            finally:
                lanes.close()
    cal_lat, sigma, factors = calibrated_table(lat, [t.batches for t in real.values()], s)
    seed = int(run.cfg.get("sim", {}).get("seed", 0))
    served = replace(s, contention="served")
    fixed = replace(served, variant_sigma=(), alone_lat=None)
    runs = [("sim", lat, served),
            *([("alone", alone, fixed), ("dyn", lat, replace(s, contention="start")),
               ("overlap", lat, replace(s, contention="overlap"))] if alone is not None else []),
            ("cal", cal_lat, replace(fixed, service_sigma=sigma))]
    sims: dict[str, dict[str, pd.DataFrame]] = {prefix: {} for prefix, *_ in runs}
    for name in names:
        for prefix, table_, s_ in runs:
            tr = E.simulate(reqs, s_, table_, policies[name], pred, noise_seed=seed)
            sims[prefix][name] = tr.requests
            for what, t in (("real", real[name]), (f"simulated ({prefix})", tr)):
                problems = check_trace(t.requests, t.batches, s) if what != "real" or replay is None else []
                if problems:
                    raise HybridschedError(f"{what} trace of {name!r} is invalid: {'; '.join(problems)}")
    table = compare_traces({k: t.requests for k, t in real.items()}, sims, s.classes)
    out_dir = Path(out_dir)
    write_frame(out_dir / "sim_vs_real.csv", table.round(4))
    overlap = service_vs_overlap({k: t.requests for k, t in real.items()}, s, alone, lat) if alone is not None else None
    if overlap is not None:
        write_frame(out_dir / "service_vs_overlap.csv", overlap.round(4))
    used = np.unique(reqs.variant)
    sig = {"/".join(s.variant_names(int(v))[:2]): round(float(s.sigmas()[v]), 3) for v in used}
    ratio = {k: round(v, 3) for k, v in factors.items()}
    rate, dur = float(rc.get("rate", 2.0)), float(rc.get("duration_s", 30.0))
    head = (f"Real vs simulated serving: {len(reqs)} requests at {rate} req/s for {dur} s per policy, "
            f"{s.lanes} lanes, scheduler's model: {pred_source}. Latency table {s.latency_table!r} ({src}, "
            f"written {profile_age:.0f} s before the real runs began; rows timed with {served_lanes} concurrent "
            f"lane(s)). Load average (1 min) at the start and after each policy: "
            f"{', '.join(f'{x:.2f}' for x in loadavg)}.\n\n"
            f"* `sim`: the simulator with that table and per-variant service sigma {sig} "
            f"(sigma_source {s.sigma_source!r}{'' if s.variant_sigma else ', none measured: service_sigma'}).\n"
            + (f"* `alone`: the same profile's single-lane rows with one sigma {s.service_sigma} (no contention).\n"
               f"* `dyn` (contention `start`): a batch that starts while the other lanes are idle takes the "
               f"single-lane time, else the served one; the per-variant sigma of `sim`.\n"
               f"* `overlap` (contention `overlap`): processor sharing: a batch's single-lane work runs at "
               f"1 / (served / single-lane) while the other lane is busy, at full speed alone, and a later start "
               f"slows the batches already running; the per-variant sigma of `sim`.\n"
               if alone is not None else "")
            + f"* `cal`: the `sim` table scaled per variant by the median measured/table service ratio of this run "
            f"{ratio}, one sigma {sigma:.3f} measured around those.\n\n"
            f"The pipeline's simulator (serving.contention {s.contention!r}) is row "
            f"`{_pipeline_row(s.contention, alone is not None)}`. "
            f"gap = (sim - real) / real, target |gap| <= {TARGET_GAP:.0%}.\n\n")
    foot = "\n" + "\n".join(f"* `{prefix}`: {a} of {b} P50/P95 figures within {TARGET_GAP:.0%}"
                              for prefix in sims for a, b in [_within(table, prefix)]) + "\n"
    row = _pipeline_row(s.contention, alone is not None)
    variants = by_backend({k: t.requests for k, t in real.items()}, sims[row])
    write_frame(out_dir / "sim_vs_real_backends.csv", variants.round(4))
    foot += (f"\nPer class and backend, measured against `{row}` (`sim_vs_real_backends.csv`; a class that mixes "
             "backends has a two-mode latency whose P50 can fall between the modes):\n\n"
             + variants.round(3).to_markdown(index=False) + "\n")
    if overlap is not None and len(overlap):
        foot += ("\nMeasured service / single-lane row by the share of the batch during which another lane was "
                 "busy (median; `service_vs_overlap.csv`):\n\n" + overlap.round(3).to_markdown(index=False) + "\n")
    write_text(out_dir / "sim_vs_real.md", head + table.round(3).to_markdown(index=False) + "\n" + foot)
    for name, tr in real.items():
        write_frame(out_dir / f"real_{name}.parquet", tr.requests)
    return table
