"""Import the Alibaba GPU-cluster trace v2023 (Weng et al., "Beware of Fragmentation", ATC 2023).

Two files of ``cluster-trace-gpu-v2023/csv/``, read by path (never copied into the repo):

* a **pod list** (``openb_pod_list_*.csv``): ``name, cpu_milli, memory_mib, num_gpu, gpu_milli``
  and, in most variants, ``gpu_spec, qos, pod_phase, creation_time, deletion_time,
  scheduled_time``.  One pod = one task:

  - arrival   = ``creation_time`` shifted so the first kept pod arrives at 0, divided by
    ``time_compression`` (> 1 packs the same pods into less time: more load);
  - duration  = ``deletion_time - scheduled_time`` (its run time in production, taken as the
    run time on the reference GPU type, see ``speeds.py``);
  - GPU demand: ``num_gpu`` GPUs on one node, each with ``gpu_milli``/1000 of its capacity free
    (``num_gpu = 1, gpu_milli < 1000`` is a GPU-sharing task; ``num_gpu = 0`` is CPU-only);
  - CPU ``cpu_milli`` (1000 = one core) and memory ``memory_mib`` on that node;
  - SLO class ``qos`` (LS, BE, Burstable, Guaranteed; ``""`` where the file has no column);
  - allowed GPU models ``gpu_spec`` (``"V100M16|V100M32"``; empty = any model).

  Rows without a usable duration (never scheduled, a missing time, created after its deletion
  or its scheduling, deletion not after scheduling), a repeated pod name and a truncated last
  line are dropped and counted per reason (:data:`DROP_REASONS`) in the :class:`ImportReport`;
  every ``kept_by_*`` breakdown sums to ``rows_kept``.  A file with a header and no rows is
  an error ("no pods in FILE").  A missing
  resource column, a value that is not a number, or a resource value out of range raises
  :class:`WorkloadError` naming the file, column, row and pod.  The three time columns are
  optional as a group: ``openb_pod_list_multigpu20.csv`` has none (it was made for the paper's
  packing experiments), so its pods all arrive at 0 and get ``untimed_duration_s`` (NaN by
  default: importable and countable, but not simulatable until a duration is configured).

* the **node list** (``openb_node_list_all_node.csv``): ``sn, cpu_milli, memory_mib, gpu, model``
  (``model`` empty for CPU-only nodes).  :func:`sample_nodes` draws a seeded sample that keeps
  the GPU-model mix (stratified by model, largest remainders), so a whole run stays small
  while the cluster is loaded.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybridsched.errors import WorkloadError

POD_RESOURCE_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_TIME_COLUMNS = ("creation_time", "deletion_time", "scheduled_time")
POD_OPTIONAL_COLUMNS = ("gpu_spec", "qos", "pod_phase")
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
GPU_SPEC_SEP = "|"
MILLI = 1000  # one whole GPU / one CPU core

# Why a row is dropped, in the order the checks run (a row counts under its first reason).
# ``truncated_last_line``: the file's last line has fewer fields than the header (a cut-off
# download); ``duplicate_name``: a pod name seen on an earlier row (the first one is kept).
FILE_DROP_REASONS = ("truncated_last_line", "duplicate_name")
TIME_DROP_REASONS = ("never_scheduled", "missing_creation_time", "missing_deletion_time", "created_after_deleted",
                     "scheduled_before_created", "deleted_before_scheduled", "zero_duration")
DROP_REASONS = (*FILE_DROP_REASONS, *TIME_DROP_REASONS)
N_EXAMPLES = 5


class _Columns:
    """Shared by the columnar tables below: ``COLUMNS`` in order, ``KINDS`` their non-float dtypes."""

    COLUMNS: tuple[str, ...] = ()
    KINDS: dict[str, type] = {}
    LABEL = "table"

    def __len__(self) -> int:
        return len(getattr(self, self.COLUMNS[0]))

    def subset(self, rows: np.ndarray):
        """The rows at ``rows`` (kept in the given order)."""
        rows = np.asarray(rows)
        return type(self)(**{c: getattr(self, c)[rows] for c in self.COLUMNS})

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({c: getattr(self, c) for c in self.COLUMNS})

    @classmethod
    def from_frame(cls, df: pd.DataFrame, source: str = "<frame>"):
        """Back from :meth:`to_frame` (e.g. a parquet split written by the generate stage)."""
        missing = [c for c in cls.COLUMNS if c not in df.columns]
        if missing:
            raise WorkloadError(f"{source}: not a {cls.LABEL}, missing column(s) {', '.join(missing)}")
        return cls(**{c: df[c].to_numpy(dtype=cls.KINDS.get(c, np.float64)) for c in cls.COLUMNS})


@dataclass
class PodTable(_Columns):
    """Pods as parallel arrays sorted by arrival (s); ``task_id`` = row of the pod in its file."""

    task_id: np.ndarray  # int64
    name: np.ndarray  # object (str)
    arrival: np.ndarray  # float64, s
    duration: np.ndarray  # float64, s on the reference GPU type (NaN: file had no times)
    cpu_milli: np.ndarray  # float64
    memory_mib: np.ndarray  # float64
    num_gpu: np.ndarray  # int64
    gpu_milli: np.ndarray  # float64, per GPU, 0 for CPU-only pods
    qos: np.ndarray  # object (str)
    gpu_spec: np.ndarray  # object (str), "" = any model
    trace_wait: np.ndarray  # float64, scheduled - creation in production (s, NaN if unknown)

    COLUMNS = ("task_id", "name", "arrival", "duration", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli",
               "qos", "gpu_spec", "trace_wait")
    KINDS = {"task_id": np.int64, "num_gpu": np.int64, "name": object, "qos": object, "gpu_spec": object}
    LABEL = "pod table"

    @property
    def gpu_demand(self) -> np.ndarray:
        """GPUs' worth of capacity each pod holds while it runs (num_gpu * gpu_milli / 1000)."""
        return self.num_gpu * self.gpu_milli / MILLI



@dataclass
class ImportReport:
    """What the importer read, kept and dropped (written to metrics/import_report.json)."""

    path: str
    sha256: str
    rows_read: int
    rows_kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    timed: bool = True  # False: the file has no time columns
    columns_missing: list[str] = field(default_factory=list)
    time_compression: float = 1.0
    max_tasks: int | None = None
    rows_over_max_tasks: int = 0
    censored_at_trace_end: int = 0  # kept pods still running when the trace ended
    duplicate_names: list[str] = field(default_factory=list)  # the first few repeated pod names
    truncated_line: int | None = None  # line number of a truncated last line (dropped)
    kept_by_kind: dict[str, int] = field(default_factory=dict)
    kept_by_qos: dict[str, int] = field(default_factory=dict)
    kept_by_phase: dict[str, int] = field(default_factory=dict)
    arrival_span_s: float = 0.0
    duration_s: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- pods ------------------------------------------------------------------------------------------


def read_pod_trace(path: str | Path, time_compression: float = 1.0, max_tasks: int | None = None,
                   untimed_duration_s: float | None = None,
                   keep_pods: tuple[str, Callable[[PodTable], np.ndarray]] | None = None,
                   ) -> tuple[PodTable, ImportReport]:
    """Read a pod list CSV into a :class:`PodTable` sorted by arrival, and what was dropped.

    ``max_tasks`` keeps the first pods by creation time (after dropping unusable rows).
    ``keep_pods = (reason, test)``: after that, drop the pods where ``test(pods)`` is False and
    count them under ``reason`` (e.g. ``fits_no_sampled_node``), before the breakdowns are
    counted, so every ``kept_by_*`` sums to ``rows_kept``.
    Raises WorkloadError naming file, column and row for a missing column or a bad value."""
    if not time_compression > 0:
        raise WorkloadError(f"workload.time_compression must be > 0, got {time_compression}")
    if max_tasks is not None and max_tasks < 1:
        raise WorkloadError(f"workload.max_tasks must be >= 1 or null, got {max_tasks}")
    p = Path(path)
    raw = _read_csv(p, POD_RESOURCE_COLUMNS, "pod list")
    src = str(p)
    if len(raw) == 0:
        raise WorkloadError(f"no pods in {src} (the file has a header and no rows)")
    times_present = [c for c in POD_TIME_COLUMNS if c in raw.columns]
    if times_present and len(times_present) < len(POD_TIME_COLUMNS):
        absent = [c for c in POD_TIME_COLUMNS if c not in raw.columns]
        raise WorkloadError(f"{src}: missing column(s) {', '.join(absent)} (the time columns "
                            f"{', '.join(POD_TIME_COLUMNS)} come together or not at all)")
    timed = bool(times_present)
    n = len(raw)
    absent = [c for c in (*POD_OPTIONAL_COLUMNS, *POD_TIME_COLUMNS) if c not in raw.columns]
    report = ImportReport(path=src, sha256=_sha256(p), rows_read=n, timed=timed, columns_missing=absent,
                          time_compression=float(time_compression), max_tasks=max_tasks)
    report.dropped = {r: 0 for r in DROP_REASONS}
    keep = np.ones(n, dtype=bool)
    truncated = raw.attrs.get("truncated_last_row")
    if truncated is not None and n == 1:
        raise WorkloadError(f"no pods in {src}: its only line ({raw.attrs['truncated_line']}) is truncated")
    if truncated is not None:  # replace its fields so the parsers below see a whole, dropped row
        keep[truncated] = False
        report.dropped["truncated_last_line"] = 1
        report.truncated_line = int(raw.attrs["truncated_line"])
        raw = raw.copy()
        raw.iloc[truncated] = raw.iloc[0]
    names = raw["name"].to_numpy(dtype=object)
    dup = pd.Series(names).duplicated(keep="first").to_numpy() & keep
    report.dropped["duplicate_name"] = int(dup.sum())
    report.duplicate_names = sorted({str(x) for x in names[dup]})[:N_EXAMPLES]
    keep &= ~dup

    cpu, mem, ngpu, milli = _pod_resources(raw, src, names, zero_cpu_ok=False)

    qos = _text(raw, "qos")
    phase = _text(raw, "pod_phase")
    spec = np.array([_norm_spec(s) for s in _text(raw, "gpu_spec")], dtype=object)

    if timed:
        created = _numeric(raw, "creation_time", src, names)
        deleted = _numeric(raw, "deletion_time", src, names)
        sched = _numeric(raw, "scheduled_time", src, names)
        duration = deleted - sched
        reasons = {
            "never_scheduled": np.isnan(sched),
            "missing_creation_time": np.isnan(created),
            "missing_deletion_time": np.isnan(deleted),
            "created_after_deleted": created > deleted,
            "scheduled_before_created": sched < created,
            "deleted_before_scheduled": duration < 0,
            "zero_duration": duration == 0,
        }
        for reason in TIME_DROP_REASONS:
            hit = reasons[reason] & keep
            report.dropped[reason] = int(hit.sum())
            keep &= ~hit
        end_of_trace = np.nanmax(deleted) if np.isfinite(deleted).any() else np.nan
        wait = sched - created
    else:
        created = np.zeros(n)
        deleted = np.full(n, np.nan)
        end_of_trace = np.nan
        fill = np.nan if untimed_duration_s is None else float(untimed_duration_s)
        if untimed_duration_s is not None and not fill > 0:
            raise WorkloadError(f"workload.untimed_duration_s must be > 0 or null, got {untimed_duration_s}")
        duration = np.full(n, fill)
        wait = np.full(n, np.nan)

    rows = np.flatnonzero(keep)
    rows = rows[np.argsort(created[rows], kind="stable")]  # ties keep file order
    if max_tasks is not None and len(rows) > max_tasks:
        report.rows_over_max_tasks = int(len(rows) - max_tasks)
        rows = rows[:max_tasks]
    t0 = created[rows].min() if len(rows) else 0.0
    pods = PodTable(
        task_id=rows.astype(np.int64),
        name=names[rows].astype(str).astype(object),
        arrival=(created[rows] - t0) / float(time_compression),
        duration=duration[rows].astype(np.float64),
        cpu_milli=cpu[rows],
        memory_mib=mem[rows],
        num_gpu=ngpu[rows].astype(np.int64),
        gpu_milli=milli[rows],
        qos=qos[rows],
        gpu_spec=spec[rows],
        trace_wait=wait[rows].astype(np.float64),
    )
    # one (reason, test) pair, or several applied in order (each counts only what it drops)
    for reason, test in ([keep_pods] if keep_pods and isinstance(keep_pods[0], str) else list(keep_pods or [])):
        ok = np.asarray(test(pods), dtype=bool)
        report.dropped[reason] = int((~ok).sum())
        rows, pods = rows[ok], pods.subset(np.flatnonzero(ok))
    report.rows_kept = len(pods)
    report.censored_at_trace_end = int(np.sum(deleted[rows] == end_of_trace)) if timed else 0
    report.kept_by_kind = task_kinds(pods)
    report.kept_by_qos = _counts(qos[rows])
    report.kept_by_phase = _counts(phase[rows])
    report.arrival_span_s = float(pods.arrival.max()) if len(pods) else 0.0
    d = pods.duration[np.isfinite(pods.duration)]
    stats = (d.min(), np.median(d), d.mean(), np.percentile(d, 99), d.max()) if len(d) else ()
    report.duration_s = {k: float(v) for k, v in zip(("min", "p50", "mean", "p99", "max"), stats)}
    return pods, report


def read_pod_requests(path: str | Path, zero_cpu_milli: float = 100.0) -> PodTable:
    """Every row of a pod list as a request, whatever its phase or times (the paper's packing
    protocol): file order, arrival 0, no duration; a CPU request of 0 becomes
    ``zero_cpu_milli`` (Kubernetes' default request).  Bad values raise as in :func:`read_pod_trace`."""
    p = Path(path)
    raw = _read_csv(p, POD_RESOURCE_COLUMNS, "pod list")
    src = str(p)
    names = raw["name"].to_numpy(dtype=object)
    cpu, mem, ngpu, milli = _pod_resources(raw, src, names, zero_cpu_ok=True)
    n = len(raw)
    return PodTable(
        task_id=np.arange(n, dtype=np.int64), name=names.astype(str).astype(object), arrival=np.zeros(n),
        duration=np.full(n, np.nan), cpu_milli=np.where(cpu == 0, float(zero_cpu_milli), cpu), memory_mib=mem,
        num_gpu=ngpu.astype(np.int64), gpu_milli=milli, qos=_text(raw, "qos"),
        gpu_spec=np.array([_norm_spec(s) for s in _text(raw, "gpu_spec")], dtype=object),
        trace_wait=np.full(n, np.nan))


def task_kinds(pods: PodTable) -> dict[str, int]:
    """Counts of CPU-only, GPU-sharing, one-whole-GPU and multi-GPU pods."""
    share = (pods.num_gpu == 1) & (pods.gpu_milli < MILLI)
    return {"cpu_only": int(np.sum(pods.num_gpu == 0)), "gpu_sharing": int(np.sum(share)),
            "one_gpu": int(np.sum((pods.num_gpu == 1) & ~share)), "multi_gpu": int(np.sum(pods.num_gpu > 1))}


def chronological_split(pods: PodTable, test_fraction: float) -> tuple[PodTable, PodTable]:
    """Train = the earliest ``1 - test_fraction`` of the pods by arrival, test = the rest, each
    shifted to start at 0 (no pod of the future leaks into training)."""
    if not 0 < test_fraction < 1:
        raise WorkloadError(f"workload.test_fraction must be in (0, 1), got {test_fraction}")
    n_test = int(round(test_fraction * len(pods)))
    if n_test < 1 or n_test >= len(pods):
        raise WorkloadError(f"workload: {len(pods)} pods are too few to split with test_fraction {test_fraction}")
    order = np.argsort(pods.arrival, kind="stable")
    train, test = pods.subset(order[: len(pods) - n_test]), pods.subset(order[len(pods) - n_test:])
    for part in (train, test):
        part.arrival = part.arrival - part.arrival[0]
    return train, test


def _read_csv(p: Path, required: tuple[str, ...], what: str) -> pd.DataFrame:
    """The CSV as text columns; WorkloadError if unreadable or a ``required`` column is missing."""
    if not p.exists():
        setting = "workload.nodes.path" if what == "node list" else "workload.path"
        raise WorkloadError(f"{p}: {what} not found (setting {setting}; the public traces are under paths.traces "
                            f"or $HYBRIDSCHED_TRACES, see docs/traces.md)")
    try:
        # everything as text, empty stays "": the importer decides what is missing or bad
        df = pd.read_csv(p, dtype=str, keep_default_na=False, skipinitialspace=True)
    except Exception as e:  # parser errors differ; keep the message to one line
        raise WorkloadError(f"{p}: cannot read as csv: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise WorkloadError(f"{p}: missing column(s) {', '.join(missing)} (a {what} needs {', '.join(required)})")
    short = _short_rows(p, len(df.columns))
    if short and (len(short) > 1 or short[0][0] != len(df) - 1):
        row, line, k = next(s for s in short if s[0] != len(df) - 1)
        raise WorkloadError(f"{p}: line {line} has {k} of {len(df.columns)} fields ({len(short)} short line(s))")
    if short:  # only the last line: a cut-off file; the caller decides what to do with it
        df.attrs["truncated_last_row"], df.attrs["truncated_line"] = short[0][0], short[0][1]
    return df


def _short_rows(p: Path, n_fields: int) -> list[tuple[int, int, int]]:
    """``(data row, line number, fields)`` of each record with fewer fields than the header
    (pandas would fill the missing ones with empty values and say nothing)."""
    import csv

    out = []
    with p.open(newline="") as f:
        reader = csv.reader(f, skipinitialspace=True)
        next(reader, None)  # the header
        row = 0
        for fields in reader:
            if not fields:  # blank lines, which pandas skips too
                continue
            if len(fields) < n_fields:
                out.append((row, reader.line_num, len(fields)))
            row += 1
    return out


def _pod_resources(raw: pd.DataFrame, src: str, names: np.ndarray,
                   zero_cpu_ok: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The checked resource columns ``(cpu_milli, memory_mib, num_gpu, gpu_milli)``."""
    cpu = _numeric(raw, "cpu_milli", src, names, required=True)
    mem = _numeric(raw, "memory_mib", src, names, required=True)
    ngpu = _numeric(raw, "num_gpu", src, names, required=True)
    milli = _numeric(raw, "gpu_milli", src, names, required=True)
    if zero_cpu_ok:
        _range(cpu >= 0, "cpu_milli", "must be >= 0", raw, src, names)
    else:
        _range(cpu > 0, "cpu_milli", "must be > 0", raw, src, names)
    _range(mem >= 0, "memory_mib", "must be >= 0", raw, src, names)
    _range((ngpu >= 0) & (ngpu == np.round(ngpu)), "num_gpu", "must be a whole number >= 0", raw, src, names)
    _range((ngpu == 0) | ((milli > 0) & (milli <= MILLI)), "gpu_milli",
           f"must be in (0, {MILLI}] when num_gpu > 0", raw, src, names)
    _range((ngpu != 0) | (milli == 0), "gpu_milli", "must be 0 when num_gpu = 0", raw, src, names)
    return cpu, mem, ngpu, milli


def _numeric(raw: pd.DataFrame, col: str, src: str, names: np.ndarray, required: bool = False) -> np.ndarray:
    """The column as float64, "" as NaN; a value that is not a number is an error naming its row.
    A ``required`` column may not have empty values either."""
    text = raw[col].astype(str).str.strip()
    values = pd.to_numeric(text.where(text != "", None), errors="coerce").to_numpy(dtype=np.float64)
    bad = (np.isnan(values) & (text != "").to_numpy()) | np.isinf(values)
    if required:
        bad |= (text == "").to_numpy()
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        shown = text.iloc[r]
        raise WorkloadError(f"{src}: column '{col}', row {r + 1} (line {r + 2}, pod {names[r]!r}): "
                            f"{'empty value' if shown == '' else f'cannot parse {shown!r} as a number'}"
                            f" ({int(bad.sum())} bad value(s) in this column)")
    return values


def _range(ok: np.ndarray, col: str, rule: str, raw: pd.DataFrame, src: str, names: np.ndarray) -> None:
    if not ok.all():
        r = int(np.flatnonzero(~ok)[0])
        raise WorkloadError(f"{src}: column '{col}', row {r + 1} (line {r + 2}, pod {names[r]!r}): "
                            f"value {raw[col].iloc[r]!r} {rule} ({int((~ok).sum())} such row(s))")


def _text(raw: pd.DataFrame, col: str) -> np.ndarray:
    if col not in raw.columns:
        return np.full(len(raw), "", dtype=object)
    return raw[col].astype(str).str.strip().to_numpy(dtype=object)


def _norm_spec(s: str) -> str:
    """``" V100M16 | V100M32"`` -> ``"V100M16|V100M32"``; empty = any model."""
    return GPU_SPEC_SEP.join(sorted({m.strip() for m in str(s).split(GPU_SPEC_SEP) if m.strip()}))


def _counts(v: np.ndarray) -> dict[str, int]:
    keys, counts = np.unique(v.astype(str), return_counts=True)
    return {str(k) if k else "<none>": int(c) for k, c in zip(keys, counts, strict=True)}


def _sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


# --- nodes -----------------------------------------------------------------------------------------


@dataclass
class NodeTable(_Columns):
    """Nodes as parallel arrays; ``model`` is "" for a node without GPUs."""

    name: np.ndarray  # object (str)
    cpu_milli: np.ndarray  # float64
    memory_mib: np.ndarray  # float64
    n_gpu: np.ndarray  # int64
    model: np.ndarray  # object (str)

    COLUMNS = ("name", "cpu_milli", "memory_mib", "n_gpu", "model")
    KINDS = {"name": object, "model": object, "n_gpu": np.int64}
    LABEL = "node table"


    def summary(self) -> dict[str, Any]:
        """Nodes and GPUs per model, and totals."""
        df = self.to_frame()
        by = df.groupby(df["model"].replace("", "<cpu>"))
        return {"nodes": len(self), "gpus": int(self.n_gpu.sum()), "cpu_cores": float(self.cpu_milli.sum() / MILLI),
                "by_model": {str(m): {"nodes": int(len(g)), "gpus": int(g["n_gpu"].sum())} for m, g in by}}


def read_node_list(path: str | Path, sample: dict | None = None) -> NodeTable:
    """The node list CSV as a :class:`NodeTable`; with ``sample`` (keys of :func:`sample_nodes`),
    a seeded sample of it."""
    p = Path(path)
    raw = _read_csv(p, NODE_COLUMNS, "node list")
    src = str(p)
    if "truncated_last_row" in raw.attrs:  # a node list cut short would silently shrink the cluster
        raise WorkloadError(f"{src}: the last line ({raw.attrs['truncated_line']}) is truncated "
                            f"(fewer fields than the header); the file is incomplete")
    if len(raw) == 0:
        raise WorkloadError(f"no nodes in {src} (the file has a header and no rows)")
    names = raw["sn"].to_numpy(dtype=object)
    cpu = _numeric(raw, "cpu_milli", src, names, required=True)
    mem = _numeric(raw, "memory_mib", src, names, required=True)
    gpu = _numeric(raw, "gpu", src, names, required=True)
    model = _text(raw, "model")
    _range(cpu > 0, "cpu_milli", "must be > 0", raw, src, names)
    _range(mem > 0, "memory_mib", "must be > 0", raw, src, names)
    _range((gpu >= 0) & (gpu == np.round(gpu)) & (gpu <= 64), "gpu", "must be a whole number in [0, 64]",
           raw, src, names)
    _range((gpu == 0) == (model == ""), "model", "must be empty exactly when gpu = 0", raw, src, names)
    seen: dict[str, int] = {}
    for r, name in enumerate(str(n) for n in names.tolist()):  # one node counted twice would skew every share
        if name in seen:
            raise WorkloadError(f"{src}: column 'sn', row {r + 1} (line {r + 2}): node name {name!r} repeats "
                                f"row {seen[name] + 1}; node names must be unique")
        seen[name] = r
    if not (gpu > 0).any():  # GPU pods would have nowhere to run, and GPU shares divide by 0
        raise WorkloadError(f"{src}: no node has a GPU (gpu = 0 on all {len(raw)} rows); "
                            f"the cluster kind needs at least one GPU node")
    nodes = NodeTable(names.astype(str).astype(object), cpu, mem, gpu.astype(np.int64), model)
    return sample_nodes(nodes, **sample) if sample else nodes


def sample_nodes(nodes: NodeTable, n_nodes: int | None = None, seed: int = 0, min_per_model: int = 1) -> NodeTable:
    """``n_nodes`` nodes drawn without replacement, stratified by GPU model (CPU-only nodes are a
    model too): each model gets its share of ``n_nodes`` by largest remainders, at least
    ``min_per_model`` (so every GPU type stays in the cluster), then nodes are drawn at random
    within the model.  ``n_nodes`` null = all nodes."""
    if n_nodes is None or n_nodes >= len(nodes):
        return nodes
    models, counts = np.unique(nodes.model.astype(str), return_counts=True)
    if n_nodes < min_per_model * len(models):
        raise WorkloadError(f"workload.nodes.sample.n_nodes = {n_nodes} is below min_per_model * models "
                            f"= {min_per_model} * {len(models)}")
    base = np.minimum(counts, min_per_model)
    share = (n_nodes - base.sum()) * np.maximum(counts - base, 0) / max(np.sum(counts - base), 1)
    take = base + np.floor(share).astype(int)
    for k in np.argsort(-(share - np.floor(share)), kind="stable")[: n_nodes - take.sum()]:
        take[k] += 1
    rng = np.random.default_rng(seed)
    rows = [rng.choice(np.flatnonzero(nodes.model.astype(str) == m), size=int(t), replace=False)
            for m, t in zip(models, np.minimum(take, counts), strict=True)]
    return nodes.subset(np.sort(np.concatenate(rows)))
