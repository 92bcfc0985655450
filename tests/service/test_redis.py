"""Optional Redis on a real redis-server: two app processes' worth of apps share the rate-limit
counters and the status cache; health checks the cache."""

from __future__ import annotations

from fastapi.testclient import TestClient

from hybridsched.service.app import create_app
from tests.service.conftest import wait_for

AUTH = {"Authorization": "Bearer secret-token"}


def test_rate_limit_and_status_are_shared_through_redis(make_settings, redis_url, tmp_path):
    import redis

    redis.Redis.from_url(redis_url).flushall()
    a = create_app(make_settings(redis_url=redis_url, rate_limit="4/minute", max_tasks=100))
    b = create_app(make_settings(redis_url=redis_url, rate_limit="4/minute",
                                 database_url=f"sqlite:///{tmp_path}/b.db"))
    with TestClient(a) as ca, TestClient(b) as cb:
        assert ca.get("/api/health").json()["cache"] == "ok"
        assert ca.post("/api/simulation/start", json={"speed": 0}, headers=AUTH).status_code == 200
        # the limit (per route and client) counts requests to either app: the 5th is refused
        codes = [c.post("/api/simulation/resume", headers=AUTH).status_code for c in (ca, ca, cb, cb, cb)]
        assert codes == [409, 409, 409, 409, 429]
        wait_for(lambda: ca.get("/api/simulation/status").json()["state"] == "finished", timeout=120)
        # b runs nothing itself: its status comes from the cache that a keeps fresh
        st = wait_for(lambda: (s := cb.get("/api/simulation/status").json())["source"] == "cache"
                      and s["state"] == "finished" and s, timeout=30)
        assert st["run_id"] == 1 and st["tasks"] == 100


def test_health_reports_an_unreachable_cache(make_settings):
    from tests.service.conftest import free_port

    app = create_app(make_settings(redis_url=f"redis://127.0.0.1:{free_port()}/0"))
    with TestClient(app) as c:
        r = c.get("/api/health")
    assert r.status_code == 503 and r.json()["cache"].startswith("error") and r.json()["database"] == "ok"
