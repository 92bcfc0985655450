"""REST API with FastAPI's TestClient: auth, validation, rate limit, history, health, metrics, CORS."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from hybridsched.errors import HybridschedError
from hybridsched.service.api import MAX_OFFSET
from hybridsched.service.app import create_app
from hybridsched.service.engine import Race
from hybridsched.service.persistence import Store
from tests.service.conftest import wait_for

AUTH = {"Authorization": "Bearer secret-token"}


@pytest.fixture
def client(make_settings):
    with TestClient(create_app(make_settings(max_tasks=150))) as c:
        yield c


def _finish(c: TestClient) -> dict:
    return wait_for(lambda: (s := c.get("/api/simulation/status").json())["state"] == "finished" and s, timeout=120)


@pytest.mark.parametrize("path", ["start", "stop", "pause", "resume"])
def test_mutating_endpoints_need_the_token(client, path):
    assert client.post(f"/api/simulation/{path}").status_code == 401
    r = client.post(f"/api/simulation/{path}", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 403
    assert client.delete("/api/history").status_code == 401
    assert client.get("/api/simulation/status").json()["state"] == "idle"  # nothing started


@pytest.mark.parametrize("body, field", [({"speed": -1}, "speed"), ({"workload": "../../etc/passwd"}, "workload"),
                                          ({"policies": []}, "policies"), ({"path": "/tmp/x"}, "path"),
                                          ({"seed": "abc"}, "seed")])
def test_bad_bodies_get_422_with_a_message(client, body, field):
    r = client.post("/api/simulation/start", json=body, headers=AUTH)
    assert r.status_code == 422
    assert field in r.json()["detail"]
    assert client.get("/api/simulation/status").json()["state"] == "idle"


def _nothing_started(c: TestClient) -> None:
    assert c.get("/api/simulation/status").json()["state"] == "idle"
    assert c.get("/api/full_history").json()["total"] == 0
    assert c.app.state.svc.store.latest_run() is None  # not even a run row


@pytest.mark.parametrize("body, named", [
    ({"workload": "nosuch"}, "nosuch"),                        # unknown names are bad input, not a conflict
    ({"policies": ["eft", "bogus"]}, "bogus"),
    ({"policies": ["eft", "eft"]}, "eft"),                     # a duplicate: the writer's UNIQUE key would fail
    ({"policies": ["greedy", "eft", "greedy"]}, "greedy"),
    ({"workload": "file"}, "workload_file"),                   # a file workload needs the server's file
    ({"speed": True}, "speed"),                                # strict types: true is not 1
    ({"speed": "5"}, "speed"),
    ({"seed": True}, "seed"),
    ({"seed": 1.5}, "seed"),
    ({"resume": 1}, "resume"),
    ({"seed": 2**70}, "seed"),
    ({"resume": True, "policies": ["eft"]}, "resume"),
])
def test_bad_start_requests_are_422_and_start_nothing(client, body, named):
    r = client.post("/api/simulation/start", json=body, headers=AUTH)
    assert r.status_code == 422, r.text
    assert named in r.json()["detail"] and "\n" not in r.json()["detail"]
    _nothing_started(client)


def test_speed_must_be_a_number_not_a_bool(client):
    r = client.post("/api/simulation/speed", json={"speed": True}, headers=AUTH)
    assert r.status_code == 422 and "speed" in r.json()["detail"]


@pytest.mark.parametrize("params", [{"offset": "99999999999999999999"}, {"run_id": str(2**70)},
                                    {"offset": str(2**63)}, {"run_id": str(2**31)}, {"limit": str(2**64)},
                                    {"run_id": "-1"}, {"offset": "1e3"}])
def test_huge_or_bad_integers_are_422_not_500(client, params):
    r = client.get("/api/full_history", params=params)
    assert r.status_code == 422, r.text
    assert next(iter(params)) in r.json()["detail"]


def test_integer_bounds_hold_on_postgresql(make_settings, postgresql_url):
    from hybridsched.service.persistence import Store

    store = Store(postgresql_url)
    store.upgrade()
    store.delete_history()
    store.dispose()
    with TestClient(create_app(make_settings(database_url=postgresql_url))) as c:
        for params in ({"offset": str(MAX_OFFSET)}, {"run_id": str(2**31 - 1)},  # the largest allowed: fine
                       {"after": f"{2**31 - 1}.{2**31 - 1}.eft"}):
            r = c.get("/api/full_history", params=params)
            assert r.status_code == 200 and r.json()["items"] == [] and r.json()["next"] is None, r.text
        for params in ({"offset": "99999999999999999999"}, {"run_id": str(2**70)}, {"run_id": str(2**31)},
                       {"offset": str(2**31 - 1)}, {"after": f"{2**31}.1.eft"}):
            assert c.get("/api/full_history", params=params).status_code == 422


def test_request_bodies_over_the_limit_get_413(make_settings):
    with TestClient(create_app(make_settings(max_body_bytes=4096))) as c:
        big = b'{"speed": 1, "pad": "' + b"x" * 10_000 + b'"}'
        r = c.post("/api/simulation/start", content=big, headers={**AUTH, "Content-Type": "application/json"})
        assert r.status_code == 413 and "4096" in r.json()["detail"]

        def chunks():  # no Content-Length: counted as it streams
            yield b'{"speed": 1, "pad": "'
            for _ in range(20):
                yield b"x" * 1000
            yield b'"}'

        r = c.post("/api/simulation/start", content=chunks(), headers={**AUTH, "Content-Type": "application/json"})
        assert r.status_code == 413
        _nothing_started(c)
        assert c.post("/api/simulation/speed", json={"speed": 3}, headers=AUTH).status_code == 200  # small: fine


def test_rate_limit_gives_429_with_retry_after(make_settings):
    with TestClient(create_app(make_settings(rate_limit="3/minute"))) as c:
        rs = [c.post("/api/simulation/pause", headers=AUTH) for _ in range(4)]
    assert [r.status_code for r in rs[:3]] == [409, 409, 409] and rs[3].status_code == 429
    assert 1 <= int(rs[3].headers["Retry-After"]) <= 60


def test_wrong_or_missing_tokens_are_rate_limited(make_settings):
    with TestClient(create_app(make_settings(auth_fail_limit="3/minute"))) as c:
        wrong = {"Authorization": "Bearer guess"}
        codes = [c.post("/api/simulation/pause", headers=h).status_code for h in (wrong, {}, wrong)]
        assert codes == [403, 401, 403]
        r = c.post("/api/simulation/pause", headers=wrong)
        assert r.status_code == 429 and 1 <= int(r.headers["Retry-After"]) <= 60
        # the address is blocked for the window: even the right token does not get through now
        assert c.delete("/api/history", headers=AUTH).status_code == 429
        assert c.get("/api/simulation/status").status_code == 200  # reads are not guarded


def test_run_history_pagination_filter_and_delete(client):
    r = client.post("/api/simulation/start", json={"speed": 1}, headers=AUTH)
    assert r.status_code == 200 and r.json()["run_id"] == 1
    assert client.post("/api/simulation/start", headers=AUTH).status_code == 409  # already running
    assert client.delete("/api/history", headers=AUTH).status_code == 409  # not while it runs
    assert client.post("/api/simulation/speed", json={"speed": 0}, headers=AUTH).status_code == 200
    status = _finish(client)
    assert status["tasks"] == 150 and set(status["summary"]) == {"round_robin", "greedy", "eft"}
    h = client.get("/api/full_history", params={"limit": 7, "offset": 0}).json()
    assert h["total"] == 450 and len(h["items"]) == 7 and h["items"][0]["task_id"] == 149
    h2 = client.get("/api/full_history", params={"limit": 7, "offset": 7}).json()
    assert h2["items"][0] != h["items"][0]
    eft = client.get("/api/full_history", params={"limit": 1000, "policy": "eft"}).json()
    assert eft["total"] == 150 and {i["policy"] for i in eft["items"]} == {"eft"}
    assert client.get("/api/full_history", params={"limit": 0}).status_code == 422
    assert client.get("/api/full_history", params={"limit": 5000}).status_code == 422
    assert client.delete("/api/history", headers=AUTH).json() == {"deleted_runs": 1}
    assert client.get("/api/full_history").json()["total"] == 0


def test_health_and_prometheus_metrics(client):
    h = client.get("/api/health")
    assert h.status_code == 200 and h.json()["database"] == "ok" and h.json()["cache"] == "not configured"
    client.post("/api/simulation/start", json={"speed": 0}, headers=AUTH)
    _finish(client)
    text = client.get("/api/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    decided = {s.labels["policy"]: s.value for s in families["hybridsched_tasks_decided"].samples
               if s.name.endswith("_total")}
    assert decided == {"round_robin": 150.0, "greedy": 150.0, "eft": 150.0}
    hist = [s for s in families["hybridsched_decision_latency_seconds"].samples if s.name.endswith("_count")]
    assert hist and all(s.value >= 1 for s in hist)
    means = {s.labels["policy"]: s.value for s in families["hybridsched_task_latency_mean_seconds"].samples}
    p95 = {s.labels["policy"]: s.value for s in families["hybridsched_task_latency_p95_seconds"].samples}
    assert all(p95[p] >= 0 and means[p] > 0 for p in means)
    assert "hybridsched_retrains" in families and "hybridsched_websocket_clients" in families
    assert "hybridsched_task_energy_mean_joules" in families


def test_metrics_registries_are_private_per_app(make_settings, tmp_path):
    a = create_app(make_settings())
    b = create_app(make_settings(database_url=f"sqlite:///{tmp_path}/other.db"))
    assert a.state.svc.metrics.registry is not b.state.svc.metrics.registry


def test_cors_is_closed_unless_configured(make_settings):
    pre = {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
    with TestClient(create_app(make_settings())) as c:
        assert "access-control-allow-origin" not in c.options("/api/simulation/start", headers=pre).headers
    with TestClient(create_app(make_settings(cors_origins=["http://ok.example"]))) as c:
        r = c.options("/api/simulation/start", headers={**pre, "Origin": "http://ok.example"})
        assert r.headers.get("access-control-allow-origin") == "http://ok.example"


def test_environment_overrides_the_config(base_settings, monkeypatch):
    from hybridsched.service.settings import ServiceSettings

    monkeypatch.setenv("HYBRIDSCHED_TOKEN", "from-env")
    monkeypatch.setenv("HYBRIDSCHED_DATABASE_URL", "sqlite:///elsewhere.db")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("HYBRIDSCHED_CORS_ORIGINS", "http://a.example, http://b.example")
    s = ServiceSettings(token="from-config", database_url="sqlite:///config.db", machine={})
    assert s.token == "from-env" and s.database_url == "sqlite:///elsewhere.db"
    assert s.redis_url == "redis://127.0.0.1:1/0" and s.cors_origins == ["http://a.example", "http://b.example"]


def test_generated_token_when_none_is_set(make_settings):
    s = make_settings(token=None)
    assert s.ensure_token() and len(s.token) >= 24 and not s.ensure_token()


def test_missing_model_is_one_line_naming_the_file_and_make_repro(make_settings, tmp_path):
    s = make_settings(policies=["eft", "hybrid_ml"])
    s.machine["policies"]["hybrid_ml"] = {**s.machine["policies"]["hybrid_ml"], "model_dir": str(tmp_path / "none")}
    with pytest.raises(HybridschedError) as e:
        Race(s, Store("sqlite://")).check()
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path / "none") in msg and "make repro" in msg and "hybrid_ml" in msg
