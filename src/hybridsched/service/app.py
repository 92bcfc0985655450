"""The app factory: ``create_app(settings)`` wires the store, the race (in a worker process,
``worker.py``), metrics, WebSocket hub, security and the dashboard. Each app owns its objects
(no module globals)."""

from __future__ import annotations

import asyncio
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fastapi import FastAPI, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from hybridsched.service.settings import ServiceSettings

STATIC = Path(__file__).with_name("static")


def _protocol() -> type:
    """uvicorn's sans-I/O WebSocket protocol, telling the app why it ends a connection whose
    client did not answer a keepalive ping: the hub counts that client as dropped
    (``ws.STALLED``), and the connection is aborted rather than left waiting for the unread
    data in its buffers to drain."""
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    from hybridsched.service.ws import STALLED

    class StallAware(WebSocketsSansIOProtocol):
        def keepalive_timeout(self) -> None:
            if not (self.close_sent or self.transport.is_closing()):
                self.queue.put_nowait({"type": "websocket.disconnect", "code": 1011, "reason": STALLED})
            super().keepalive_timeout()
            self.transport.abort()

    return StallAware


def server_options(stall_drop_s: float = 10.0) -> dict[str, Any]:
    """The ``uvicorn.Config`` options the app is served with (``hybridsched serve``; the tests'
    servers use them too); ``stall_drop_s`` is ``service.stall_drop_s``."""
    # ws_per_message_deflate off: every client's deflate context compressed the same update again
    # (50 clients: ~15 % of the event loop's time in the live race), on the thread that answers
    # the REST calls; the updates are a few kB of JSON at <= 10 per second.
    # proxy_headers off: uvicorn's own handling believes X-Forwarded-For from any local peer; the
    # app believes it only from service.trusted_proxies (create_app)
    # keepalive pings every stall_drop_s / 2, each answered within stall_drop_s / 2: a client that
    # stops reading is dropped within stall_drop_s (its socket buffers would take minutes to fill)
    return {"ws": _protocol(), "ws_per_message_deflate": False, "timeout_graceful_shutdown": 10,
            "proxy_headers": False, "ws_ping_interval": stall_drop_s / 2, "ws_ping_timeout": stall_drop_s / 2}


def _executors(history_threads: int) -> dict[str, ThreadPoolExecutor]:
    """The API's own thread pools: history pages on as many threads as the store has history
    connections (more would only wait for one), health checks on one thread of their own."""
    return {"history_pool": ThreadPoolExecutor(history_threads, thread_name_prefix="hybridsched-history"),
            "probe_pool": ThreadPoolExecutor(1, thread_name_prefix="hybridsched-probe")}


def create_app(settings: ServiceSettings) -> FastAPI:
    """A ready app: migrations applied, runs left running by a dead process marked
    'interrupted', the race idle (or started when ``settings.autostart``)."""
    from slowapi.errors import RateLimitExceeded

    from hybridsched.service.api import HINTS, build_router
    from hybridsched.service.engine import Race
    from hybridsched.service.metrics import ServiceMetrics
    from hybridsched.service.persistence import Store, _in_memory
    from hybridsched.service.security import (AuthFirst, BodyLimit, HeadAsGet, HostCheck, SecurityHeaders,
                                              allowed_host_names, make_limiter, origin_allowed, require_token,
                                              retry_after, token_check)
    from hybridsched.service.settings import check_policies
    from hybridsched.service.ws import Hub

    check_policies(settings)
    settings.ensure_token()
    store = Store(settings.database_url)
    store.upgrade()
    store.mark_interrupted()
    cache = None
    if settings.redis_url:
        from hybridsched.service.cache import RedisCache

        cache = RedisCache(settings.redis_url)
    metrics = ServiceMetrics()
    if settings.race_worker and not _in_memory(settings.database_url):
        from hybridsched.service.worker import RaceClient

        # the race and its writer in a worker process, started by the first run
        race: Race | RaceClient = RaceClient(settings, store, metrics)
    else:  # a thread of this process (a second process cannot open an in-memory database)
        race = Race(settings, store, metrics)
    hub = Hub(race, metrics, settings.tick_s, settings.client_queue, settings.stall_drop_s, cache)
    state = SimpleNamespace(settings=settings, store=store, race=race, metrics=metrics, hub=hub, cache=cache,
                            limiter=make_limiter(settings.redis_url), **_executors(store.read_pool))

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202
        task = asyncio.ensure_future(hub.run())
        switch = sys.getswitchinterval()
        sys.setswitchinterval(settings.switch_interval_s)
        # the workload choices are composed once the server answers (GET /api/config needs them)
        threading.Thread(target=settings.workloads, name="hybridsched-workloads", daemon=True).start()
        if settings.autostart:
            await asyncio.to_thread(race.start, resume=store.latest_resumable() is not None
                                    and store.latest_resumable()["status"] == "interrupted")
        try:
            yield
        finally:  # SIGINT/SIGTERM under uvicorn: stop the race, commit everything, close
            await hub.close_all()
            task.cancel()
            await asyncio.to_thread(race.shutdown)
            sys.setswitchinterval(switch)
            for pool in (state.history_pool, state.probe_pool):
                pool.shutdown(wait=False, cancel_futures=True)
            state.__dict__.update(_executors(store.read_pool))  # threads start on first use only
            if cache is not None:
                cache.close()
            store.dispose()

    # no Swagger UI or ReDoc: both load their scripts from a CDN; /docs is a page of this package
    app = FastAPI(title="hybridsched live service", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Schedulers racing on one task stream: control, history, metrics, live updates.")
    app.state.limiter = state.limiter
    app.state.svc = state

    async def rate_limited(request, exc: RateLimitExceeded) -> JSONResponse:  # noqa: ANN001
        current = getattr(request.state, "view_rate_limit", None)  # (limit item, storage keys), set by slowapi
        wait = (retry_after(state.limiter, current[0], *current[1]) if current
                else str(max(1, int(exc.limit.limit.get_expiry()))))
        return JSONResponse({"detail": f"rate limit exceeded: {exc.detail}"}, status_code=429,
                            headers={"Retry-After": wait})

    async def invalid(request, exc: RequestValidationError) -> JSONResponse:  # noqa: ANN001
        errors = exc.errors()
        first = errors[0] if errors else {}
        loc = first.get("loc", ())
        where = ".".join(str(x) for x in loc)
        hint = HINTS.get((str(loc[-1]), first.get("type"))) if len(loc) == 2 and loc[0] == "query" else None
        return JSONResponse({"detail": f"{where}: {first.get('msg', 'invalid request')}" + (f"; {hint}" if hint else ""),
                             "errors": [{k: e.get(k) for k in ("loc", "msg", "type")} for e in errors]},
                            status_code=422)

    app.add_exception_handler(RateLimitExceeded, rate_limited)
    app.add_exception_handler(RequestValidationError, invalid)
    # middleware, innermost first: the body limit counts what is read; the token is checked
    # before anything reads a body; HEAD is answered as GET; CORS (closed unless configured);
    # forwarded headers believed from the configured proxies only; a foreign Host refused; security
    # headers on every answer
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(AuthFirst, check=token_check(settings.token, state.limiter, settings.auth_fail_limit))
    app.add_middleware(HeadAsGet)
    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type"])
    if settings.trusted_proxies:
        from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.trusted_proxies)
    app.add_middleware(HostCheck, allowed=allowed_host_names(settings.allowed_hosts, settings.host))
    app.add_middleware(SecurityHeaders)
    app.include_router(build_router(state, require_token(settings.token, state.limiter, settings.auth_fail_limit),
                                    settings.rate_limit))

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        """Live events: simulation_update and notification (read-only: no token needed). A browser
        page of another site may not connect (its Origin is not this Host, nor in cors_origins)."""
        if not origin_allowed(websocket.headers.get("origin"), websocket.headers.get("host"),
                              settings.cors_origins):
            await websocket.close(code=1008)  # before accept: the handshake is answered 403
            return
        await hub.serve(websocket)

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        """The endpoints and a link to ``/openapi.json``, served from the package."""
        from hybridsched.service.openapi_doc import html_page

        return HTMLResponse(html_page(app.openapi()))

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
