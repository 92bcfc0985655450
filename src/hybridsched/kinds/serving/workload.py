"""Request streams: Poisson, bursty (Gamma inter-arrivals, CV > 1) and replay of a real arrival
process (the Azure LLM inference trace), with a model / class / backend / precision mix and
an SLO per request.

A request is one row: ``request_id, arrival`` (s), ``model, cls, backend, precision`` (names),
``size`` (samples, >= 1) and ``slo_s`` (end-to-end budget, s; deadline = arrival + slo_s).

**SLO rule** (``workload.slo``): ``rule: absolute_ms`` gives each class a budget in ms
(interactive 100, batch 1000 by default); ``rule: factor`` gives a multiple of the request's
variant's batch-1 latency in the latency table (as Clockwork's ``slo_factor``), so SLOs fit
whatever table the run uses.

**Replay**: inter-arrival gaps of the trace's timestamps, scaled so the mean rate is
``workload.rate`` (the trace's own shape: bursts and lulls, kept); streams longer than the
trace wrap around.  **Token -> size mapping**: an LLM request's prompt of ``ContextTokens``
becomes ``ceil(ContextTokens / tokens_per_sample)`` samples, clipped to
``[1, max_request_size]`` (e.g. 1024 tokens per image-sized sample: a 4,808-token prompt is
5 samples), so large prompts are large requests.

Train and test are two streams: independent seeds for the synthetic processes, consecutive
chronological halves for a replay; each starts at time 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybridsched.errors import WorkloadError
from hybridsched.kinds.serving.settings import ServingSettings

COLUMNS = ["request_id", "arrival", "model", "cls", "backend", "precision", "size", "slo_s"]


def _mix(d: dict[str, float], known: list[str] | tuple[str, ...], setting: str) -> tuple[np.ndarray, np.ndarray]:
    """(indices into ``known``, probabilities) of a mix mapping; unknown names are an error."""
    names = list(d)
    bad = [n for n in names if n not in known]
    if bad:
        raise WorkloadError(f"workload.{setting}: unknown name {bad[0]!r}; known: {list(known)}")
    p = np.array([float(d[n]) for n in names])
    if (p < 0).any() or p.sum() <= 0:
        raise WorkloadError(f"workload.{setting}: weights must be >= 0 with a positive sum, got {p.tolist()}")
    return np.array([list(known).index(n) for n in names]), p / p.sum()


def mix_variants(w: dict[str, Any], settings: ServingSettings) -> np.ndarray:
    """The variant indices a workload's mix draws (share > 0), in the train and the test split,
    so the latency table is checked for exactly those before anything is generated."""
    out: set[int] = set()
    for part in (w, {**w, **(w.get("test") or {})}):
        mix = part.get("mix", {}) or {}
        idx = []
        for key, known in (("models", settings.model_names), ("backends", settings.backends),
                           ("precisions", settings.precisions)):
            i, prob = _mix(mix.get(key) or {known[0]: 1.0}, known, f"mix.{key}")
            idx.append(i[prob > 0])
        m, b, q = np.meshgrid(*idx, indexing="ij")
        out.update(int(v) for v in np.ravel(settings.variant(m, b, q)))
    return np.array(sorted(out), dtype=np.int64)


def read_arrival_trace(path: str | Path, time_column: str, size_column: str | None) -> tuple[np.ndarray, np.ndarray | None]:
    """(arrival seconds from the first row, token counts or None) of an arrival file. Timestamps may
    be datetimes or numbers; non-numeric/unparseable or unsorted ones are a one-line error."""
    p = Path(path)
    try:
        df = pd.read_csv(p)
    except FileNotFoundError:
        raise WorkloadError(f"workload.trace_path: {p} not found") from None
    except (OSError, ValueError) as e:
        raise WorkloadError(f"workload.trace_path: {p} cannot be read ({str(e).splitlines()[0]})") from None
    if time_column not in df.columns or (size_column and size_column not in df.columns):
        raise WorkloadError(f"{p}: needs column(s) {time_column!r}{', ' + repr(size_column) if size_column else ''}; "
                            f"has {list(df.columns)}")
    if len(df) < 2:
        raise WorkloadError(f"{p}: needs at least 2 rows, has {len(df)}")
    raw = df[time_column]
    t = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
    if np.isnan(t).any() and not np.isnan(t).all():  # numbers with a non-number among them
        i = int(np.flatnonzero(np.isnan(t))[0])
        raise WorkloadError(f"{p}: row {i + 2} {time_column} {raw.iloc[i]!r} is neither a number nor a timestamp")
    if np.isnan(t).all():  # not numbers: datetimes?
        parsed = pd.to_datetime(raw, errors="coerce", format="mixed")
        bad = parsed.isna().to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise WorkloadError(f"{p}: row {i + 2} {time_column} {raw.iloc[i]!r} is neither a number nor a timestamp")
        t = (parsed - parsed.iloc[0]).dt.total_seconds().to_numpy()
    if not np.isfinite(t).all():
        i = int(np.flatnonzero(~np.isfinite(t))[0])
        raise WorkloadError(f"{p}: row {i + 2} {time_column} is {float(t[i])}")
    back = np.flatnonzero(np.diff(t) < 0)
    if len(back):
        i = int(back[0]) + 1
        raise WorkloadError(f"{p}: {time_column} not sorted: row {i + 2} ({raw.iloc[i]}) is before row {i + 1} "
                            f"({raw.iloc[i - 1]})")
    if t[-1] == t[0]:  # no gaps to replay: it would be a uniform stream at workload.rate
        raise WorkloadError(f"{p}: every {time_column} is the same ({raw.iloc[0]}), so there are no gaps to replay; "
                            f"use a trace whose times differ, or workload.arrival=poisson")
    sizes = None
    if size_column:
        sizes = pd.to_numeric(df[size_column], errors="coerce").to_numpy(dtype=float)
        if np.isnan(sizes).any() or (sizes < 0).any():
            i = int(np.flatnonzero(np.isnan(sizes) | (sizes < 0))[0])
            raise WorkloadError(f"{p}: row {i + 2} {size_column} {df[size_column].iloc[i]!r} is not a count >= 0")
    return t - t[0], sizes


def _arrivals(w: dict[str, Any], n: int, rng: np.random.Generator, part: int) -> tuple[np.ndarray, np.ndarray | None]:
    """n arrival times from 0 and, for a replay, the token counts; ``part`` picks the split."""
    rate = float(w.get("rate", 10.0))
    if not rate > 0:
        raise WorkloadError(f"workload.rate: must be > 0, got {rate}")
    process = w.get("arrival", "poisson")
    if process == "poisson":
        gaps = rng.exponential(1.0 / rate, n)
    elif process == "gamma":
        cv = float(w.get("cv", 3.0))
        if not cv > 0:
            raise WorkloadError(f"workload.cv: must be > 0, got {cv}")
        k = 1.0 / cv**2  # Gamma(k, theta) has CV 1/sqrt(k)
        gaps = rng.gamma(k, 1.0 / (rate * k), n)
    elif process == "replay":
        t, tokens = read_arrival_trace(w["trace_path"], w.get("time_column", "TIMESTAMP"), w.get("size_column"))
        d = np.diff(t)
        d = d * (len(d) / t[-1]) / rate if t[-1] > 0 else np.full(len(d), 1.0 / rate)  # mean gap 1/rate
        start = part * int(w.get("n_train", n))  # chronological split: test follows train
        idx = (start + np.arange(n)) % len(d)
        gaps = d[idx]
        return np.concatenate([[0.0], np.cumsum(gaps[1:])]), (tokens[1:][idx] if tokens is not None else None)
    else:
        raise WorkloadError(f"workload.arrival: unknown process {process!r}; known: gamma, poisson, replay")
    return np.cumsum(gaps) - gaps[0], None


def per_sample_s(lat: np.ndarray, variant: np.ndarray, batch: np.ndarray, max_batch: int) -> np.ndarray:
    """Lane-seconds per sample of variant ``variant`` in a batch of ``batch`` samples (real, >= 1;
    linear between whole sizes, capped at ``max_batch``). ``lat`` is the dense table ``lat[v, b]``
    or only its batch-1 column (then every sample costs the batch-1 latency: no batching curve)."""
    lat = np.asarray(lat, dtype=float)
    variant = np.asarray(variant)
    if lat.ndim == 1:
        return lat[variant]
    b = np.clip(np.asarray(batch, dtype=float), 1.0, float(max_batch))
    lo = np.floor(b).astype(np.int64)
    hi = np.minimum(lo + 1, max_batch)
    f = b - lo
    c_lo, c_hi = lat[variant, lo] / lo, lat[variant, hi] / hi
    return (1 - f) * c_lo + f * c_hi


def group_work_s(lat: np.ndarray, settings: ServingSettings, p: np.ndarray, size: np.ndarray, rate: float) -> float:
    """Expected lane-seconds per request at ``rate`` requests/s for a mix of groups (share ``p[g]``,
    mean request size ``size[g]`` samples): a request's samples cost ``lat[v, b] / b`` each,
    with b the expected samples of its group's batch at the window (its own plus what arrives
    within ``window`` of it: ``size * (1 + rate * p * window)``, at most ``max_batch``)."""
    g = np.flatnonzero(p > 0)
    v = g // len(settings.classes)
    b = np.minimum(size[g] * (1.0 + rate * p[g] * settings.window_s), settings.max_batch)
    c = per_sample_s(lat, v, b, settings.max_batch)
    return float(np.sum(p[g] * size[g] * np.nan_to_num(c, nan=np.inf)))


def _replay_sizes(w: dict[str, Any]) -> np.ndarray | None:
    """Request sizes of every row of a replayed trace (None: not a replay with sizes)."""
    if w.get("arrival") != "replay" or not w.get("size_column"):
        return None
    _, tokens = read_arrival_trace(w["trace_path"], w.get("time_column", "TIMESTAMP"), w.get("size_column"))
    return _token_sizes(tokens[1:], w)


def _token_sizes(tokens: np.ndarray, w: dict[str, Any]) -> np.ndarray:
    per = float(w.get("tokens_per_sample", 1024))
    return np.clip(np.ceil(tokens / per), 1, int(w.get("max_request_size", 8))).astype(np.int64)


def _mix_shares(w: dict[str, Any], settings: ServingSettings) -> np.ndarray:
    """Share of each group (variant x class) in the configured mix."""
    mix = w.get("mix", {})
    p = {}
    for key, known in (("models", settings.model_names), ("backends", settings.backends),
                       ("precisions", settings.precisions), ("classes", settings.classes)):
        idx, prob = _mix(mix.get(key) or {known[0]: 1.0}, known, f"mix.{key}")
        p[key] = np.zeros(len(known))
        np.add.at(p[key], idx, prob)
    m, b, q, c = np.meshgrid(*(np.arange(len(p[k])) for k in p), indexing="ij")
    share = np.zeros(settings.n_groups)
    np.add.at(share, settings.group(settings.variant(m, b, q), c).ravel(),
              (p["models"][m] * p["backends"][b] * p["precisions"][q] * p["classes"][c]).ravel())
    return share


def _solve_rate(load: float, work, lanes: int) -> float:
    """A rate r with ``r * work(r) / lanes = load`` by bisection (``r * work(r)`` grows with r:
    a batch's per-sample cost never falls faster than 1 / batch for a non-decreasing table)."""
    f = lambda r: r * work(r) / lanes - load  # noqa: E731
    lo, hi = 0.0, load * lanes / work(0.0)  # the rate without batching
    while f(hi) < 0:  # batching makes the work cheaper: a higher rate
        lo, hi = hi, 2 * hi
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


def offered_rate(w: dict[str, Any], settings: ServingSettings, batch1_s: np.ndarray | None) -> float:
    """Requests/s of a workload: ``workload.rate`` when set, else the rate at which the mix offers
    ``workload.load`` x the lanes' capacity **in samples**: each request's samples cost
    ``lat[v, b] / b`` lane-seconds at the batch size b its group reaches within the window at
    that rate (:func:`group_work_s`), with the request sizes of the workload (``request_size``,
    or the replayed trace's token-mapped sizes). ``batch1_s``: the dense table ``lat[v, b]``
    (s), or only its batch-1 column (then no batching curve: each sample costs batch 1)."""
    load = w.get("load")
    rate = w.get("rate", 10.0 if load is None else None)  # neither key (library use): 10 req/s as before
    if rate is not None:
        return float(rate)
    if load is None:
        raise WorkloadError("workload.rate / workload.load: set one (rate in requests/s, or load relative to the "
                            "lanes' capacity in samples)")
    if not float(load) > 0:
        raise WorkloadError(f"workload.load: must be > 0, got {float(load)}")
    if batch1_s is None:
        raise WorkloadError("workload.load needs the latency table (batch-1 latencies); or set workload.rate")
    share = _mix_shares(w, settings)
    sizes = _replay_sizes(w)
    mean_size = float(sizes.mean()) if sizes is not None else float(w.get("request_size", 1))
    size = np.full(settings.n_groups, mean_size)
    if not 0 < group_work_s(batch1_s, settings, share, size, 0.0) < np.inf:
        raise WorkloadError("workload.load: the latency table has no batch-1 latency for a variant of the mix")
    return _solve_rate(float(load), lambda r: group_work_s(batch1_s, settings, share, size, r), settings.lanes)


def stream_load(df: pd.DataFrame, rate: float, settings: ServingSettings, lat: np.ndarray) -> float:
    """The load a generated stream offers at ``rate`` requests/s, in samples, by the same rule as
    :func:`offered_rate` but with the stream's own mix and request sizes."""
    reqs = to_requests(df, settings, "stream")
    n = np.bincount(reqs.group, minlength=settings.n_groups)
    s = np.bincount(reqs.group, weights=reqs.size, minlength=settings.n_groups)
    p = n / len(reqs)
    size = np.divide(s, n, out=np.ones(settings.n_groups), where=n > 0)
    return rate * group_work_s(lat, settings, p, size, rate) / settings.lanes


def load_report(w: dict[str, Any], settings: ServingSettings, lat: np.ndarray,
                splits: dict[str, pd.DataFrame], tolerance: float = 0.10) -> dict[str, Any]:
    """Requested load, the rate it gives, the load each generated split offers and a warning per
    split whose offered load differs from the requested one by more than ``tolerance``
    (e.g. a replay whose part of the trace has larger prompts than the whole)."""
    rate = offered_rate(w, settings, lat)
    requested = w.get("load") if w.get("rate") is None else None
    offered = {k: stream_load(df, rate, settings, lat) for k, df in splits.items()}
    warnings_ = []
    if requested is not None:
        for k, x in offered.items():
            if abs(x / float(requested) - 1) > tolerance:
                warnings_.append(f"workload.load: the {k} stream offers load {x:.3f}, not the requested "
                                 f"{float(requested):g} ({100 * (x / float(requested) - 1):+.0f} %: its request-size "
                                 f"/ model mix differs from the one the rate was computed for)")
    return {"rate": rate, "load": requested, "offered_load": offered, "load_warnings": warnings_}


def generate_stream(w: dict[str, Any], settings: ServingSettings, n: int, seed: int, part: int = 0,
                    batch1_s: np.ndarray | None = None) -> pd.DataFrame:
    """One request stream of ``n`` requests (see the module docstring). ``batch1_s``: the dense
    latency table ``lat[v, b]`` (s) or its batch-1 column, needed for ``slo.rule: factor`` and
    for ``workload.load`` (:func:`offered_rate`)."""
    w = {**w, "rate": offered_rate(w, settings, batch1_s)}
    if batch1_s is not None and np.ndim(batch1_s) == 2:
        batch1_s = np.asarray(batch1_s)[:, 1]
    rng = np.random.default_rng(seed)
    arrival, tokens = _arrivals(w, n, rng, part)
    mix = w.get("mix", {})
    cols = {}
    for key, known in (("models", settings.model_names), ("classes", settings.classes),
                       ("backends", settings.backends), ("precisions", settings.precisions)):
        idx, p = _mix(mix.get(key) or {known[0]: 1.0}, known, f"mix.{key}")
        cols[key] = idx[rng.choice(len(p), n, p=p)]
    if tokens is not None:
        size = _token_sizes(tokens, w)
    else:
        size = np.full(n, int(w.get("request_size", 1)), dtype=np.int64)
    slo = slo_seconds(w.get("slo", {}), settings, cols["classes"],
                      settings.variant(cols["models"], cols["backends"], cols["precisions"]), batch1_s)
    return pd.DataFrame({
        "request_id": np.arange(n, dtype=np.int64), "arrival": arrival,
        "model": np.array(settings.model_names, dtype=object)[cols["models"]],
        "cls": np.array(settings.classes, dtype=object)[cols["classes"]],
        "backend": np.array(settings.backends, dtype=object)[cols["backends"]],
        "precision": np.array(settings.precisions, dtype=object)[cols["precisions"]],
        "size": size, "slo_s": slo})


def slo_seconds(slo: dict[str, Any], settings: ServingSettings, cls: np.ndarray, variant: np.ndarray,
                batch1_s: np.ndarray | None) -> np.ndarray:
    """Per-request SLO in seconds by the configured rule (module docstring)."""
    rule = slo.get("rule", "absolute_ms")
    per_class = {"interactive": 100.0, "batch": 1000.0} if rule == "absolute_ms" else {"interactive": 5.0, "batch": 50.0}
    per_class.update({k: v for k, v in slo.items() if k != "rule"})
    missing = [c for c in settings.classes if c not in per_class]
    if missing:
        raise WorkloadError(f"workload.slo: no value for class {missing[0]!r}")
    values = np.array([float(per_class[c]) for c in settings.classes])
    if (values <= 0).any():
        c = settings.classes[int(np.flatnonzero(values <= 0)[0])]
        raise WorkloadError(f"workload.slo.{c}: SLO must be > 0, got {float(per_class[c])}")
    if rule == "absolute_ms":
        return values[cls] / 1000.0
    if rule == "factor":
        if batch1_s is None:
            raise WorkloadError("workload.slo.rule factor needs the latency table (batch-1 latencies)")
        b1 = batch1_s[variant]
        if np.isnan(b1).any():
            v = int(variant[np.isnan(b1)][0])
            raise WorkloadError(f"workload.slo: latency table has no batch-1 latency for {settings.variant_names(v)}")
        return values[cls] * b1
    raise WorkloadError(f"workload.slo.rule: unknown rule {rule!r}; known: absolute_ms, factor")


def generate_splits(w: dict[str, Any], settings: ServingSettings, batch1_s: np.ndarray | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, test) streams of ``n_train`` and ``n_test`` requests."""
    seed = int(w.get("seed", 0))
    n_train, n_test = int(w.get("n_train", 2000)), int(w.get("n_test", 2000))
    if n_train < 1 or n_test < 1:
        raise WorkloadError(f"workload.n_train/n_test: must be >= 1, got {n_train}/{n_test}")
    test_w = {**w, **(w.get("test") or {})}
    return (generate_stream(w, settings, n_train, seed, 0, batch1_s),
            generate_stream(test_w, settings, n_test, seed + 1, 1, batch1_s))


@dataclass
class Requests:
    """A request stream as engine arrays (indices per the settings)."""

    frame: pd.DataFrame
    arrival: np.ndarray
    deadline: np.ndarray
    size: np.ndarray
    variant: np.ndarray
    cls: np.ndarray
    group: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival)


def to_requests(df: pd.DataFrame, settings: ServingSettings, source: str = "requests") -> Requests:
    """Check a request frame against the settings (one-line errors naming ``source``) and index it."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise WorkloadError(f"{source}: missing column(s) {missing}")
    if len(df) == 0:
        raise WorkloadError(f"{source}: no requests")
    idx = {}
    for col, known in (("model", settings.model_names), ("cls", settings.classes), ("backend", settings.backends),
                       ("precision", settings.precisions)):
        values = df[col].astype(str)
        bad = ~values.isin(list(known))
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            what = "class" if col == "cls" else col
            raise WorkloadError(f"{source}: row {i} has unknown {what} {values.iloc[i]!r}; known: {list(known)}")
        idx[col] = pd.Categorical(values, categories=list(known)).codes.astype(np.int64)
    num = {c: pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float) for c in ("arrival", "size", "slo_s")}
    for c, v in num.items():
        if not np.isfinite(v).all():
            i = int(np.flatnonzero(~np.isfinite(v))[0])
            raise WorkloadError(f"{source}: row {i} {c} {df[c].iloc[i]!r} is not a finite number")
    checks = [("size", num["size"] < 1, ">= 1 (batch size 0 is not a request)"),
              ("size", num["size"] > settings.max_batch, f"<= serving.max_batch {settings.max_batch}"),
              ("size", num["size"] != np.round(num["size"]), "a whole number"),
              ("slo_s", num["slo_s"] <= 0, "> 0")]
    for c, bad, want in checks:
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise WorkloadError(f"{source}: row {i} {c} {float(num[c][i])} must be {want}")
    if (np.diff(num["arrival"]) < 0).any():
        i = int(np.flatnonzero(np.diff(num["arrival"]) < 0)[0]) + 1
        raise WorkloadError(f"{source}: arrival not sorted at row {i} ({float(num['arrival'][i])} < "
                            f"{float(num['arrival'][i - 1])})")
    variant = settings.variant(idx["model"], idx["backend"], idx["precision"]).astype(np.int64)
    return Requests(df.reset_index(drop=True), num["arrival"], num["arrival"] + num["slo_s"],
                    num["size"].astype(np.int64), variant, idx["cls"], settings.group(variant, idx["cls"]).astype(np.int64))


def read_requests(path: str | Path, settings: ServingSettings) -> Requests:
    """A request file (parquet or csv) as checked engine arrays."""
    p = Path(path)
    try:
        df = pd.read_csv(p) if p.suffix == ".csv" else pd.read_parquet(p)
    except FileNotFoundError:
        raise WorkloadError(f"{p}: not found (run the generate stage)") from None
    except Exception as e:  # parser errors differ by format
        raise WorkloadError(f"{p}: cannot be read ({type(e).__name__})") from None
    return to_requests(df, settings, str(p))
