"""What the service trusts, over HTTP: request bodies are counted as they arrive (whatever the
headers claim), the token is checked before a body is read, forwarded headers count only from
configured proxies, only raceable policies are offered and accepted, deleted runs are not
resumable, HEAD is answered, browsers get security headers, /docs loads nothing from another
origin, a foreign page cannot open the WebSocket, a foreign Host is refused, and
`hybridsched serve` exits 0 after SIGTERM."""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from hybridsched.errors import HybridschedError
from hybridsched.service.app import STATIC, create_app
from tests.service.conftest import free_port, serve, wait_for

ROOT = Path(__file__).resolve().parents[2]
AUTH = {"Authorization": "Bearer secret-token"}


def _nothing_started(c: TestClient) -> None:
    assert c.get("/api/simulation/status").json()["state"] == "idle"
    assert c.app.state.svc.store.latest_run() is None  # not even a run row


# --- request bodies --------------------------------------------------------------------------------
def _push_chunked(port: int, head: bytes, total: int = 64 * 2**20) -> tuple[bytes, int]:
    """Send ``head`` then a chunked body of up to ``total`` bytes on a raw socket, stopping as soon
    as the server answers; return (the start of the answer, body bytes sent before it came)."""
    chunk = b"x" * 65536
    frame = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head)
        try:
            while sent < total:
                if select.select([sock], [], [], 0)[0]:
                    break
                sock.sendall(frame)
                sent += len(chunk)
            else:
                sock.sendall(b"0\r\n\r\n")
        except OSError:  # the server closed the connection after answering
            pass
        answer = _read_answer(sock)
    return answer, sent


def _read_answer(sock: socket.socket) -> bytes:
    """The status line, headers and (Content-Length) body of one HTTP answer."""
    data = b""
    try:
        while True:
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep:
                m = re.search(rb"(?i)content-length:\s*(\d+)", head)
                if m and len(body) >= int(m.group(1)):
                    return data
            more = sock.recv(65536)
            if not more:
                return data
            data += more
    except OSError:  # reset once the server closed: what arrived before is the answer
        return data


def _head(token: bool) -> bytes:
    auth = b"Authorization: Bearer secret-token\r\n" if token else b""
    # Transfer-Encoding wins over Content-Length: the server reads chunks, the header says 5 bytes
    return (b"POST /api/simulation/start HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth
            + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n")


def test_a_body_is_counted_as_it_arrives_whatever_its_content_length_says(make_settings, thread_server):
    app = create_app(make_settings())
    with thread_server(app) as srv:
        answer, sent = _push_chunked(srv.port, _head(token=True))
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert b"65536" in answer  # the limit, in the one-line detail
        # answered after about max_body_bytes, not after reading the 64 MiB the client had
        assert sent < 24 * 2**20, sent
        assert httpx.get(f"{srv.url}/api/simulation/status").json()["state"] == "idle"
    assert app.state.svc.store.latest_run() is None


def test_without_a_token_the_body_is_not_read(make_settings, thread_server):
    with thread_server(create_app(make_settings())) as srv:
        answer, sent = _push_chunked(srv.port, _head(token=False))
        assert answer.startswith(b"HTTP/1.1 401") and b"missing bearer token" in answer, answer[:200]
        assert sent < 24 * 2**20, sent


def test_auth_comes_before_the_body_is_parsed(make_settings):
    with TestClient(create_app(make_settings())) as c:
        bad = {"Content-Type": "application/json"}
        assert c.post("/api/simulation/start", content=b"{not json", headers=bad).status_code == 401
        r = c.post("/api/simulation/start", content=b"{not json", headers={**bad, "Authorization": "Bearer wrong"})
        assert r.status_code == 403
        r = c.post("/api/simulation/start", content=b"{not json", headers={**bad, **AUTH})
        assert r.status_code == 422  # with the token the body is read, and is bad input
        _nothing_started(c)


# --- client addresses ------------------------------------------------------------------------------
def _guess(url: str, n: int, forwarded: list[str] | None = None) -> list[int]:
    codes = []
    for i in range(n):
        headers = {"Authorization": f"Bearer guess-{i}"}
        if forwarded:
            headers["X-Forwarded-For"] = forwarded[i % len(forwarded)]
        codes.append(httpx.post(f"{url}/api/simulation/pause", headers=headers, timeout=30).status_code)
    return codes


def test_forwarded_headers_are_ignored_unless_from_a_trusted_proxy(make_settings, thread_server):
    with thread_server(create_app(make_settings(auth_fail_limit="5/minute"))) as srv:
        codes = _guess(srv.url, 12, [f"10.1.{i}.{i}" for i in range(12)])
    # every guess comes from 127.0.0.1, whatever X-Forwarded-For claims
    assert codes[:5] == [403] * 5 and set(codes[5:]) == {429}, codes


def test_a_trusted_proxy_names_the_client(make_settings, thread_server):
    settings = make_settings(auth_fail_limit="3/minute", trusted_proxies=["127.0.0.0/8"])
    with thread_server(create_app(settings)) as srv:
        # behind the proxy: 203.0.113.7 exhausts its own allowance, 203.0.113.8 still has its own
        assert _guess(srv.url, 4, ["203.0.113.7"]) == [403, 403, 403, 429]
        assert _guess(srv.url, 1, ["203.0.113.8"]) == [403]
        # a client-supplied entry left of the proxy's does not help: the proxy appends the real peer
        assert _guess(srv.url, 1, ["198.51.100.1, 203.0.113.7"]) == [429]


def test_trusted_proxies_is_checked_with_one_line(base_settings, monkeypatch):
    from hybridsched.service.settings import ServiceSettings, load_settings

    with pytest.raises(HybridschedError) as e:
        load_settings(["service.trusted_proxies=[10.0.0.1,proxy.example]"])
    msg = str(e.value)
    assert "\n" not in msg and "service.trusted_proxies" in msg and "proxy.example" in msg, msg
    monkeypatch.setenv("HYBRIDSCHED_TRUSTED_PROXIES", "10.0.0.0/8, 192.168.1.1,::1")
    s = ServiceSettings(machine={})
    assert s.trusted_proxies == ["10.0.0.0/8", "192.168.1.1", "::1"]
    assert base_settings.trusted_proxies == []  # off by default


# --- policies --------------------------------------------------------------------------------------
def test_config_offers_only_the_policies_that_can_race(make_settings, tmp_path):
    settings = make_settings()
    specs = settings.machine["policies"]
    specs["hybrid_ml"] = {**specs["hybrid_ml"], "model_dir": str(tmp_path / "none")}
    with TestClient(create_app(settings)) as c:
        cfg = c.get("/api/config").json()
        offered, refused = set(cfg["policies"]), cfg["not_raceable"]
        assert offered | set(refused) == set(specs) and not offered & set(refused)
        assert {"eft", "greedy", "round_robin"} <= offered
        # late and ordered dispatch have their own engines; a missing model says which file
        assert "late" in refused["eft_late"] and "ordered" in refused["eft_spt"]
        assert str(tmp_path / "none") in refused["hybrid_ml"]
        assert all(isinstance(why, str) and why and "\n" not in why for why in refused.values())
        for name in refused:  # every policy left out is refused up front, naming it
            r = c.post("/api/simulation/start", json={"policies": ["eft", name], "speed": 0}, headers=AUTH)
            assert r.status_code == 422 and name in r.json()["detail"] and "\n" not in r.json()["detail"], r.text
        _nothing_started(c)


def test_a_policy_whose_model_is_missing_is_422_before_any_run_exists(make_settings, tmp_path):
    settings = make_settings()
    specs = settings.machine["policies"]
    specs["hybrid_ml"] = {**specs["hybrid_ml"], "model_dir": str(tmp_path / "none")}
    with TestClient(create_app(settings)) as c:
        r = c.post("/api/simulation/start", json={"policies": ["eft", "hybrid_ml"]}, headers=AUTH)
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert "hybrid_ml" in detail and str(tmp_path / "none") in detail and "\n" not in detail
        _nothing_started(c)
        assert c.get("/api/full_history").json()["total"] == 0


def test_a_raceable_learned_policy_is_offered(learned_settings):
    with TestClient(create_app(learned_settings())) as c:
        cfg = c.get("/api/config").json()
    assert {"hybrid_ml", "dqn", "dqn_online"} <= set(cfg["policies"]) and "hybrid_ml" not in cfg["not_raceable"]


# --- history ---------------------------------------------------------------------------------------
def test_after_deleting_the_history_nothing_is_resumable(make_settings):
    settings = make_settings(speed=1.0)
    with TestClient(create_app(settings)) as c:
        assert c.post("/api/simulation/start", headers=AUTH).status_code == 200
        assert c.post("/api/simulation/stop", headers=AUTH).status_code == 200
        st = wait_for(lambda: (s := c.get("/api/simulation/status").json())["state"] != "stopping" and s, timeout=60)
        assert st["state"] == "stopped" and st["resumable"] and st["run_id"] == 1
        assert c.delete("/api/history", headers=AUTH).json() == {"deleted_runs": 1}
        st = c.get("/api/simulation/status").json()
        assert st["state"] == "idle" and not st["resumable"] and st["run_id"] is None and st["tasks"] == 0
        r = c.post("/api/simulation/start", json={"resume": True}, headers=AUTH)
        assert r.status_code == 409 and "no stopped or interrupted run" in r.json()["detail"]
        with c.websocket_connect("/ws") as ws:
            hello = ws.receive_json()
        assert hello["type"] == "hello" and not hello["resumable"] and hello["run_id"] is None
    # a server started on the same database later shows nothing either
    with TestClient(create_app(settings)) as c:
        st = c.get("/api/simulation/status").json()
        assert st["state"] == "idle" and not st["resumable"]


# --- browsers --------------------------------------------------------------------------------------
def test_head_is_answered_like_get(make_settings):
    with TestClient(create_app(make_settings())) as c:
        for path in ("/", "/api/health", "/static/dashboard.js", "/api/config"):
            get, head = c.get(path), c.head(path)
            assert head.status_code == get.status_code == 200, (path, head.status_code)
            assert head.content == b"" and head.headers["content-type"] == get.headers["content-type"]
        assert c.head("/api/nosuch").status_code == 404


def test_every_answer_carries_the_security_headers(make_settings):
    with TestClient(create_app(make_settings(max_body_bytes=4096))) as c:
        answers = {"page": c.get("/"), "script": c.get("/static/dashboard.js"), "api": c.get("/api/health"),
                   "401": c.post("/api/simulation/pause"),
                   "413": c.post("/api/simulation/speed", content=b"x" * 5000, headers=AUTH),
                   "404": c.get("/nosuch"), "docs": c.get("/docs")}
    assert answers["401"].status_code == 401 and answers["413"].status_code == 413
    for name, r in answers.items():
        assert r.headers["x-content-type-options"] == "nosniff", name
        assert r.headers["x-frame-options"] == "DENY", name
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp, name


def test_the_api_page_loads_nothing_from_another_origin(make_settings):
    """/docs is served from the package: no CDN, no inline script or style, under the same
    CSP as the dashboard; it links to the OpenAPI schema, which answers."""
    with TestClient(create_app(make_settings())) as c:
        r = c.get("/docs")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in r.headers["content-security-policy"]
        html = r.text
        assert not re.search(r"(?:src|href)=\"(?:https?:)?//", html), "an external origin"
        assert "http://" not in html and "https://" not in html
        assert "<script" not in html and "<style" not in html and "style=" not in html
        assert '<a href="/openapi.json">' in html and "/api/simulation/start" in html
        assert c.get("/openapi.json").json()["paths"]
        assert c.get("/redoc").status_code == 404


def test_the_dashboard_loads_only_what_its_csp_allows(make_settings):
    """The page's CSP allows scripts, styles and connections to its own origin only, and no
    inline script or style: the page and its script use nothing else."""
    html = (STATIC / "index.html").read_text()
    js = (STATIC / "dashboard.js").read_text()
    assert not re.search(r"<script(?![^>]*\ssrc=)[^>]*>", html), "inline script"
    assert "style=" not in html and "<style" not in html, "inline style"
    assert not re.search(r"\son[a-z]+=", html), "inline event handler"
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert refs and all(u.startswith("/") and not u.startswith("//") for u in refs), refs
    # the script talks to its own host only, and builds no code from strings
    assert re.findall(r"new WebSocket\(([^;]*)\)", js) == ['`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`']
    assert all(u.startswith(("/", "`/", '"/', "path")) for u in re.findall(r"fetch\(\s*([^,)]+)", js))
    assert "eval(" not in js and "new Function" not in js and "setAttribute(\"style\"" not in js
    with TestClient(create_app(make_settings())) as c:
        for u in refs:
            if u.startswith("/static/"):
                assert c.get(u).status_code == 200, u


def test_a_foreign_page_cannot_open_the_websocket(make_settings):
    with TestClient(create_app(make_settings(cors_origins=["https://dash.example"]))) as c:
        for origin in ("http://evil.example", "http://testserver.evil.example", "null", "http://testserver:8080"):
            with pytest.raises(WebSocketDisconnect) as e, c.websocket_connect("/ws", headers={"Origin": origin}):
                pass
            assert e.value.code == 1008, origin
        # its own page, a configured origin, and non-browser clients (no Origin) connect
        for headers in ({"Origin": "http://testserver"}, {"Origin": "https://dash.example"}, {}):
            with c.websocket_connect("/ws", headers=headers) as ws:
                assert ws.receive_json()["type"] == "hello", headers



# --- hosts ----------------------------------------------------------------------------------------
def test_a_foreign_host_is_refused_with_one_line(make_settings, thread_server):
    """By default the loopback names and the bound host are answered; any other ``Host`` (a
    rebound DNS name) gets 400 naming the host and the setting, on the API, the page and /ws."""
    from tests.bad_input_catalogue import assert_documented, assert_one_plain_line

    with thread_server(create_app(make_settings(allowed_hosts=[]))) as srv:
        for host in ("127.0.0.1", f"127.0.0.1:{srv.port}", f"localhost:{srv.port}", "[::1]"):
            assert httpx.get(f"{srv.url}/api/health", headers={"Host": host}).status_code == 200, host
        for path in ("/api/health", "/", "/api/simulation/status"):
            r = httpx.get(f"{srv.url}{path}", headers={"Host": "evil.example"})
            assert r.status_code == 400, path
            assert r.headers["x-frame-options"] == "DENY"
        detail = r.json()["detail"]
        assert_one_plain_line(detail)
        assert_documented(detail)
        r = httpx.post(f"{srv.url}/api/simulation/start", headers={"Host": "evil.example", **AUTH}, json={})
        assert r.status_code == 400 and srv.server.config.app.state.svc.store.latest_run() is None
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:  # the WebSocket too
            sock.sendall(b"GET /ws HTTP/1.1\r\nHost: evil.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
            assert not sock.recv(4096).startswith(b"HTTP/1.1 101")


def test_allowed_hosts_is_configurable(make_settings, monkeypatch):
    from hybridsched.service.settings import ServiceSettings

    with TestClient(create_app(make_settings(allowed_hosts=["dash.example.org", "*.ops.example"]))) as c:
        for host, code in (("dash.example.org", 200), ("a.ops.example", 200), ("testserver", 400),
                           ("localhost", 400), ("ops.example.evil", 400)):
            assert c.get("/api/health", headers={"Host": host}).status_code == code, host
    with TestClient(create_app(make_settings(allowed_hosts=["*"]))) as c:
        assert c.get("/api/health", headers={"Host": "anything.example"}).status_code == 200
    monkeypatch.setenv("HYBRIDSCHED_ALLOWED_HOSTS", "dash.example.org, 10.0.0.5")
    assert ServiceSettings(machine={}).allowed_hosts == ["dash.example.org", "10.0.0.5"]


# --- the command ----------------------------------------------------------------------------------
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_serve_ignores_forwarded_headers_and_exits_0_on_sigterm(tmp_path):
    port = free_port()
    env = {**os.environ, "HYBRIDSCHED_TOKEN": "right", "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    for var in ("HYBRIDSCHED_POLICIES", "HYBRIDSCHED_TRUSTED_PROXIES", "FORWARDED_ALLOW_IPS"):
        env.pop(var, None)
    log = tmp_path / "server.log"
    proc = serve(["--log-level", "warning", f"service.database_url=sqlite:///{tmp_path / 's.db'}",
                  "service.policies=[round_robin,greedy,eft]", "service.auth_fail_limit=4/minute"],
                 port=port, cwd=ROOT, env=env, log=log)
    base = f"http://127.0.0.1:{port}"
    try:
        codes = _guess(base, 8, [f"10.2.0.{i}" for i in range(8)])
        assert codes[:4] == [403] * 4 and set(codes[4:]) == {429}, codes
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-2000:]
        assert time.monotonic() - started < 60
    finally:
        if proc.poll() is None:
            proc.kill()
