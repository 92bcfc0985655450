"""``GET /api/full_history`` over HTTP on SQLite and PostgreSQL: cursor paging (every row once, in
order), bounded pages, deep pages that cost what the first one does, and ``/api/health`` and
``/api/simulation/status`` answering while history requests hang."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest
from fastapi.testclient import TestClient

from hybridsched.service.api import MAX_LIMIT, MAX_OFFSET
from hybridsched.service.app import create_app
from hybridsched.service.persistence import Store
from tests.service.conftest import fill_history, wait_for

# run 2 raced neither eft nor greedy; run 3 has no rows (a run stopped before its first batch)
RUNS = [(["eft", "greedy"], 120), (["round_robin"], 500), ([], 0), (["eft", "greedy", "round_robin"], 300)]


def _expected(runs: list[tuple[list[str], int]], ids: list[int], policy: str | None = None) -> list[tuple]:
    """Every stored row's key in the history's order: run, task, policy name, all descending."""
    keys = [(rid, t, p) for rid, (names, n) in zip(ids, runs) for t in range(n) for p in names
            if policy is None or p == policy]
    return sorted(keys, reverse=True)


@pytest.fixture
def history(db_url, make_settings):
    """A TestClient on a database holding RUNS, and the run ids."""
    store = Store(db_url)
    store.upgrade()
    ids = fill_history(store, RUNS)
    store.dispose()
    with TestClient(create_app(make_settings(database_url=db_url))) as c:
        yield c, ids


def _pages(c: TestClient, **params) -> list[dict]:
    """Every page from the first, following ``next``."""
    pages = [c.get("/api/full_history", params=params).json()]
    while pages[-1]["next"] is not None:
        assert len(pages) < 1000, "next never ends"
        pages.append(c.get("/api/full_history", params={**params, "after": pages[-1]["next"]}).json())
    return pages


def _keys(pages: list[dict]) -> list[tuple]:
    return [(r["run_id"], r["task_id"], r["policy"]) for p in pages for r in p["items"]]


@pytest.mark.parametrize("policy, run", [(None, None), ("eft", None), ("round_robin", None), (None, 3),
                                         ("greedy", 0), ("dqn", None), (None, 2)])
def test_paging_with_after_gives_every_row_once_in_order(history, policy, run):
    """``run``: an index into RUNS (the database numbers the runs)."""
    c, ids = history
    runs, run_ids = (RUNS, ids) if run is None else ([RUNS[run]], [ids[run]])
    expected = _expected(runs, run_ids, policy)
    filters = {k: v for k, v in (("policy", policy), ("run_id", None if run is None else ids[run])) if v is not None}
    pages = _pages(c, limit=97, **filters)
    assert _keys(pages) == expected  # each row exactly once, newest first
    assert all(len(p["items"]) == 97 for p in pages[:-1]) and len(pages[-1]["items"]) <= 97
    assert len(pages) == max(1, -(-len(expected) // 97)) and {p["total"] for p in pages} == {len(expected)}
    if expected:
        first = pages[0]["items"][0]
        assert first["arrival"] == float(first["task_id"]) and first["size"] == first["task_id"] + 1.0


def test_offset_pages_agree_with_cursor_pages(history):
    c, _ = history
    by_cursor = _keys(_pages(c, limit=50, policy="greedy"))
    for offset in (0, 1, 49, 50, 333, len(by_cursor) - 1):
        page = c.get("/api/full_history", params={"limit": 50, "offset": offset, "policy": "greedy"}).json()
        assert _keys([page]) == by_cursor[offset:offset + 50]
    # past the end: an empty page, no next
    page = c.get("/api/full_history", params={"offset": len(by_cursor), "policy": "greedy"}).json()
    assert page["items"] == [] and page["next"] is None


def test_the_page_size_is_bounded(history):
    c, _ = history
    page = c.get("/api/full_history", params={"limit": MAX_LIMIT}).json()
    assert len(page["items"]) == MAX_LIMIT and page["next"] is not None  # 1640 rows stored
    assert len(c.get("/api/full_history").json()["items"]) == 100  # the default
    for limit in (MAX_LIMIT + 1, 0, 2**40):
        r = c.get("/api/full_history", params={"limit": limit})
        assert r.status_code == 422 and r.json()["detail"].startswith("query.limit:")


@pytest.mark.parametrize("params, named", [
    ({"offset": MAX_OFFSET + 1}, "offset"), ({"offset": 2**31 - 1}, "offset"), ({"offset": 2**63}, "offset"),
    ({"after": "1.10.eft", "offset": 5}, "after"), ({"after": "x"}, "after"), ({"after": "1.2"}, "after"),
    ({"after": "1.2.no/slash"}, "after"), ({"after": "99999999999.1.eft"}, "after"),
    ({"after": "4294967295.1.eft"}, "after"), ({"after": "1.4294967295.eft"}, "after"),
])
def test_bad_or_too_deep_requests_are_one_line_422s(history, params, named):
    c, _ = history
    t0 = time.perf_counter()
    r = c.get("/api/full_history", params=params)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert named in detail.split(":")[0] and "\n" not in detail and time.perf_counter() - t0 < 5
    if named == "offset":
        assert "after" in detail  # where to go instead


def test_cursors_at_either_end(history):
    c, ids = history
    expected = _expected(RUNS, ids)
    last = ".".join(map(str, expected[-1]))  # the oldest row: nothing after it
    page = c.get("/api/full_history", params={"after": last}).json()
    assert page["items"] == [] and page["next"] is None
    page = c.get("/api/full_history", params={"after": "0.0.a"}).json()
    assert page["items"] == [] and page["next"] is None
    # a cursor above every row: the first page
    top = c.get("/api/full_history", params={"after": f"{2**31 - 1}.{2**31 - 1}.zzz", "limit": 5}).json()
    assert _keys([top]) == expected[:5]
    # a run without rows: the rows after where it would stand
    page = c.get("/api/full_history", params={"after": f"{ids[2]}.0.a", "limit": 3}).json()
    assert _keys([page]) == [k for k in expected if k[0] < ids[2]][:3]


@contextmanager
def _db_work(store: Store):
    """Measure what the history's queries made the database do (a list: its one number is set on
    exit). SQLite: virtual-machine steps (a progress handler on the history connections);
    PostgreSQL: rows its plans read, by EXPLAIN ANALYZE of each statement the history ran."""
    from sqlalchemy import event

    steps, statements, out = [0], [], []

    def tick() -> int:
        steps[0] += 1
        return 0

    def on_checkout(dbapi_conn, _rec, _proxy) -> None:  # noqa: ANN001
        dbapi_conn.set_progress_handler(tick, 10)

    def on_execute(_conn, _cursor, statement, parameters, _context, _many) -> None:  # noqa: ANN001
        statements.append((statement, parameters))

    sqlite = store.reader.dialect.name == "sqlite"
    name, fn = ("checkout", on_checkout) if sqlite else ("before_cursor_execute", on_execute)
    event.listen(store.reader, name, fn)
    try:
        yield out
    finally:
        event.remove(store.reader, name, fn)
    if sqlite:
        out.append(steps[0] * 10)
        return

    def rows_read(node: dict) -> int:
        own = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * node.get("Actual Loops", 1) \
            if "Scan" in node["Node Type"] else 0
        return own + sum(rows_read(n) for n in node.get("Plans", []))

    with store.reader.connect() as conn:  # with the history connections' settings
        out.append(sum(rows_read(conn.exec_driver_sql(f"EXPLAIN (ANALYZE, FORMAT JSON) {s}", p).scalar()[0]["Plan"])
                       for s, p in statements))


def test_a_deep_page_costs_what_the_first_one_does(db_url, make_settings):
    """A page at the end of 90,000 rows reads about what the first page reads (OFFSET would read
    every row before it); a policy filter does not read the runs that did not race the policy."""
    store = Store(db_url)
    store.upgrade()
    other, big = fill_history(store, [(["dqn"], 20_000), (["eft", "greedy", "round_robin"], 30_000)])
    store.dispose()
    app = create_app(make_settings(database_url=db_url))
    with TestClient(app) as c:
        store = app.state.svc.store
        with _db_work(store) as first:
            top = c.get("/api/full_history", params={"limit": 100}).json()
        assert top["next"] == f"{big}.29966.round_robin"  # rows go round_robin, greedy, eft per task
        with _db_work(store) as deep:  # the last 100 rows of the big run
            page = c.get("/api/full_history", params={"limit": 100, "after": f"{big}.33.round_robin"}).json()
        assert [r["task_id"] for r in page["items"]][:3] == [33, 33, 32] and page["items"][-1]["task_id"] == 0
        assert deep[0] <= 2 * first[0] + 200, (first, deep)
        with _db_work(store) as deepest:  # after the very last row
            page = c.get("/api/full_history", params={"after": f"{other}.0.dqn"}).json()
        assert page["items"] == [] and deepest[0] <= first[0] + 200, (first, deepest)
        with _db_work(store) as filtered:  # eft's oldest rows: dqn's 20,000 rows are not read
            page = c.get("/api/full_history", params={"limit": 100, "policy": "eft", "after": f"{big}.100.eft"}).json()
        assert [r["task_id"] for r in page["items"]] == list(range(99, -1, -1)) and page["next"] is None
        assert filtered[0] <= 4 * first[0] + 200, (first, filtered)
        with _db_work(store) as skipped:  # the largest offset: bounded by MAX_OFFSET keys
            page = c.get("/api/full_history", params={"limit": 100, "offset": MAX_OFFSET}).json()
        assert page["items"][0]["task_id"] == 30_000 - MAX_OFFSET // 3 - 1
        assert skipped[0] <= 2 * first[0] * (MAX_OFFSET + 100) / 100, (first, skipped)


def test_health_and_status_answer_while_history_requests_hang(db_url, make_settings, thread_server, monkeypatch):
    """Each history request holds a history connection and hangs; health and status still answer
    at once, and every history request completes once released."""
    n_requests = 40  # more than asyncio's default thread pool ever has (32)
    app = create_app(make_settings(database_url=db_url))
    store = app.state.svc.store
    engine = store.reader  # the connections history queries use
    release, entered = threading.Event(), []
    real = store.history

    def hanging(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        with engine.connect():
            entered.append(1)
            release.wait(120)
        return real(*args, **kw)

    monkeypatch.setattr(store, "history", hanging)
    with thread_server(app) as srv, ThreadPoolExecutor(n_requests) as pool:
        try:
            hung = [pool.submit(httpx.get, f"{srv.url}/api/full_history", timeout=180) for _ in range(n_requests)]
            wait_for(lambda: entered, timeout=30)
            time.sleep(1.0)  # the rest arrive and queue
            for path in ("/api/health", "/api/simulation/status"):
                t0 = time.perf_counter()
                r = httpx.get(f"{srv.url}{path}", timeout=10)
                assert r.status_code == 200 and time.perf_counter() - t0 < 3, (path, r.text)
            assert httpx.get(f"{srv.url}/api/health", timeout=10).json()["database"] == "ok"
            assert not any(f.done() for f in hung)  # they were all still in flight
        finally:
            release.set()
        assert all(f.result().status_code == 200 for f in hung)
