"""Latency tables: per (model, backend, precision, batch) service times, measured or published.

A table is long-format rows ``model, backend, precision, batch, latency_ms`` (plus optional
``spread_ms, peak_mem_mb, fitted, source``).  ``serving.latency_table`` picks one:

* ``measured``: the profile stage's table on this machine (``serving.profile_path``);
* ``clockwork_v100``: Clockwork's published V100 latencies of ResNet-50 (tables/clockwork_v100.csv);
* ``cpu_first_profile``: a shipped CPU profile of the six variants (tables/cpu_first_profile.csv);
* any other value: a csv file of the same columns.

The simulator needs a dense ``lat[v, b]`` for every batch size ``b = 1..max_batch``: sizes
between two table rows are linearly interpolated and the result is made non-decreasing in
``b`` (a cumulative maximum), which the clairvoyant bound relies on.  A variant the workload
uses must have batch 1 and a batch >= ``max_batch`` in the table, else one-line error.
A table with a ``lanes`` column (the profile with ``serving.profile.lanes`` > 1) keeps the
single-lane rows too; the simulator reads the rows timed with the most concurrent lanes.

Service noise: the profile as served also records each variant's lognormal spread (``sigma``,
keyed ``model/backend``); with ``serving.sigma_source: profile`` (the default)
:func:`with_variant_sigma` hands it to the simulator, one sigma per variant, and variants
without a measured one (a published or csv table, a profile without sigmas) keep
``serving.service_sigma``; ``sigma_source: fixed`` uses ``service_sigma`` for every variant.

Contention: the simulator's time of a batch depends on the other lanes (``serving.contention``,
engine.py): :func:`with_contention` hands it the profile's single-lane rows next to the served
ones; :func:`with_served_model` does both, for every stage that simulates.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from hybridsched.errors import HybridschedError
from dataclasses import replace

from hybridsched.kinds.serving.settings import ServingSettings

PUBLISHED = {"clockwork_v100": Path(__file__).parent / "tables" / "clockwork_v100.csv",
             # a shipped CPU profile (docs/serving.md): a CPU table without profiling
             "cpu_first_profile": Path(__file__).parent / "tables" / "cpu_first_profile.csv"}
COLUMNS = ["model", "backend", "precision", "batch", "latency_ms"]


def table_source(settings: ServingSettings) -> Path:
    """The file the configured table is read from."""
    if settings.latency_table == "measured":
        return Path(settings.profile_path)
    return PUBLISHED.get(settings.latency_table, Path(settings.latency_table))


def read_table(settings: ServingSettings, lanes: int | None = None) -> pd.DataFrame:
    """The configured latency table as a DataFrame of :data:`COLUMNS` (and any extras): of a
    profile as served, the rows timed with the most concurrent lanes, or with ``lanes``
    (1: the single-lane rows) where given."""
    path = table_source(settings)
    try:
        if path.suffix == ".json":
            rows = json.loads(path.read_text())["table"]
            df = pd.DataFrame(rows)
        else:
            df = pd.read_csv(path, comment="#")
    except FileNotFoundError:
        hint = " (run the profile stage)" if settings.latency_table == "measured" else ""
        raise HybridschedError(f"serving.latency_table: {path} not found{hint}") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise HybridschedError(f"serving.latency_table: {path} is not a latency table ({type(e).__name__}: {e})") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise HybridschedError(f"{path}: latency table lacks column(s) {missing}")
    lat = pd.to_numeric(df["latency_ms"], errors="coerce")
    batch = pd.to_numeric(df["batch"], errors="coerce")
    bad = ~(np.isfinite(lat) & (lat > 0) & np.isfinite(batch) & (batch >= 1))
    if bad.any():
        from hybridsched.settings_schema import show

        r = df[bad].iloc[0]
        raise HybridschedError(f"{path}: row {int(np.flatnonzero(bad.to_numpy())[0])} has batch {show(r['batch'])} and "
                               f"latency_ms {show(r['latency_ms'])}; need batch >= 1 and latency > 0")
    df = df.assign(latency_ms=lat.astype(float), batch=batch.astype(int))
    if "lanes" in df.columns:  # a profile as served: the simulator uses the rows of the most lanes
        most = df.groupby(["model", "backend", "precision"])["lanes"].transform("max")
        df = df[df["lanes"] == (most if lanes is None else lanes)]
    if settings.latency_table != "measured":
        check_not_decreasing(df, path)
    return df


def check_not_decreasing(df: pd.DataFrame, path: Path | str) -> None:
    """A given table whose latency falls as the batch grows is refused (a typo, or columns
    swapped): the simulator would smooth it away silently.  The profile stage's own table is
    made non-decreasing instead (:func:`dense_latency`), as its measurements carry noise."""
    for key, g in df.groupby(["model", "backend", "precision"]):
        ms = g.groupby("batch")["latency_ms"].median().sort_index()
        drop = np.flatnonzero(np.diff(ms.to_numpy()) < 0)
        if len(drop):
            i = int(drop[0])
            b0, b1 = int(ms.index[i]), int(ms.index[i + 1])
            raise HybridschedError(f"{path}: latency of {tuple(key)} decreases from batch {b0} ({float(ms.iloc[i]):g} ms) "
                                   f"to batch {b1} ({float(ms.iloc[i + 1]):g} ms); a larger batch cannot be faster")


def dense_latency(table: pd.DataFrame, settings: ServingSettings, needed: np.ndarray | None = None,
                  source: str = "latency table") -> np.ndarray:
    """``lat[v, b]`` in seconds for b = 0..max_batch (column 0 unused, NaN for variants absent
    from the table). ``needed`` (variant indices) must be fully covered, else one-line error."""
    nb = settings.max_batch + 1
    fill = []  # (variant, batches, ms): every check passes before the (variants x max_batch) table is allocated
    grouped = {k: g for k, g in table.groupby(["model", "backend", "precision"])}
    for v in range(settings.n_variants):
        key = settings.variant_names(v)
        g = grouped.get(key)
        needs = needed is None or v in set(np.asarray(needed).tolist())
        key = tuple(str(k) for k in key)
        if g is None:
            if needs and needed is not None:
                raise HybridschedError(f"{source}: no rows for (model, backend, precision) {key}, which the workload uses "
                                       f"(workload.mix)")
            continue
        g = g.groupby("batch")["latency_ms"].median().sort_index()
        b, ms = g.index.to_numpy(), g.to_numpy()
        if b[0] != 1 or b[-1] < settings.max_batch:
            if needs and needed is not None:
                if b[0] != 1:
                    raise HybridschedError(f"{source}: (model, backend, precision, batch) {(*key, 1)} missing; the "
                                           f"workload needs batches 1..{settings.max_batch} (serving.max_batch)")
                raise HybridschedError(f"{source}: the rows of {key} stop at batch {int(b[-1])}, below serving.max_batch "
                                       f"{settings.max_batch} (the table must reach it; or lower serving.max_batch)")
            continue
        fill.append((v, b, ms))
    out = np.full((settings.n_variants, nb), np.nan)
    sizes = np.arange(1, nb)
    for v, b, ms in fill:
        out[v, 1:] = np.maximum.accumulate(np.interp(sizes, b, ms)) / 1000.0
    return out


def load_latency(settings: ServingSettings, needed: np.ndarray | None = None,
                 lanes: int | None = None) -> tuple[np.ndarray, pd.DataFrame]:
    """(dense table in seconds, the long table) of the configured source (``lanes``: as
    :func:`read_table`)."""
    table = read_table(settings, lanes)
    return dense_latency(table, settings, needed, str(table_source(settings))), table


def measured_sigma(settings: ServingSettings) -> dict[str, float]:
    """The per-variant sigma the profile as served recorded (``{"model/backend": sigma}``), or {}
    where the table has none (a csv or published table, a profile without served rows)."""
    path = table_source(settings)
    if path.suffix != ".json":
        return {}
    try:
        sig = json.loads(path.read_text()).get("sigma") or {}
    except FileNotFoundError:
        raise HybridschedError(f"serving.latency_table: {path} not found (run the profile stage)") from None
    except (OSError, ValueError, AttributeError) as e:
        raise HybridschedError(f"serving.latency_table: {path} is not a latency table ({type(e).__name__}: {e})") from None
    bad = {k: v for k, v in sig.items() if not (isinstance(v, int | float) and np.isfinite(v) and v >= 0)}
    if bad:
        k = next(iter(bad))
        raise HybridschedError(f"{path}: sigma of {k!r} is {bad[k]!r}; need a number >= 0")
    return {str(k): float(v) for k, v in sig.items()}


def with_variant_sigma(settings: ServingSettings) -> ServingSettings:
    """``settings`` with one service-noise sigma per variant: the profile's measured ones with
    ``sigma_source: profile`` (``service_sigma`` for a variant it did not measure); unchanged
    with ``sigma_source: fixed`` or when the table measured none."""
    if settings.sigma_source == "fixed":
        return replace(settings, variant_sigma=())
    sig = measured_sigma(settings)
    if not sig:
        return replace(settings, variant_sigma=())
    out = []
    for v in range(settings.n_variants):
        m, b, p = settings.variant_names(v)
        out.append(sig.get(f"{m}/{b}/{p}", sig.get(f"{m}/{b}", settings.service_sigma)))
    return replace(settings, variant_sigma=tuple(out))


def with_contention(settings: ServingSettings) -> ServingSettings:
    """``settings`` with the single-lane table the contention model needs (``alone_lat``, seconds,
    NaN for a variant without single-lane rows) and the lanes the served rows were timed with
    (``served_lanes``), from a profile as served; unchanged (None, 1) for a table without a
    ``lanes`` column (a csv or published table: every contention model is then the table)."""
    table = read_table(settings, lanes=None)
    if "lanes" not in table.columns:
        return replace(settings, alone_lat=None, served_lanes=1)
    served = int(pd.to_numeric(table["lanes"], errors="coerce").max())
    if served <= 1:
        return replace(settings, alone_lat=None, served_lanes=1)
    single = read_table(settings, lanes=1)
    alone = dense_latency(single, settings, None, f"{table_source(settings)} (lanes 1)")
    return replace(settings, alone_lat=alone, served_lanes=served)


def with_served_model(settings: ServingSettings) -> ServingSettings:
    """What every simulation of the pipeline runs with: the per-variant sigma
    (:func:`with_variant_sigma`) and the contention model's tables (:func:`with_contention`)."""
    return with_contention(with_variant_sigma(settings))
