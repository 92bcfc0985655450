"""The service's store: SQLAlchemy 2 on SQLite (default, WAL) or PostgreSQL (psycopg 3).

Writes come in :class:`Batch` objects, each written in ONE transaction together with the
run's progress counter, so a crash (even ``kill -9``) leaves either the whole batch or none
of it, and the counter always matches the rows: the run resumes from the committed prefix.
A :class:`BatchWriter` thread merges queued batches so persistence keeps up with the engine.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from hybridsched.errors import HybridschedError

MIGRATIONS = Path(__file__).with_name("migrations")
_PLACEHOLDER = {"sqlite": "?", "postgresql": "%s"}  # DB-API paramstyle of each supported driver
TRACE_COLUMNS = ("task_id", "policy", "arrival", "ready", "gpu", "fraction", "cpu_start", "cpu_end", "gpu_start",
                 "gpu_end", "gpu_mem_mb", "end", "wait", "energy_j")


def _nullable(a: np.ndarray) -> list:
    """Floats as Python values with NaN -> None (SQLite has no NaN; NULL means 'did not run').
    Vectorised (an object array with None where NaN): half the writer thread's time, and GIL, of
    a per-value Python test."""
    o = a.astype(object)
    o[np.isnan(a)] = None
    return o.tolist()


def _columns(cols: dict[str, Any]) -> tuple[list[str], list[tuple]]:
    """Column arrays (and scalars shared by every row) as (names, row tuples) for an executemany."""
    n = max((len(v) for v in cols.values() if isinstance(v, np.ndarray)), default=0)
    lists = [(_nullable(v) if v.dtype.kind == "f" else v.tolist()) if isinstance(v, np.ndarray) else [v] * n
             for v in cols.values()]
    return list(cols), list(zip(*lists))


def _in_memory(url: str) -> bool:
    """A SQLite database that lives in its connection (``sqlite://``, ``sqlite:///:memory:``)."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return u.get_backend_name() == "sqlite" and u.database in (None, "", ":memory:")


def _engine(url: str, **kw: Any):  # -> sqlalchemy.Engine
    """An engine on ``url`` (SQLite: WAL, foreign keys on each connection)."""
    from sqlalchemy import create_engine, event

    if url.startswith("sqlite"):
        kw["connect_args"] = {"check_same_thread": False, "timeout": 30}
        if _in_memory(url):  # a single-connection pool: no size to set
            kw = {k: v for k, v in kw.items() if k not in ("pool_size", "max_overflow", "pool_timeout")}
    engine = create_engine(url, **kw)
    if engine.dialect.name == "sqlite":
        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record) -> None:  # noqa: ANN001
            cur = dbapi_conn.cursor()
            # WAL: readers never block the writer; NORMAL: a killed process loses no committed row
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()
    return engine


@dataclass
class Batch:
    """Rows for a consecutive block of a run's tasks, with every policy's results for them."""

    run_id: int
    n_tasks: int  # the run's committed task count once this batch is in
    sim_time: float
    tasks: dict[str, np.ndarray]  # task_id, segment, arrival, size, intensity, memory_mb, priority, deadline
    deps: np.ndarray  # (k, 2): task_id, parent_id
    results: list[dict[str, np.ndarray]]  # one per policy; keys of ResultRow (policy as a str)
    training: list[dict[str, Any]] = field(default_factory=list)  # column dicts of TrainingRow
    retrains: list[dict[str, Any]] = field(default_factory=list)  # rows of RetrainRow
    stats: dict[str, Any] | None = None  # RaceStats.to_dict() once this batch is in (runs.stats)

    def merge(self, other: Batch) -> Batch:
        """This batch followed by ``other`` (same run), as one."""
        def cat(a: dict, b: dict) -> dict:
            return {k: (np.concatenate([a[k], b[k]]) if isinstance(a[k], np.ndarray) else a[k]) for k in a}

        by_policy = {r["policy"]: r for r in self.results}
        results = [cat(by_policy[r["policy"]], r) if r["policy"] in by_policy else r for r in other.results]
        return Batch(self.run_id, other.n_tasks, other.sim_time, cat(self.tasks, other.tasks),
                     np.concatenate([self.deps, other.deps]), results, self.training + other.training,
                     self.retrains + other.retrains, other.stats if other.stats is not None else self.stats)


class HistoryKey(NamedTuple):
    """Where a result row stands in the history's order: its primary key."""

    run_id: int
    task_id: int
    policy: str


def _blocks(runs: list[tuple[int, int, list[str]]], policy: str | None) -> list[tuple[int, int]]:
    """Ranges (lo, hi) of run ids, newest first, that hold every run with matching rows and no
    run whose rows all fail the policy filter: a scan of a range never reads another policy set's
    run (a filter on a policy few runs raced reads those runs only)."""
    blocks: list[list[int]] = []
    joined = False  # the newest block takes the next matching run
    for rid, n, names in runs:  # newest first
        if n == 0:  # no rows: neither in a range nor breaking one
            continue
        if policy is None or policy in names:
            if joined:
                blocks[-1][0] = rid
            else:
                blocks.append([rid, rid])
                joined = True
        else:
            joined = False
    return [(lo, hi) for lo, hi in blocks]


class Store:
    """Tables, migrations, batched writes and the queries of the API.

    Three engines on one database, so no kind of work waits for another's connections: the
    main one (the writer, race control), ``reader`` (the history pages: at most ``read_pool``
    connections, the API runs that many history queries at a time) and a one-connection probe
    for :meth:`ping` (``/api/health`` answers while every history connection is busy)."""

    def __init__(self, url: str, read_pool: int = 4) -> None:
        self.url = url
        self.read_pool = read_pool
        if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.engine = _engine(url, pool_pre_ping=True)
        if _in_memory(url):  # each engine would open its own empty database
            self.reader = self.probe = self.engine
        else:
            kw: dict[str, Any] = {}
            if self.engine.dialect.name == "postgresql":
                # every history query reads the primary key in its order; a planner that has not
                # analysed a table yet may sort all of a run's rows instead: never sort
                kw["connect_args"] = {"options": "-c enable_sort=off"}
            self.reader = _engine(url, pool_pre_ping=True, pool_size=read_pool, max_overflow=0, **kw)
            self.probe = _engine(url, pool_pre_ping=True, pool_size=1, max_overflow=0, pool_timeout=5)

    # --- schema ------------------------------------------------------------------------
    def upgrade(self) -> None:
        """Apply the Alembic migrations up to head (idempotent)."""
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        with self.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def ping(self) -> None:
        """Raise if the database cannot answer a query."""
        from sqlalchemy import text

        with self.probe.connect() as conn:
            conn.execute(text("SELECT 1"))

    def dispose(self) -> None:
        """Close every engine's pooled connections."""
        for engine in {id(e): e for e in (self.engine, self.reader, self.probe)}.values():
            engine.dispose()

    # --- runs --------------------------------------------------------------------------
    def create_run(self, config: dict[str, Any], speed: float | None = None) -> int:
        from sqlalchemy import insert

        from hybridsched.service.models import RunRow

        now = time.time()
        with self.engine.begin() as conn:
            res = conn.execute(insert(RunRow).values(created_at=now, updated_at=now, status="running",
                                                      config=config, n_tasks=0, sim_time=0.0, speed=speed))
            return int(res.inserted_primary_key[0])

    def set_speed(self, run_id: int, speed: float) -> None:
        """Remember the speed of a run (a resumed run goes on at it)."""
        from sqlalchemy import update

        from hybridsched.service.models import RunRow

        with self.engine.begin() as conn:
            conn.execute(update(RunRow).where(RunRow.id == run_id).values(speed=speed, updated_at=time.time()))

    def latest_run(self) -> dict[str, Any] | None:
        """The newest run (any status), or None."""
        from sqlalchemy import select

        from hybridsched.service.models import RunRow

        with self.engine.connect() as conn:
            row = conn.execute(select(RunRow.__table__).order_by(RunRow.id.desc()).limit(1)).mappings().first()
        return dict(row) if row else None

    def set_status(self, run_id: int, status: str) -> None:
        from sqlalchemy import update

        from hybridsched.service.models import RunRow

        with self.engine.begin() as conn:
            conn.execute(update(RunRow).where(RunRow.id == run_id).values(status=status, updated_at=time.time()))

    def run(self, run_id: int) -> dict[str, Any] | None:
        from sqlalchemy import select

        from hybridsched.service.models import RunRow

        with self.engine.connect() as conn:
            row = conn.execute(select(RunRow.__table__).where(RunRow.id == run_id)).mappings().first()
        return dict(row) if row else None

    def mark_interrupted(self) -> int:
        """Runs left 'running'/'paused' by a process that died: 'interrupted' (resumable)."""
        from sqlalchemy import update

        from hybridsched.service.models import RunRow

        with self.engine.begin() as conn:
            res = conn.execute(update(RunRow).where(RunRow.status.in_(["running", "paused"]))
                               .values(status="interrupted", updated_at=time.time()))
            return int(res.rowcount or 0)

    def latest_resumable(self) -> dict[str, Any] | None:
        """The newest run that was stopped or interrupted before its end."""
        from sqlalchemy import select

        from hybridsched.service.models import RunRow

        q = (select(RunRow.__table__).where(RunRow.status.in_(["interrupted", "stopped"]))
             .order_by(RunRow.id.desc()).limit(1))
        with self.engine.connect() as conn:
            row = conn.execute(q).mappings().first()
        return dict(row) if row else None

    def device_free_times(self, run_id: int, policy: str, n_devices: int) -> np.ndarray:
        """When each device (0 = CPU, 1.. = GPUs) of ``policy``'s cluster is free, from its results."""
        from sqlalchemy import func, select

        from hybridsched.service.models import ResultRow as R

        free = np.zeros(n_devices)
        with self.engine.connect() as conn:
            cpu = conn.execute(select(func.max(R.cpu_end)).where(R.run_id == run_id, R.policy == policy)).scalar()
            gpus = conn.execute(select(R.gpu, func.max(R.gpu_end)).where(R.run_id == run_id, R.policy == policy,
                                                                           R.gpu >= 0).group_by(R.gpu)).all()
        free[0] = cpu or 0.0
        for g, t in gpus:
            if 0 <= g < n_devices - 1:
                free[g + 1] = t or 0.0
        return free

    def segment_arrivals(self, run_id: int, k: int) -> tuple[float, float]:
        """(first committed arrival of segment ``k``, last committed arrival of segment ``k - 1``)."""
        from sqlalchemy import func, select

        from hybridsched.service.models import TaskRow as T

        with self.engine.connect() as conn:
            first = conn.execute(select(func.min(T.arrival)).where(T.run_id == run_id, T.segment == k)).scalar()
            last = conn.execute(select(func.max(T.arrival)).where(T.run_id == run_id, T.segment == k - 1)).scalar()
        return float(first or 0.0), float(last or 0.0)

    # --- writes ------------------------------------------------------------------------
    def write(self, batch: Batch) -> None:
        """Insert a batch and advance the run's counter in one transaction."""
        from sqlalchemy import insert, update

        from hybridsched.service.models import RetrainRow, RunRow

        with self.engine.begin() as conn:
            self._insert(conn, "tasks", {"run_id": batch.run_id, **batch.tasks})
            if len(batch.deps):
                self._insert(conn, "task_deps", {"run_id": batch.run_id, "task_id": batch.deps[:, 0],
                                                 "parent_id": batch.deps[:, 1]})
            for r in batch.results:
                self._insert(conn, "results", {"run_id": batch.run_id, **r})
            for tr in batch.training:
                self._insert(conn, "training_data", tr)
            if batch.retrains:
                conn.execute(insert(RetrainRow), batch.retrains)
            progress = {"n_tasks": batch.n_tasks, "sim_time": batch.sim_time, "updated_at": time.time()}
            if batch.stats is not None:
                progress["stats"] = batch.stats
            conn.execute(update(RunRow).where(RunRow.id == batch.run_id).values(**progress))

    def _insert(self, conn, table: str, cols: dict[str, Any]) -> None:  # noqa: ANN001
        """One executemany straight through the driver: the batched hot path (SQLAlchemy's
        per-row dict handling costs more than the database here)."""
        names, rows = _columns(cols)
        if not rows:
            return
        mark = _PLACEHOLDER[self.engine.dialect.name]
        quoted = ", ".join(f'"{c}"' for c in names)
        conn.exec_driver_sql(f'INSERT INTO {table} ({quoted}) VALUES ({", ".join([mark] * len(names))})', rows)

    # --- reads -------------------------------------------------------------------------
    def history(self, limit: int, offset: int = 0, policy: str | None = None, run_id: int | None = None,
                after: HistoryKey | None = None) -> tuple[int, list[dict[str, Any]], HistoryKey | None]:
        """(total matching, a page of at most ``limit`` results, the key to pass as ``after`` for the
        next page or None at the end). Results come newest first: run, task, then policy name, all
        descending (the primary key read backwards); the page starts after the key ``after`` (a
        row's (run_id, task_id, policy)) or, without it, ``offset`` rows from the start.

        Each query is a range of the primary key that starts at the cursor, so a page costs the
        same at any depth; ``offset`` walks the keys it skips (the API bounds it)."""
        with self.reader.connect() as conn:
            runs = self._runs(conn, run_id)
            total = sum(n * (len(names) if policy is None else int(policy in names)) for _, n, names in runs)
            blocks = _blocks(runs, policy)
            if offset:
                skipped = self._walk(conn, blocks, policy, after, offset, keys_only=True)
                if len(skipped) < offset:
                    return total, [], None
                after = HistoryKey(*skipped[-1])
            rows = [dict(r) for r in self._walk(conn, blocks, policy, after, limit + 1)]
            nxt = None
            if len(rows) > limit:  # one row more than the page: there is a next page
                rows = rows[:limit]
                nxt = HistoryKey(rows[-1]["run_id"], rows[-1]["task_id"], rows[-1]["policy"])
            self._add_task_columns(conn, rows)
        return total, rows, nxt

    @staticmethod
    def _runs(conn, run_id: int | None) -> list[tuple[int, int, list[str]]]:  # noqa: ANN001
        """(id, committed tasks, policies) of every run (or of ``run_id``), newest first. A
        committed task has one result row per policy of its run (batches are atomic), so these
        give the totals without a scan of the results table."""
        from sqlalchemy import select

        from hybridsched.service.models import RunRow

        q = select(RunRow.id, RunRow.n_tasks, RunRow.config).order_by(RunRow.id.desc())
        if run_id is not None:
            q = q.where(RunRow.id == run_id)
        return [(int(i), int(n or 0), list((config or {}).get("policies", []))) for i, n, config in conn.execute(q)]

    @staticmethod
    def _walk(conn, blocks: list[tuple[int, int]], policy: str | None, after: HistoryKey | None, n: int,  # noqa: ANN001
              keys_only: bool = False) -> list:
        """Up to ``n`` result rows (or their keys) after ``after``, newest first, from the run
        ranges ``blocks``: one backward range scan of the primary key per block until ``n`` are in."""
        from sqlalchemy import select, tuple_

        from hybridsched.service.models import ResultRow as R

        cols = (R.run_id, R.task_id, R.policy) if keys_only else (R.__table__,)
        out: list = []
        for lo, hi in blocks:
            if after is not None and lo > after.run_id:
                continue
            cond = [R.run_id >= lo]
            if after is not None and after.run_id <= hi:
                # the cursor is the scan's upper end (no second one: the database would pick one)
                cond.append(tuple_(R.run_id, R.task_id, R.policy) < tuple_(*after))
            else:
                cond.append(R.run_id <= hi)
            if policy is not None:
                cond.append(R.policy == policy)
            q = (select(*cols).where(*cond).order_by(R.run_id.desc(), R.task_id.desc(), R.policy.desc())
                 .limit(n - len(out)))
            res = conn.execute(q)
            out += res.all() if keys_only else res.mappings().all()
            if len(out) >= n:
                break
        return out

    @staticmethod
    def _add_task_columns(conn, rows: list[dict[str, Any]]) -> None:  # noqa: ANN001
        """Each row's task columns (arrival, size, intensity, memory_mb), read by one primary-key
        range per run of the page: a page's tasks of a run are consecutive in that run."""
        from sqlalchemy import select

        from hybridsched.service.models import TaskRow as T

        cols = ("arrival", "size", "intensity", "memory_mb")
        by_run: dict[int, list[dict[str, Any]]] = {}
        for r in rows:
            by_run.setdefault(r["run_id"], []).append(r)
        for rid, part in by_run.items():
            ids = [r["task_id"] for r in part]
            q = (select(T.task_id, *(getattr(T, c) for c in cols))
                 .where(T.run_id == rid, T.task_id >= min(ids), T.task_id <= max(ids)))
            found = {t: vals for t, *vals in conn.execute(q)}
            for r in part:
                r.update(zip(cols, found.get(r["task_id"], (None,) * len(cols))))

    def counts(self, run_id: int) -> dict[str, int]:
        """Committed result rows per policy of a run."""
        from sqlalchemy import func, select

        from hybridsched.service.models import ResultRow as R

        with self.engine.connect() as conn:
            return {p: int(n) for p, n in conn.execute(select(R.policy, func.count()).where(R.run_id == run_id)
                                                       .group_by(R.policy))}

    def delete_history(self) -> int:
        """Delete every run and its rows; return the number of runs deleted."""
        from sqlalchemy import delete

        from hybridsched.service.models import ResultRow, RetrainRow, RunRow, TaskDepRow, TaskRow, TrainingRow

        with self.engine.begin() as conn:
            for table in (ResultRow, TaskDepRow, TaskRow, TrainingRow, RetrainRow):
                conn.execute(delete(table))
            return int(conn.execute(delete(RunRow)).rowcount or 0)

    def trace_frames(self, run_id: int):  # -> dict[str, pandas.DataFrame]
        """Each policy's results of a run in the machine kind's per-task trace schema."""
        import pandas as pd
        from sqlalchemy import select

        from hybridsched.service.models import ResultRow as R
        from hybridsched.service.models import TaskRow as T

        q = (select(R.__table__, T.arrival).join(T, (T.run_id == R.run_id) & (T.task_id == R.task_id))
             .where(R.run_id == run_id).order_by(R.policy, R.task_id))
        with self.engine.connect() as conn:
            df = pd.DataFrame(conn.execute(q).mappings().all())
        if df.empty:
            raise HybridschedError(f"run {run_id}: no results in {self._safe_url()}")
        out = {}
        for policy, g in df.groupby("policy", sort=True):
            g = g.reset_index(drop=True).astype({c: "float64" for c in ("cpu_start", "cpu_end", "gpu_start", "gpu_end")})
            g["wait"] = np.fmin(g["cpu_start"], g["gpu_start"]) - g["arrival"]
            out[str(policy)] = g[list(TRACE_COLUMNS)].astype({"task_id": "int64", "gpu": "int64"})
        return out

    def tasks_frame(self, run_id: int):  # -> pandas.DataFrame in the workload file schema
        import pandas as pd
        from sqlalchemy import select

        from hybridsched.service.models import TaskDepRow as D
        from hybridsched.service.models import TaskRow as T

        with self.engine.connect() as conn:
            tasks = pd.DataFrame(conn.execute(select(T.task_id, T.arrival, T.size, T.intensity, T.memory_mb,
                                                     T.priority, T.deadline).where(T.run_id == run_id)
                                              .order_by(T.arrival, T.task_id)).mappings().all())
            deps = pd.DataFrame(conn.execute(select(D.task_id, D.parent_id).where(D.run_id == run_id)).mappings().all(),
                                columns=["task_id", "parent_id"])
        by_task = deps.groupby("task_id")["parent_id"].apply(list).to_dict() if len(deps) else {}
        tasks["deadline"] = tasks["deadline"].astype("float64")
        tasks["deps"] = pd.Series([by_task.get(t, []) for t in tasks["task_id"]], dtype=object)
        return tasks

    def export_run(self, run_id: int, out_dir: str | Path) -> Path:
        """Write ``<policy>.parquet`` traces and ``tasks.parquet`` of a run into ``out_dir``
        (atomically), the layout the simulate stage writes, for ``evaluate`` and the plots."""
        from hybridsched.io import atomic_dir, write_frame

        frames = self.trace_frames(run_id)
        tasks = self.tasks_frame(run_id)
        with atomic_dir(out_dir) as tmp:
            for policy, frame in frames.items():
                write_frame(Path(tmp) / f"{policy}.parquet", frame)
            write_frame(Path(tmp) / "tasks.parquet", tasks)
        return Path(out_dir)

    def _safe_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)


class BatchWriter:
    """A thread that writes queued batches, merging what piled up into one transaction
    (at most ``max_tasks`` tasks) so the database keeps up with the engine."""

    def __init__(self, store: Store, max_tasks: int = 5000, on_written=None) -> None:  # noqa: ANN001
        self.store = store
        self.max_tasks = max_tasks
        self.on_written = on_written  # callback(batch, seconds) after each commit
        self._q: queue.Queue[Batch | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="hybridsched-writer", daemon=True)
        self.error: BaseException | None = None
        self._thread.start()

    def put(self, batch: Batch) -> None:
        if self.error is not None:
            raise HybridschedError(f"database writer failed: {self.error}")
        self._q.put(batch)

    def flush(self) -> None:
        """Block until everything queued so far is committed."""
        self._q.join()

    def close(self) -> None:
        self._q.put(None)
        self._thread.join()

    @property
    def backlog(self) -> int:
        return self._q.qsize()

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                self._q.task_done()
                return
            taken = 1
            batch = item
            stop = False
            while len(batch.tasks["task_id"]) < self.max_tasks:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                taken += 1
                if nxt is None:
                    stop = True
                    break
                if nxt.run_id != batch.run_id:  # never merge across runs
                    self._write(batch)
                    batch = nxt
                else:
                    batch = batch.merge(nxt)
            self._write(batch)
            for _ in range(taken):
                self._q.task_done()
            if stop:
                return

    def _write(self, batch: Batch) -> None:
        t0 = time.perf_counter()
        try:
            self.store.write(batch)
        except Exception as e:  # keep the engine informed; one line
            self.error = e
            return
        if self.on_written is not None:
            self.on_written(batch, time.perf_counter() - t0)
