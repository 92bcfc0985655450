"""A run left by a dead process shows as 'interrupted' (resumable) after a restart, and a resumed
run carries on its per-policy summaries and its speed; tasks/s counts only this run's releases."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from hybridsched.service.app import create_app
from hybridsched.service.engine import Race
from hybridsched.service.persistence import Store
from tests.service.conftest import wait_for

AUTH = {"Authorization": "Bearer secret-token"}


def _race(settings) -> Race:
    store = Store(settings.database_url)
    store.upgrade()
    store.mark_interrupted()  # what create_app does at start
    return Race(settings, store)


def test_interrupted_run_is_shown_and_resumes_with_its_summaries_and_speed(make_settings):
    settings = make_settings(speed=20.0, segment_tasks=300, write_batch=100)  # the default speed is not 0
    race = _race(settings)
    assert race.status()["state"] == "idle" and not race.status()["resumable"]
    race.start(speed=0)
    wait_for(lambda: race.total >= 900, timeout=120)
    race.stop()
    n = race.total
    race.store.set_status(race.run_id, "running")  # as a kill -9 leaves it: nobody marked it
    race.store.dispose()

    race = _race(settings)  # the restart
    st = race.status()
    assert st["state"] == "interrupted" and st["resumable"] and st["run_id"] == 1 and st["tasks"] == n
    assert st["speed"] == 0.0
    assert {p: s["n"] for p, s in st["summary"].items()} == {p: n for p in settings.policies}
    means = {p: s["mean_latency"] for p, s in st["summary"].items()}
    assert all(m > 0 for m in means.values())

    race.start(resume=True)
    assert race.speed == 0.0  # the run's speed, not the default 20
    wait_for(lambda: race.total >= n + 600, timeout=120)
    race.stop()
    st = race.status()
    assert st["state"] == "stopped" and st["resumable"]
    # the summaries went on from n, they did not restart at 0
    assert {p: s["n"] for p, s in st["summary"].items()} == {p: st["tasks"] for p in settings.policies}
    assert race.store.counts(1) == {p: st["tasks"] for p in settings.policies}
    race.store.dispose()


def test_dashboard_api_reports_the_interrupted_run(make_settings):
    settings = make_settings(segment_tasks=200, write_batch=100)
    race = _race(settings)
    race.start(speed=0)
    wait_for(lambda: race.total >= 400, timeout=120)
    race.stop()
    race.store.set_status(1, "paused")
    race.store.dispose()
    with TestClient(create_app(settings)) as c:
        st = c.get("/api/simulation/status").json()
        assert st["state"] == "interrupted" and st["run_id"] == 1 and st["resumable"] and st["tasks"] >= 400
        r = c.post("/api/simulation/start", json={"resume": True}, headers=AUTH)
        assert r.status_code == 200 and r.json()["run_id"] == 1
        c.post("/api/simulation/stop", headers=AUTH)


def test_tasks_per_s_is_never_negative_and_does_not_spike_on_resume(make_settings):
    settings = make_settings(segment_tasks=300, write_batch=100)
    race = _race(settings)
    race.start(speed=0)
    wait_for(lambda: race.total >= 1500, timeout=120)
    assert race.status()["tasks_per_s"] > 0
    time.sleep(1.1)
    race.status()
    race.stop()
    assert race.status()["tasks_per_s"] == 0.0  # not running
    # a new run at a crawl (almost nothing released): the previous run's count must not enter
    race.start(speed=1e-6)
    rates = []
    for _ in range(3):
        time.sleep(0.6)
        rates.append(race.status()["tasks_per_s"])
    race.stop()
    assert all(0 <= r < 50 for r in rates), rates
    # resumed at a crawl: the committed prefix is not 'released in the last seconds'
    race.start(resume=True, speed=1e-6)
    rates = []
    for _ in range(3):
        time.sleep(0.6)
        rates.append(race.status()["tasks_per_s"])
    race.stop()
    assert all(0 <= r < 50 for r in rates), rates
    race.store.dispose()


@pytest.mark.parametrize("bad", [["eft", "eft"], ["eft", "nosuch"]])
def test_the_race_itself_refuses_bad_policy_lists(make_settings, bad):
    from hybridsched.service.engine import InvalidRequest

    race = _race(make_settings())
    with pytest.raises(InvalidRequest):
        race.start(policies=bad)
    assert race.store.latest_run() is None


def test_tasks_per_s_after_resume_leaves_out_the_pause(make_settings, monkeypatch):
    """2,000 tasks/s for 5 s, a 60 s pause, then a resume: the rate window is running time, so
    the first seconds after the resume show 2,000, not what 10,000 tasks over 65 s would give."""
    from types import SimpleNamespace

    import hybridsched.service.engine as engine

    clock = [1000.0]  # the engine's clock only (other threads keep the real one)
    monkeypatch.setattr(engine, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time, sleep=time.sleep))
    race = _race(make_settings())
    with race._lock:
        race.state, race.run_id, race.total = "running", None, 0
        race._samples.append((clock[0], 0))
        for _ in range(50):  # 100 ms releases of 200 tasks
            clock[0] += 0.1
            race.total += 200
            race._samples.append((clock[0], race.total))
    assert race.tasks_per_s() == pytest.approx(2000, rel=0.05)
    race.pause()
    clock[0] += 60.0
    assert race.tasks_per_s() == 0.0
    race.resume()
    clock[0] += 0.5
    race.total += 1000
    race._samples.append((clock[0], race.total))
    assert race.tasks_per_s() == pytest.approx(2000, rel=0.1)
    race.store.dispose()
