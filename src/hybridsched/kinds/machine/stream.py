"""Streaming runs: generate, simulate and summarise a workload chunk by chunk in bounded memory.

The workload is drawn in fixed blocks of ``BLOCK`` tasks, block ``b`` from its own generator
``SeedSequence(seed, spawn_key=(b,))`` and its run-time noise from
``SeedSequence(noise_seed, spawn_key=(b,))``, with arrivals continuing from the last arrival
of the block before.  So the tasks do not depend
on the chunk size, and :func:`workload` (all blocks at once) is the in-memory twin of a stream:
``simulate(*workload(...))`` gives the same trace as :func:`run_stream`, row for row.

Between chunks the engine carries the devices' believed and true free times.  Streaming is
for independent tasks (``workload.dag_job_size <= 1``) and for policies whose decisions read
only the task's own row and the device free times (``Policy.streamable``: eft, oracle,
greedy); anything else is refused with one line.  A DAG job may straddle a chunk border and
its pending children would have to be carried; that is not implemented.

Metrics are kept incrementally: counts, sums (exactly rounded with ``math.fsum`` over chunk
sums), extremes and per-device busy time, and the latency quantiles from a
:class:`~hybridsched.sketch.LogBucketSketch` (relative error ``relative_accuracy`` against
the exact lower quantile).  The per-task trace goes to one parquet file, one row group per
chunk, written to a temp file and renamed when the run succeeds.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from hybridsched.errors import HybridschedError, check_known_keys
from hybridsched.devices import Cluster, Realization
from hybridsched.kinds.machine.engine import Trace, simulate
from hybridsched.kinds.machine.metrics import finish_summary
from hybridsched.kinds.machine.workload import TaskTable, WorkloadSpec, generate
from hybridsched.sketch import LogBucketSketch

BLOCK = 1 << 16  # tasks per generator block: the unit of reproducibility, not of memory


@dataclass(frozen=True)
class StreamSettings:
    """``sim.stream`` in the config."""

    enabled: bool = False
    chunk_size: int = 1_000_000
    write_trace: bool = True
    relative_accuracy: float = 0.01  # of the latency quantiles

    def __post_init__(self) -> None:
        if int(self.chunk_size) < 1:
            raise HybridschedError(f"sim.stream.chunk_size must be >= 1, got {self.chunk_size}")
        if not 0 < float(self.relative_accuracy) < 1:
            raise HybridschedError(f"sim.stream.relative_accuracy must be in (0, 1), got {self.relative_accuracy}")

    @classmethod
    def from_config(cls, d: dict[str, Any] | None) -> StreamSettings:
        """From the ``sim.stream`` mapping; unknown keys are an error."""
        d = dict(d or {})
        check_known_keys(d, {f.name for f in fields(cls)}, "sim.stream")
        return cls(**d)


# --- the workload, block by block ------------------------------------------------------


def _check_streamable(spec: WorkloadSpec) -> None:
    if spec.dag_job_size > 1:
        raise HybridschedError(f"sim.stream: workload.dag_job_size={spec.dag_job_size}: streaming runs take "
                               "independent tasks only (dag_job_size <= 1)")


def blocks(spec: WorkloadSpec, n: int, seed: int, noise_seed: int, cluster: Cluster
           ) -> Iterator[tuple[TaskTable, Realization]]:
    """The ``n`` tasks and their run-time noise in blocks of ``BLOCK`` (the last may be shorter)."""
    _check_streamable(spec)
    t = 0.0
    for b, start in enumerate(range(0, n, BLOCK)):
        m = min(BLOCK, n - start)
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(b,)))
        tasks = generate(spec, m, rng, first_id=start, cpu_gflops=cluster.cpu_gflops, t0=t)
        noise = np.random.default_rng(np.random.SeedSequence(noise_seed, spawn_key=(b,)))
        yield tasks, cluster.sample_noise(m, noise)
        t = float(tasks.arrival[-1])


def chunks(spec: WorkloadSpec, n: int, seed: int, noise_seed: int, cluster: Cluster, chunk_size: int
           ) -> Iterator[tuple[TaskTable, Realization]]:
    """The same tasks as :func:`blocks`, regrouped into chunks of ``chunk_size`` rows."""
    buf: list[tuple[TaskTable, Realization]] = []
    have = 0
    for blk in blocks(spec, n, seed, noise_seed, cluster):
        buf.append(blk)
        have += len(blk[0])
        while have >= chunk_size:
            out, buf = _split(buf, chunk_size)
            have -= chunk_size
            yield out
    if have:
        yield _concat(buf)


def prefetch(items: Iterator[Any]) -> Iterator[Any]:
    """``items``, each produced in a worker thread while the caller works on the previous one
    (numpy's generators and the engine release the GIL).  One item waits at most, so memory
    stays bounded; the order and the items are those of ``items``."""
    from concurrent.futures import ThreadPoolExecutor

    done = object()
    with ThreadPoolExecutor(1, thread_name_prefix="prefetch") as pool:
        nxt = pool.submit(next, items, done)
        while (item := nxt.result()) is not done:
            nxt = pool.submit(next, items, done)
            yield item


def workload(spec: WorkloadSpec, n: int, seed: int, noise_seed: int, cluster: Cluster
             ) -> tuple[TaskTable, Realization]:
    """All ``n`` tasks of a stream at once: the in-memory run of the same workload."""
    return _concat(list(blocks(spec, n, seed, noise_seed, cluster)))


_TASK_COLS = ("task_id", "arrival", "size", "intensity", "memory_mb", "priority", "deadline")


def _concat(parts: list[tuple[TaskTable, Realization]]) -> tuple[TaskTable, Realization]:
    if len(parts) == 1:
        return parts[0]
    cols = {c: np.concatenate([getattr(t, c) for t, _ in parts]) for c in _TASK_COLS}
    n = len(cols["task_id"])
    tasks = TaskTable(**cols, parent_ptr=np.zeros(n + 1, dtype=np.int64), parent_idx=np.zeros(0, dtype=np.int64))
    real = Realization(np.concatenate([r.cpu_factor for _, r in parts]), np.concatenate([r.gpu_factor for _, r in parts]))
    return tasks, real


def _split(parts: list[tuple[TaskTable, Realization]], k: int
           ) -> tuple[tuple[TaskTable, Realization], list[tuple[TaskTable, Realization]]]:
    """The first ``k`` rows of the buffered parts, and the rest (independent tasks only)."""
    whole = _concat(parts)
    return _rows(whole, 0, k), [_rows(whole, k, len(whole[0]))] if len(whole[0]) > k else []


def _rows(part: tuple[TaskTable, Realization], a: int, b: int) -> tuple[TaskTable, Realization]:
    t, r = part
    cols = {c: getattr(t, c)[a:b] for c in _TASK_COLS}
    tasks = TaskTable(**cols, parent_ptr=np.zeros(b - a + 1, dtype=np.int64), parent_idx=np.zeros(0, dtype=np.int64))
    return tasks, Realization(r.cpu_factor[a:b], r.gpu_factor[a:b])


# --- incremental metrics ---------------------------------------------------------------


class StreamSummary:
    """Running totals of a trace, fed one chunk's :class:`Trace` at a time."""

    def __init__(self, cluster: Cluster, relative_accuracy: float = 0.01) -> None:
        self.cluster = cluster
        self.n = 0
        self.t0 = math.inf
        self.t_end = -math.inf
        self.busy = [[] for _ in range(cluster.n_devices)]  # per-chunk sums, fsum'ed at the end
        self.sums: dict[str, list[float]] = {"mean_latency": [], "mean_wait": [], "mean_fraction": [], "energy": []}
        self.latency = LogBucketSketch(relative_accuracy)

    def add(self, tr: Trace) -> None:
        """Fold one chunk's trace into the totals."""
        n = len(tr.task_id)
        if n == 0:
            return
        self.n += n
        self.t0 = min(self.t0, float(tr.arrival.min()))
        self.t_end = max(self.t_end, float(tr.end.max()))
        lat = tr.end - tr.arrival
        self.latency.add(lat)
        self.sums["mean_latency"].append(float(lat.sum()))
        self.sums["mean_wait"].append(float(np.nansum(np.fmin(tr.cpu_start, tr.gpu_start) - tr.arrival)))
        self.sums["mean_fraction"].append(float(tr.fraction.sum()))
        self.sums["energy"].append(float(tr.energy_j.sum()))
        self.busy[0].append(float(np.nansum(tr.cpu_end - tr.cpu_start)))
        ran = ~np.isnan(tr.gpu_start)
        per_gpu = np.bincount(tr.gpu[ran], weights=(tr.gpu_end - tr.gpu_start)[ran], minlength=self.cluster.n_gpus)
        for g in range(self.cluster.n_gpus):
            self.busy[g + 1].append(float(per_gpu[g]))

    def result(self) -> dict[str, float]:
        """The same metrics as ``metrics.summarize``; quantiles from the sketch."""
        if self.n == 0:
            raise HybridschedError("sim.stream: the run had no tasks")
        means = {k: math.fsum(v) / self.n for k, v in self.sums.items() if k != "energy"}
        qs = {f"p{q}_latency": self.latency.quantile(q / 100) for q in (50, 95, 99)}
        busy = np.array([math.fsum(b) for b in self.busy])
        out = finish_summary(self.n, self.t0, self.t_end, busy, math.fsum(self.sums["energy"]), means, qs, self.cluster)
        return {"n_tasks": self.n, **out, "quantile_relative_accuracy": self.latency.relative_accuracy}


# --- the trace as parquet row groups -----------------------------------------------------


def trace_table(tr: Trace):  # -> pyarrow.Table
    """One chunk's trace in the schema of ``Trace.to_frame`` (policy dictionary-encoded)."""
    import pyarrow as pa

    n = len(tr.task_id)
    policy = pa.DictionaryArray.from_arrays(np.zeros(n, dtype=np.int32), pa.array([tr.policy]))
    cols = {
        "task_id": tr.task_id, "policy": policy, "arrival": tr.arrival, "ready": tr.ready, "gpu": tr.gpu,
        "fraction": tr.fraction, "cpu_start": tr.cpu_start, "cpu_end": tr.cpu_end, "gpu_start": tr.gpu_start,
        "gpu_end": tr.gpu_end, "gpu_mem_mb": tr.gpu_mem_mb, "end": tr.end,
        "wait": np.fmin(tr.cpu_start, tr.gpu_start) - tr.arrival, "energy_j": tr.energy_j,
    }
    return pa.table({k: v if isinstance(v, pa.Array) else pa.array(v) for k, v in cols.items()})


# --- the run -----------------------------------------------------------------------------


def run_stream(spec: WorkloadSpec, n: int, seed: int, noise_seed: int, cluster: Cluster, policy,
               settings: StreamSettings, trace_path: str | Path | None = None) -> dict[str, float]:
    """Run ``policy`` on the ``n``-task stream of ``spec``/``seed`` (tasks) and ``noise_seed``
    (run-time noise); write the trace to
    ``trace_path`` (parquet, one row group per chunk) when ``settings.write_trace``.
    Returns the metrics of ``metrics.summarize`` plus ``n_tasks``."""
    _check_streamable(spec)
    if not getattr(policy, "streamable", False):
        raise HybridschedError(f"sim.stream: policy {policy.name!r} cannot run in chunks (it needs the whole "
                               "workload or learns online); streamable policies have Policy.streamable = True")
    if settings.write_trace and trace_path is None:
        raise HybridschedError("sim.stream.write_trace is true but no trace path was given")
    summary = StreamSummary(cluster, settings.relative_accuracy)
    devices = np.zeros((2, cluster.n_devices))  # believed and true free times, carried across chunks
    work = prefetch(chunks(spec, n, seed, noise_seed, cluster, int(settings.chunk_size)))
    if not settings.write_trace:
        for tasks, real in work:
            summary.add(simulate(tasks, cluster, policy, real, devices=devices))
        return summary.result()

    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq

    from hybridsched.io import atomic_path

    # pyarrow writes without the GIL: the file is written in a thread while the next chunk runs
    with atomic_path(trace_path) as tmp, ThreadPoolExecutor(1) as pool:
        writer, pending = None, None
        try:
            for tasks, real in work:
                tr = simulate(tasks, cluster, policy, real, devices=devices)
                summary.add(tr)
                table = trace_table(tr)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema, **PARQUET_OPTIONS)
                if pending is not None:
                    pending.result()  # at most one chunk waits to be written: memory stays bounded
                pending = pool.submit(writer.write_table, table, row_group_size=len(table))
            if pending is not None:
                pending.result()
        finally:
            if writer is not None:
                writer.close()
    return summary.result()


# lz4 writes ~20 % faster than snappy at the same size; dictionary encoding pays only for
# the constant policy column; statistics on the two sorted keys let readers skip row groups
PARQUET_OPTIONS = {"compression": "lz4", "use_dictionary": ["policy"], "write_statistics": ["task_id", "arrival"]}


def peak_rss_mb() -> float:
    """This process's peak resident set size so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> None:
    """``python -m hybridsched.kinds.machine.stream --tasks N [--out trace.parquet] [hydra overrides]``:
    one streaming run on the composed config (workload, cluster, ``sim.seed``, ``sim.stream``);
    prints one JSON line with the metrics, seconds, tasks/s and peak RSS."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--tasks", type=float, required=True, help="number of tasks (1e8 is fine)")
    ap.add_argument("--policy", default="eft")
    ap.add_argument("--out", type=Path, default=None, help="trace file (parquet); omit with sim.stream.write_trace=false")
    ap.add_argument("--config-dir", type=Path, default=Path(__file__).resolve().parents[4] / "conf")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. workload=bursty sim.stream.chunk_size=2000000")
    args = ap.parse_args(argv)
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from hybridsched.kinds.base import instantiate
    from hybridsched.devices import cluster_from_config
    from hybridsched.kinds.machine.workload import spec_from_config

    with initialize_config_dir(config_dir=str(args.config_dir.resolve()), version_base=None):
        cfg = OmegaConf.to_container(compose(config_name="config", overrides=args.overrides), resolve=True)
    try:
        settings = StreamSettings.from_config({**(cfg["sim"].get("stream") or {}), "enabled": True})
        cluster = cluster_from_config(cfg["cluster"])
        spec = spec_from_config(cfg["workload"], "test")
        known = cfg["policies"].get("machine", cfg["policies"])  # policies.machine.NAME once kinds/ lands
        if args.policy not in known:
            raise HybridschedError(f"--policy: unknown policy {args.policy!r}; known: {sorted(known)}")
        policy = instantiate(known[args.policy])
        n = int(args.tasks)
        # compile the engine for this policy outside the timing (numba, ~1-2 s)
        seeds = int(cfg["workload"].get("seed", 0)), int(cfg["sim"]["seed"])
        run_stream(spec, min(n, 1000), *seeds, cluster, policy, StreamSettings(chunk_size=500, write_trace=False))
        t = time.perf_counter()
        metrics = run_stream(spec, n, *seeds, cluster, policy, settings, args.out)
        dt = time.perf_counter() - t
    except HybridschedError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    print(json.dumps({"policy": policy.name, "tasks": n, "chunk_size": settings.chunk_size,
                      "write_trace": settings.write_trace, "seconds": dt, "tasks_per_s": n / dt,
                      "peak_rss_mb": peak_rss_mb(), "metrics": metrics}))


if __name__ == "__main__":
    main()
