"""Against a real uvicorn server on a free loopback port: WebSocket updates and a retrain
notification, pause stops the task count and resume restarts it; a stalled client never
slows the race or the other clients."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
from websockets.sync.client import connect

from hybridsched.service.app import create_app
from hybridsched.service.ws import Hub
from tests.service.conftest import wait_for

AUTH = {"Authorization": "Bearer secret-token"}


def _status(base: str) -> dict:
    return httpx.get(f"{base}/api/simulation/status", timeout=10).json()


def test_updates_retrain_notification_pause_and_resume(learned_settings, thread_server):
    settings = learned_settings(policies=["eft", "hybrid_ml"], speed=150.0, segment_tasks=400)
    with thread_server(create_app(settings)) as srv:
        ws_url = f"ws://127.0.0.1:{srv.port}/ws"
        with connect(ws_url, open_timeout=10) as ws:
            assert json.loads(ws.recv(timeout=10))["type"] == "hello"
            r = httpx.post(f"{srv.url}/api/simulation/start", headers=AUTH, timeout=120)
            assert r.status_code == 200, r.text
            got_update = got_retrain = None
            t0 = time.time()
            stamps = []
            while time.time() - t0 < 120 and not (got_update and got_retrain):
                m = json.loads(ws.recv(timeout=60))
                stamps.append(time.time())
                if m["type"] == "simulation_update" and m["decided"] > 0:
                    got_update = m
                if m["type"] == "notification" and any(e["kind"] == "retrain" and e["policy"] == "hybrid_ml"
                                                        for e in m["events"]):
                    got_retrain = m
            assert got_update and got_retrain
            assert set(got_update["policies"]) == {"eft", "hybrid_ml"}
            assert len(got_update["utilisation"]["eft"]) == 5  # CPU + 4 GPUs
            # coalesced: never more than ~10 messages a second (tick 0.05 s here: 20/s at most)
            window = [t for t in stamps if t >= stamps[-1] - 1.0]
            assert len(window) <= 21

        r = httpx.post(f"{srv.url}/api/simulation/pause", headers=AUTH)
        assert r.status_code == 200 and r.json()["state"] == "paused", (r.text, _status(srv.url)["error"])
        time.sleep(0.3)  # let a release in flight land
        n1 = _status(srv.url)["tasks"]
        time.sleep(1.0)
        assert _status(srv.url)["tasks"] == n1
        assert httpx.post(f"{srv.url}/api/simulation/resume", headers=AUTH).json()["state"] == "running"
        wait_for(lambda: _status(srv.url)["tasks"] > n1 + 50, timeout=60)
        assert _status(srv.url)["summary"]["hybrid_ml"]["retrains"] > 0
        g = httpx.get(f"{srv.url}/api/gantt", params={"policy": "eft"}).json()
        assert g["parts"] and all(g["now"] - 60 <= p[2] and p[1] <= g["now"] for p in g["parts"])
        assert httpx.post(f"{srv.url}/api/simulation/stop", headers=AUTH).json()["state"] in ("stopping", "stopped")
        wait_for(lambda: _status(srv.url)["state"] == "stopped", timeout=60)


def test_a_stalled_websocket_client_does_not_stall_the_run(make_settings, thread_server):
    import socket

    settings = make_settings(max_tasks=4000, segment_tasks=500, write_batch=100, stall_drop_s=1.0)
    with thread_server(create_app(settings)) as srv:
        # a client that completes the handshake, then never reads (tiny receive buffer)
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        stalled.connect(("127.0.0.1", srv.port))
        stalled.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        with connect(f"ws://127.0.0.1:{srv.port}/ws", open_timeout=10) as ws:
            ws.recv(timeout=10)
            httpx.post(f"{srv.url}/api/simulation/start", headers=AUTH, timeout=120)
            last = None
            deadline = time.time() + 120
            while time.time() < deadline and not (last and last["tasks"] == 4000):
                try:
                    m = json.loads(ws.recv(timeout=5))
                    if m["type"] == "simulation_update":
                        last = m
                except TimeoutError:
                    pass
            # the healthy client saw the whole run, and the run was not held up
            assert last and last["tasks"] == 4000
            assert _status(srv.url)["tasks"] == 4000
        stalled.close()


def test_hub_skips_and_then_drops_a_client_whose_queue_stays_full():
    class FakeRace:
        def status(self):
            return {"state": "running"}

    class StuckSocket:
        """Accepts, then blocks forever on the first send (a client that stopped reading)."""

        def __init__(self):
            self.closed = asyncio.Event()

        async def accept(self):
            pass

        async def send_text(self, text):
            await asyncio.Event().wait()

        async def receive(self):
            await self.closed.wait()
            return {"type": "websocket.disconnect"}

        async def close(self, code=1000):
            self.closed.set()

    async def scenario():
        hub = Hub(FakeRace(), None, tick_s=0.01, queue_size=2, stall_drop_s=0.2)
        ws = StuckSocket()
        serve = asyncio.ensure_future(hub.serve(ws))
        await asyncio.sleep(0.05)
        (client,) = hub.clients
        t0 = time.monotonic()
        for _ in range(5):  # offering never blocks, however stuck the client is
            hub._offer("x", time.monotonic())
        assert time.monotonic() - t0 < 0.05
        assert client.dropped >= 3
        await asyncio.sleep(0.3)
        hub._offer("x", time.monotonic())
        await asyncio.wait_for(serve, 5)
        return hub, client

    hub, client = asyncio.run(scenario())
    assert client.closed and not hub.clients


def test_a_client_that_stops_reading_is_dropped_within_stall_drop_s(make_settings, thread_server):
    """A raw WebSocket client completes the handshake and then reads nothing while updates flow:
    it is disconnected within ``stall_drop_s`` (plus slack), and counted as dropped in the
    status and in ``hybridsched_websocket_dropped_total``."""
    import socket

    settings = make_settings(speed=1.0, race_worker=False, stall_drop_s=1.5)
    with thread_server(create_app(settings)) as srv:
        assert httpx.post(f"{srv.url}/api/simulation/start", headers=AUTH, timeout=120).status_code == 200
        stalled = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        stalled.sendall(b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        assert stalled.recv(12) == b"HTTP/1.1 101"  # from here on it reads nothing
        t0 = time.monotonic()
        wait_for(lambda: _status(srv.url)["websocket"]["clients"] == 1, timeout=10)
        wait_for(lambda: _status(srv.url)["websocket"]["dropped"] == 1, timeout=10)
        took = time.monotonic() - t0
        ws = _status(srv.url)["websocket"]
        metrics = httpx.get(f"{srv.url}/api/metrics").text
        httpx.post(f"{srv.url}/api/simulation/stop", headers=AUTH, timeout=60)
        stalled.close()
    assert took < 1.5 + 1.0, took
    assert ws["clients"] == 0
    assert "hybridsched_websocket_dropped_total 1.0" in metrics
