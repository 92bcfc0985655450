"""WebSocket ``/ws``: coalesced ``simulation_update`` and ``notification`` events.

One broadcaster task serialises each event once per tick (at most ``1 / tick_s`` messages
per second per client, however fast the race runs) and offers it to every client's bounded
queue without waiting: a client whose queue is full misses that message (counted), and one
whose queue stays full for ``stall_drop_s`` is disconnected.  The race never waits on a
client, and a slow client never delays another.

A client that stops reading fills the socket buffers before its queue: the server's keepalive
pings (``app.server_options``: a ping every ``stall_drop_s / 2``, answered within as long) find it
first, and the server ends the connection with :data:`STALLED` (close code 1011).  Either way the
client counts as dropped (``hybridsched_websocket_dropped_total``, ``websocket.dropped`` in the
status).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

STALLED = "keepalive ping timeout"  # the reason of the disconnect a stalled reader gets


def dumps(obj: Any) -> str:
    """JSON with NaN/inf as null (browsers reject NaN)."""
    return json.dumps(_clean(obj), separators=(",", ":"))


def _clean(o: Any) -> Any:
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_clean(v) for v in o]
    return o


class _Client:
    def __init__(self, ws: WebSocket, size: int) -> None:
        self.ws = ws
        self.queue: asyncio.Queue[str] = asyncio.Queue(size)
        self.full_since: float | None = None
        self.dropped = 0
        self.closed = False


class Hub:
    """The connected clients and the broadcaster loop."""

    def __init__(self, race, metrics, tick_s: float = 0.1, queue_size: int = 8,  # noqa: ANN001
                 stall_drop_s: float = 10.0, cache=None) -> None:  # noqa: ANN001
        self.race, self.metrics, self.cache = race, metrics, cache
        self.tick_s, self.queue_size, self.stall_drop_s = tick_s, queue_size, stall_drop_s
        self.clients: set[_Client] = set()
        self.sent = 0
        self.skipped = 0  # messages a full queue made a client miss
        self.dropped = 0  # clients disconnected for not reading
        self._heartbeat = 0.0

    async def run(self) -> None:
        """Broadcast forever (cancelled at shutdown)."""
        last_cache = 0.0
        notes: list[dict] = []
        last_kind = "update"
        while True:
            await asyncio.sleep(self.tick_s)
            now = time.monotonic()
            if self.cache is not None and now - last_cache >= 1.0:
                last_cache = now
                await asyncio.to_thread(self.cache.put_status, self.race.status())
            notes.extend(self.race.take_notifications())
            del notes[:-1000]  # nobody reading: keep the newest
            if not self.clients:
                continue
            # one message per tick; notifications and updates take turns so neither starves
            if notes and (last_kind == "update" or not self._update_due(now)):
                self._offer(dumps({"type": "notification", "events": notes}), now)
                notes = []
                last_kind = "notification"
                continue
            update = self.race.take_update()
            if update is None:
                continue
            if update["decided"] == 0 and update["state"] != "running" and now - self._heartbeat < 1.0:
                continue  # nothing new: one update a second keeps idle dashboards in sync
            self._heartbeat = now
            self._offer(dumps(update), now)
            last_kind = "update"

    def _update_due(self, now: float) -> bool:
        """Whether an update has something to say (the race is running, or a heartbeat is due)."""
        return self.race.state == "running" or now - self._heartbeat >= 1.0

    def _offer(self, text: str, now: float) -> None:
        for c in list(self.clients):
            try:
                c.queue.put_nowait(text)
                c.full_since = None
            except asyncio.QueueFull:
                c.dropped += 1
                self.skipped += 1
                if self.metrics is not None:
                    self.metrics.skipped.inc()
                if c.full_since is None:
                    c.full_since = now
                elif now - c.full_since > self.stall_drop_s:
                    self._drop(c)

    def counts(self) -> dict[str, int]:
        """Connected clients, clients dropped for not reading, messages skipped (status ``websocket``)."""
        return {"clients": len(self.clients), "dropped": self.dropped, "skipped": self.skipped}

    def _stalled(self) -> None:
        self.dropped += 1
        if self.metrics is not None:
            self.metrics.dropped.inc()

    def _drop(self, c: _Client, stalled: bool = True) -> None:
        if stalled and not c.closed:
            self._stalled()
        c.closed = True
        self.clients.discard(c)
        if self.metrics is not None:
            self.metrics.clients.set(len(self.clients))
        asyncio.ensure_future(_close(c.ws))

    async def serve(self, ws: WebSocket) -> None:
        """One client: send its queue, read (and ignore) what it sends until it goes."""
        await ws.accept()
        c = _Client(ws, self.queue_size)
        self.clients.add(c)
        if self.metrics is not None:
            self.metrics.clients.set(len(self.clients))
        sender = asyncio.ensure_future(self._send(c))
        try:
            c.queue.put_nowait(dumps({"type": "hello", **self.race.status()}))
            while not c.closed:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    if msg.get("reason") == STALLED and not c.closed:
                        self._stalled()
                    break
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            sender.cancel()
            c.closed = True
            self.clients.discard(c)
            if self.metrics is not None:
                self.metrics.clients.set(len(self.clients))

    async def _send(self, c: _Client) -> None:
        try:
            while True:
                text = await c.queue.get()
                await c.ws.send_text(text)
                self.sent += 1
        except Exception:  # a broken socket: serve() notices the disconnect
            c.closed = True

    async def close_all(self) -> None:
        for c in list(self.clients):
            self._drop(c, stalled=False)


async def _close(ws: WebSocket) -> None:
    try:
        await ws.close(code=1013)  # try again later: the client fell too far behind
    except Exception:
        pass
