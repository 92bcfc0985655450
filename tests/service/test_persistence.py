"""The store on SQLite and on a real PostgreSQL server: migrations, batched atomic writes,
history queries, deletion, resume points and export to the machine kind's trace schema."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hybridsched.kinds.base import instantiate
from hybridsched.kinds.machine.engine import simulate
from hybridsched.service.engine import Race
from hybridsched.service.persistence import TRACE_COLUMNS, Batch, Store
from hybridsched.service.stream import GeneratedStream
from tests.service.conftest import wait_for


def _run_to_end(settings, n_tasks: int) -> tuple[Race, int]:
    race = Race(settings, Store(settings.database_url))
    race.store.upgrade()
    run_id = race.start(speed=0)
    wait_for(lambda: race.state == "finished", timeout=120)
    race.shutdown()
    assert race.total == n_tasks
    return race, run_id


def test_migrations_are_idempotent_and_create_every_table(db_url):
    from sqlalchemy import inspect

    store = Store(db_url)
    store.upgrade()
    store.upgrade()
    names = set(inspect(store.engine).get_table_names())
    assert {"runs", "tasks", "task_deps", "results", "training_data", "retrains", "alembic_version"} <= names
    store.ping()


def test_a_run_is_stored_whole_and_exports_to_the_simulators_trace(db_url, make_settings):
    """One segment from an idle cluster: the stored results are exactly what the machine kind's
    simulate() produces for the same tasks and noise."""
    settings = make_settings(database_url=db_url, segment_tasks=300, max_tasks=300, write_batch=64)
    race, run_id = _run_to_end(settings, 300)
    store = race.store
    assert store.run(run_id)["n_tasks"] == 300
    assert store.counts(run_id) == {p: 300 for p in settings.policies}
    frames = store.trace_frames(run_id)
    seg = GeneratedStream(settings.workload_config(), race.cluster, settings.seed, 300).segment(0, 0.0)
    for name in settings.policies:
        expected = simulate(seg.tasks, race.cluster, instantiate(settings.machine["policies"][name]),
                            seg.realization).to_frame()
        got = frames[name]
        assert list(got.columns) == list(TRACE_COLUMNS) == list(expected.columns)
        pd.testing.assert_frame_equal(got.drop(columns="policy").reset_index(drop=True),
                                      expected.drop(columns="policy"), check_dtype=False, rtol=1e-9)
    tasks = store.tasks_frame(run_id)
    assert len(tasks) == 300 and tasks["task_id"].tolist() == list(range(300))


def test_history_pages_filters_and_deletes(db_url, make_settings):
    settings = make_settings(database_url=db_url, max_tasks=120)
    race, run_id = _run_to_end(settings, 120)
    store = race.store
    total, page, nxt = store.history(limit=10)
    assert total == 360 and len(page) == 10
    assert page[0]["task_id"] == 119  # newest first
    assert nxt == (run_id, page[-1]["task_id"], page[-1]["policy"])  # the last row's key
    _, page2, _ = store.history(limit=10, offset=10)
    assert {(r["task_id"], r["policy"]) for r in page}.isdisjoint({(r["task_id"], r["policy"]) for r in page2})
    assert store.history(limit=10, after=nxt)[1] == page2
    total_eft, only, end = store.history(limit=500, policy="eft")
    assert total_eft == 120 and {r["policy"] for r in only} == {"eft"} and end is None
    assert store.delete_history() == 1
    assert store.history(limit=10) == (0, [], None)


def test_a_failing_batch_leaves_no_row_and_no_progress(db_url, make_settings):
    settings = make_settings(database_url=db_url, max_tasks=50)
    race, run_id = _run_to_end(settings, 50)
    store = race.store
    before = store.history(limit=1000)
    e = np.zeros(0)
    ok_task = {"task_id": np.array([1000]), "segment": np.array([9]), "arrival": np.array([1.0]),
               "size": np.array([1.0]), "intensity": np.array([0.5]), "memory_mb": np.array([10.0]),
               "priority": np.array([0]), "deadline": np.array([np.nan])}
    dup = {k: v.copy() for k, v in ok_task.items()}
    dup["task_id"] = np.array([3])  # already stored: the primary key rejects it
    tasks = {k: np.concatenate([ok_task[k], dup[k]]) for k in ok_task}
    with pytest.raises(Exception):
        store.write(Batch(run_id, 52, 99.0, tasks, np.zeros((0, 2), dtype=np.int64), [], [], []))
    assert store.history(limit=1000) == before
    assert store.run(run_id)["n_tasks"] == 50
    assert len(e) == 0


def test_resume_point_free_times_match_the_stored_parts(db_url, make_settings):
    settings = make_settings(database_url=db_url, max_tasks=150, segment_tasks=100)
    race, run_id = _run_to_end(settings, 150)
    store = race.store
    frames = store.trace_frames(run_id)
    free = store.device_free_times(run_id, "eft", race.cluster.n_devices)
    eft = frames["eft"]
    assert free[0] == pytest.approx(eft["cpu_end"].max())
    for g in range(race.cluster.n_gpus):
        ends = eft.loc[eft["gpu"] == g, "gpu_end"]
        assert free[g + 1] == pytest.approx(ends.max() if len(ends) else 0.0)
    first, last = store.segment_arrivals(run_id, 1)
    tasks = store.tasks_frame(run_id)
    assert first == pytest.approx(tasks.loc[tasks.task_id == 100, "arrival"].item())
    assert last == pytest.approx(tasks.loc[tasks.task_id == 99, "arrival"].item())


def test_export_run_writes_parquet_traces(db_url, make_settings, tmp_path):
    settings = make_settings(database_url=db_url, max_tasks=40)
    race, run_id = _run_to_end(settings, 40)
    out = race.store.export_run(run_id, tmp_path / "traces")
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([f"{p}.parquet" for p in settings.policies] + ["tasks.parquet"])
    df = pd.read_parquet(out / "eft.parquet")
    assert list(df.columns) == list(TRACE_COLUMNS) and len(df) == 40


def test_stop_answers_at_once_while_the_backlog_commits(make_settings, postgresql_url):
    """On PostgreSQL a racing run has a backlog of batches to commit: Stop answers within a
    second or so (state ``stopping``), the writer commits every released task after it, and the
    run then shows ``stopped`` (resumable) with all its rows."""
    import time

    store = Store(postgresql_url)
    store.upgrade()
    store.delete_history()
    settings = make_settings(database_url=postgresql_url, segment_tasks=5000, write_batch=5000, race_worker=False)
    race = Race(settings, store)
    run_id = race.start(speed=0)
    wait_for(lambda: race.writer is not None and race.writer.backlog >= 15, timeout=120, step=0.01)
    t0 = time.monotonic()
    race.stop(wait=False)  # as the API's Stop does
    took = time.monotonic() - t0
    assert race.status()["state"] in ("stopping", "stopped")
    wait_for(lambda: race.status()["state"] == "stopped", timeout=120)
    try:
        assert took < 3.0, f"stop took {took:.1f} s"
        assert race.resumable and race.writer_error is None
        assert store.counts(run_id) == {p: race.total for p in settings.policies}
        assert store.run(run_id)["status"] == "stopped"
    finally:
        store.dispose()
