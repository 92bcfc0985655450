"""The task table (columnar), synthetic workload generators and the workload file reader.

A task has an id, an arrival time (s), a size (GFLOP), a compute intensity in [0, 1],
a memory footprint (MB), a priority, an optional deadline (s, NaN = none) and a list of
parent task ids it depends on.  Files are parquet (``deps`` as a list column) or csv
(``deps`` as ``;``-separated ids).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from hybridsched.errors import WorkloadError
from hybridsched.kinds.machine.schema import (
    MIN_TASKS,
    OPTIONAL_COLUMNS,  # noqa: F401  (re-exported: the columns a file may have)
    REQUIRED_COLUMNS,
    TASK_SCHEMA,
    ColumnRule,
    deps_problems,
    finite_problem,
    parse_ids,
)


@dataclass
class TaskTable:
    """Tasks as parallel numpy arrays, sorted by arrival; dependencies as CSR index arrays."""

    task_id: np.ndarray
    arrival: np.ndarray
    size: np.ndarray
    intensity: np.ndarray
    memory_mb: np.ndarray
    priority: np.ndarray
    deadline: np.ndarray
    parent_ptr: np.ndarray  # parents of row i: parent_idx[parent_ptr[i]:parent_ptr[i+1]] (row indices)
    parent_idx: np.ndarray

    def __len__(self) -> int:
        return len(self.task_id)

    @property
    def has_deps(self) -> bool:
        return len(self.parent_idx) > 0

    def parents(self, i: int) -> np.ndarray:
        return self.parent_idx[self.parent_ptr[i] : self.parent_ptr[i + 1]]

    def children_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """(child_ptr, child_idx): the inverse of the parent relation, for the engine."""
        n = len(self)
        counts = np.diff(self.parent_ptr)
        child_of = np.repeat(np.arange(n), counts)  # row that has each parent entry
        order = np.argsort(self.parent_idx, kind="stable")
        child_idx = child_of[order].astype(np.int64)
        child_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.parent_idx, minlength=n), out=child_ptr[1:])
        return child_ptr, child_idx

    def to_frame(self) -> pd.DataFrame:
        deps = [self.task_id[self.parents(i)].tolist() for i in range(len(self))]
        return pd.DataFrame(
            {
                "task_id": self.task_id,
                "arrival": self.arrival,
                "size": self.size,
                "intensity": self.intensity,
                "memory_mb": self.memory_mb,
                "priority": self.priority,
                "deadline": self.deadline,
                "deps": pd.Series(deps, dtype=object),
            }
        )

    def subset(self, rows: np.ndarray) -> TaskTable:
        """The tasks at ``rows`` (dependencies to dropped tasks are dropped)."""
        df = self.to_frame().iloc[np.asarray(rows)].reset_index(drop=True)
        keep = set(df["task_id"].tolist())
        df["deps"] = [[d for d in ds if d in keep] for ds in df["deps"]]
        return from_frame(df, source="<subset>")


# --- reading and checking ---------------------------------------------------------


def read_tasks(path: str | Path, max_memory_mb: float | None = None, fmt: str | None = None) -> TaskTable:
    """Read and check a workload file (``fmt`` csv or parquet; None = csv for a ``.csv`` suffix,
    else parquet); raise WorkloadError naming the file and problem.  Every stage reads its
    workload through this, so every stage refuses what validate refuses (an empty file too)."""
    p = Path(path)
    if not p.exists():
        raise WorkloadError(f"{p}: file not found")
    fmt = fmt or ("csv" if p.suffix == ".csv" else "parquet")
    if fmt == "csv":
        check_csv_shape(p)
    try:
        df = pd.read_csv(p) if fmt == "csv" else pd.read_parquet(p)
    except Exception as e:  # parser errors differ by format; keep the message to one line
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise WorkloadError(f"{p}: cannot read as {fmt}: {first}") from e
    return from_frame(df, source=str(p), max_memory_mb=max_memory_mb)


def check_csv_shape(p: Path) -> None:
    """Refuse what pandas reads silently wrong: a header naming a column twice (pandas renames
    the second ``size.1`` and reads the first), a line with fewer fields than the header (pandas
    fills the rest with NaN), and a file that does not end with a newline (cut off inside its
    last value, which pandas reads cut).  A cut-off file is reported as truncated, naming its
    last line."""
    import csv

    with p.open(newline="", encoding="utf-8", errors="replace") as f:  # bad bytes: pandas' message
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            return  # an empty file: pandas' own message
        twice = sorted({c for c in header if header.count(c) > 1})
        if twice:
            raise WorkloadError(f"{p}: column(s) {', '.join(repr(c) for c in twice)} named twice in the header "
                                f"(a column's values would be read from one of them only)")
        short, last = [], reader.line_num
        for fields in reader:
            if fields:  # blank lines, which pandas skips too
                last = reader.line_num
                if len(fields) < len(header):
                    short.append((reader.line_num, len(fields)))
    if short and short[-1][0] == last and len(short) == 1:
        raise WorkloadError(f"{p}: the last line ({last}) is truncated (fewer fields than the header); "
                            f"the file is incomplete")
    if short:
        line, k = next(s for s in short if s[0] != last)
        raise WorkloadError(f"{p}: line {line} has {k} of {len(header)} fields ({len(short)} short line(s))")
    with p.open("rb") as b:
        b.seek(-1, 2)
        if b.read(1) not in (b"\n", b"\r"):
            raise WorkloadError(f"{p}: the last line ({last}) is truncated (no newline at its end, so its last value "
                                f"may be cut short); the file is incomplete (a complete csv file ends with a newline)")


def from_frame(df: pd.DataFrame, source: str = "<frame>", max_memory_mb: float | None = None) -> TaskTable:
    """Check a task DataFrame against the schema (``schema.py``, the rules validate runs too) and
    turn it into a TaskTable; WorkloadError (one line, naming ``source``) at the first broken rule."""
    twice = sorted({str(c) for c in df.columns[df.columns.duplicated()]})
    if twice:  # a parquet file (or frame) can hold two columns of one name
        raise WorkloadError(f"{source}: column(s) {', '.join(repr(c) for c in twice)} named twice in the header "
                            f"(a column's values would be read from one of them only)")
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise WorkloadError(f"{source}: missing column(s) {', '.join(missing)}")
    if len(df) < MIN_TASKS:
        raise WorkloadError(f"{source}: 0 tasks (an empty workload has nothing to schedule)")
    cols: dict[str, np.ndarray] = {}
    for rule in TASK_SCHEMA:
        if rule.dtype == "ids":
            continue
        if rule.name not in df.columns:
            cols[rule.name] = np.full(len(df), rule.default, dtype=np.float64)
            continue
        v = _typed(df[rule.name], rule, source)
        if not rule.nullable:
            _check(~np.isnan(v), source, rule.name, "NaN (missing)", v)
        if rule.finite_max is not None:  # before the range: its words name the limit (inf stays the range's)
            with np.errstate(invalid="ignore"):
                _check(~(np.isfinite(v) & (v > rule.finite_max)), source, rule.name, finite_problem(rule), v)
        text = rule.range_text(max_memory_mb)
        if text is not None:
            _check(rule.in_range(v, max_memory_mb), source, rule.name, f"not {text}", v)
        cols[rule.name] = v
    _check(np.diff(cols["arrival"], prepend=-np.inf) >= 0, source, "arrival", "not sorted (decreasing)", cols["arrival"])
    ids = cols["task_id"].astype(np.int64)
    _check(~pd.Series(ids).duplicated().to_numpy(), source, "task_id", "duplicated", ids)
    parent_ptr, parent_idx = _parse_deps(df["deps"] if "deps" in df.columns else None, ids, source)
    return TaskTable(ids, cols["arrival"], cols["size"], cols["intensity"], cols["memory_mb"],
                     cols["priority"].astype(np.int64), cols["deadline"], parent_ptr, parent_idx)


def _typed(col: pd.Series, rule: ColumnRule, source: str) -> np.ndarray:
    """The column as float64 if its dtype is the rule's (integer dtype for ``int``; any numeric,
    not bool, for ``float``): the same type test as the suite's type expectation."""
    numeric = pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)
    if rule.dtype == "int" and not pd.api.types.is_integer_dtype(col):
        raise WorkloadError(f"{source}: column '{rule.name}' is not an integer column (dtype {col.dtype}"
                            f"{'; a missing or fractional value makes it float' if numeric else ''})")
    if not numeric:
        bad = pd.to_numeric(col, errors="coerce").isna() & col.notna()
        r = int(np.flatnonzero(bad.to_numpy())[0]) if bad.any() else 0
        raise WorkloadError(f"{source}: column '{rule.name}' is not numeric (dtype {col.dtype}; "
                            f"first at row {r}: {_plain(col.iloc[r])!r})")
    return col.to_numpy(dtype=np.float64, na_value=np.nan)


def _plain(v: object) -> object:
    """A numpy scalar as the Python number it holds, so messages print ``-1.0``, not ``np.float64(-1.0)``."""
    return v.item() if isinstance(v, np.generic) else v


def _check(ok: np.ndarray, source: str, col: str, problem: str, values: np.ndarray) -> None:
    bad = np.flatnonzero(~ok)
    if len(bad):
        r = int(bad[0])
        raise WorkloadError(f"{source}: column '{col}': {len(bad)} value(s) {problem} "
                            f"(first at row {r}: {_plain(values[r])!r})")


def _parse_deps(col: pd.Series | None, ids: np.ndarray, source: str) -> tuple[np.ndarray, np.ndarray]:
    """CSR parent arrays; every dependency must be the task_id of an earlier row (the suite's
    rule ``schema.DEPS_EARLIER``), which also rules out cycles."""
    n = len(ids)
    if col is None:
        return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    cells = col.tolist()
    problems = deps_problems(ids.tolist(), cells)
    bad = [r for r, p in enumerate(problems) if p]
    if bad:
        r = bad[0]
        what = problems[r]
        if not what.startswith("not a list"):
            d = int(what.split(";")[0])
            known = set(ids.tolist())
            why = "itself" if d == ids[r] else ("a later row" if d in known else "unknown")
            what = f"depends on task {d} ({why}), not the task_id of an earlier row"
        raise WorkloadError(f"{source}: column 'deps': row {r} (task {int(ids[r])}) {what} "
                            f"({len(bad)} such row(s); a dependency must arrive first, so no cycles)")
    row_of = {int(t): r for r, t in enumerate(ids)}
    ptr = np.zeros(n + 1, dtype=np.int64)
    idx: list[int] = []
    for r, cell in enumerate(cells):
        idx.extend(row_of[d] for d in parse_ids(cell))
        ptr[r + 1] = len(idx)
    return ptr, np.asarray(idx, dtype=np.int64)


# --- synthetic generation ---------------------------------------------------------


@dataclass(frozen=True)
class WorkloadSpec:
    """Distribution of a synthetic workload (see conf/workload/*.yaml for the scenarios)."""

    rate: float = 2.0  # mean arrivals per second
    size_range: tuple[float, float] = (1.0, 400.0)  # GFLOP, log-uniform
    intensity_range: tuple[float, float] = (0.0, 1.0)  # uniform
    memory_range: tuple[float, float] = (50.0, 12000.0)  # MB, log-uniform
    burst_amplitude: float = 0.0  # rate(t) = rate * (1 + a * sin(2 pi t / period)), a in [0, 1)
    burst_period_s: float = 600.0
    dag_job_size: int = 0  # >0: tasks form layered DAG jobs of this many tasks
    dag_max_parents: int = 2
    priority_levels: int = 1
    deadline_slack: float = 0.0  # >0: deadline = arrival + slack * nominal CPU time
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        lo, hi = self.intensity_range
        if not 0 <= lo <= hi <= 1:
            raise WorkloadError(f"workload.intensity_range must satisfy 0 <= lo <= hi <= 1, got {list(self.intensity_range)}")
        for name in ("size_range", "memory_range"):
            lo, hi = getattr(self, name)
            if not 0 < lo <= hi:
                raise WorkloadError(f"workload.{name} must satisfy 0 < lo <= hi, got {[lo, hi]}")
        if self.rate <= 0:
            raise WorkloadError(f"workload.rate must be > 0, got {self.rate}")
        if not 0 <= self.burst_amplitude < 1:
            raise WorkloadError(f"workload.burst_amplitude must be in [0, 1), got {self.burst_amplitude}")


def generate(spec: WorkloadSpec, n: int, rng: np.random.Generator, first_id: int = 0, cpu_gflops: float = 50.0,
             t0: float = 0.0) -> TaskTable:
    """Draw ``n`` tasks from ``spec`` with the given RNG; arrivals continue after time ``t0``."""
    arrival = _arrivals(spec, n, rng, t0)
    size = _log_uniform(rng, *spec.size_range, n)
    intensity = rng.uniform(*spec.intensity_range, n)
    memory = _log_uniform(rng, *spec.memory_range, n)
    priority = rng.integers(0, max(1, spec.priority_levels), n).astype(np.int64)
    deadline = arrival + spec.deadline_slack * size / cpu_gflops if spec.deadline_slack > 0 else np.full(n, np.nan)
    ptr, idx = _layered_dag(n, spec.dag_job_size, spec.dag_max_parents, rng)
    ids = np.arange(first_id, first_id + n, dtype=np.int64)
    return TaskTable(ids, arrival, size, intensity, memory, priority, deadline, ptr, idx)


def _log_uniform(rng: np.random.Generator, lo: float, hi: float, n: int) -> np.ndarray:
    return np.exp(rng.uniform(np.log(lo), np.log(hi), n))


def _arrivals(spec: WorkloadSpec, n: int, rng: np.random.Generator, t0: float = 0.0) -> np.ndarray:
    if spec.burst_amplitude == 0:
        arr = np.cumsum(rng.exponential(1.0 / spec.rate, n))
        return arr + t0 if t0 else arr
    # Non-homogeneous Poisson by thinning a process at the peak rate.
    peak = spec.rate * (1 + spec.burst_amplitude)
    out: list[np.ndarray] = []
    have = 0
    while have < n:
        cand = t0 + np.cumsum(rng.exponential(1.0 / peak, 2 * (n - have) + 16))
        rate_t = spec.rate * (1 + spec.burst_amplitude * np.sin(2 * np.pi * cand / spec.burst_period_s))
        keep = cand[rng.uniform(0, peak, len(cand)) < rate_t]
        out.append(keep)
        have += len(keep)
        t0 = cand[-1]
    return np.concatenate(out)[:n]


def _layered_dag(n: int, job_size: int, max_parents: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Consecutive jobs of ``job_size`` tasks, each split into layers; a task depends on 1..max_parents
    tasks of the previous layer of its job (so parents always arrive first)."""
    ptr = np.zeros(n + 1, dtype=np.int64)
    if job_size <= 1:
        return ptr, np.zeros(0, dtype=np.int64)
    idx: list[int] = []
    for start in range(0, n, job_size):
        stop = min(n, start + job_size)
        width = max(1, int(round(np.sqrt(stop - start))))
        prev: list[int] = []
        layer: list[int] = []
        for r in range(start, stop):
            if prev:
                k = int(rng.integers(1, min(max_parents, len(prev)) + 1))
                idx.extend(sorted(rng.choice(prev, size=k, replace=False).tolist()))
            ptr[r + 1] = len(idx)
            layer.append(r)
            if len(layer) == width:
                prev, layer = layer, []
    return ptr, np.asarray(idx, dtype=np.int64)


def spec_from_config(cfg: dict, split: str = "train") -> WorkloadSpec:
    """The WorkloadSpec of one split; the ``test`` mapping overrides keys for the test split."""
    names = set(WorkloadSpec.__dataclass_fields__) - {"extra"}
    merged = dict(cfg)
    if split == "test":
        merged.update(cfg.get("test") or {})
    unknown = set(cfg.get("test") or {}) - names
    if unknown:
        raise WorkloadError(f"workload.test: unknown key(s) {sorted(unknown)}")
    kw = {k: (tuple(v) if isinstance(v, list | tuple) else v) for k, v in merged.items() if k in names}
    return WorkloadSpec(**kw)


def generate_splits(cfg: dict, cpu_gflops: float = 50.0) -> tuple[TaskTable, TaskTable]:
    """Train and test workloads from a workload config, from independent streams of one seed."""
    for key in ("n_train", "n_test"):
        if int(cfg[key]) < MIN_TASKS:
            raise WorkloadError(f"workload.{key} must be >= {MIN_TASKS}, got {int(cfg[key])} "
                                f"(0 tasks: an empty workload has nothing to schedule)")
    train_rng, test_rng = np.random.default_rng(int(cfg.get("seed", 0))).spawn(2)
    train = generate(spec_from_config(cfg, "train"), int(cfg["n_train"]), train_rng, 0, cpu_gflops)
    test = generate(spec_from_config(cfg, "test"), int(cfg["n_test"]), test_rng, int(cfg["n_train"]), cpu_gflops)
    return train, test
