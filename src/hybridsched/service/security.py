"""Bearer-token auth (checked before a body is read), the rate limiter of the mutating endpoints,
the request-body limit, and the response headers and request rules that browsers rely on."""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable

from fastapi import Depends, HTTPException, Request, status
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param

_bearer = HTTPBearer(auto_error=False, description="HYBRIDSCHED_TOKEN (printed once at start when generated)")


def retry_after(limiter, item, *keys: str) -> str:  # noqa: ANN001
    """Seconds until the window of ``item`` for ``keys`` resets (a Retry-After value, >= 1)."""
    try:
        reset = limiter.limiter.get_window_stats(item, *keys)[0]
        return str(max(1, math.ceil(reset - time.time())))
    except Exception:  # storage trouble: the whole window is a safe upper bound
        return str(max(1, int(item.get_expiry())))


def token_check(token: str, limiter=None, fail_limit: str | None = None) -> Callable[[Request, str | None], None]:  # noqa: ANN001
    """``check(request, authorization)``: raises HTTPException 401 without a bearer token, 403
    with a wrong one. With ``limiter`` and ``fail_limit`` (e.g. "10/minute"), failures are
    counted per client address and, once over the limit, that address gets 429 (with
    Retry-After) until the window ends, whatever token it sends: guessing a token costs time."""
    from limits import parse

    item = parse(fail_limit) if limiter is not None and fail_limit else None

    def check(request: Request, authorization: str | None) -> None:
        keys: tuple[str, ...] = ()
        if item is not None:
            keys = (limiter._key_func(request), "auth-failures")
            if not limiter.limiter.test(item, *keys):
                raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS,
                                    f"too many failed authentications from this address (limit {fail_limit})",
                                    headers={"Retry-After": retry_after(limiter, item, *keys)})
        scheme, credentials = get_authorization_scheme_param(authorization)
        if scheme.lower() != "bearer" or not credentials:
            detail, code, headers = "missing bearer token", status.HTTP_401_UNAUTHORIZED, {"WWW-Authenticate": "Bearer"}
        elif not secrets.compare_digest(credentials.encode(), token.encode()):
            detail, code, headers = "invalid token", status.HTTP_403_FORBIDDEN, None
        else:
            return
        if item is not None:
            limiter.limiter.hit(item, *keys)
        raise HTTPException(code, detail, headers=headers)

    return check


def require_token(token: str, limiter=None, fail_limit: str | None = None) -> Callable:  # noqa: ANN001
    """A route dependency running :func:`token_check` (and declaring the bearer scheme in the
    OpenAPI schema). :class:`AuthFirst` runs the same check before the body is read."""
    check = token_check(token, limiter, fail_limit)

    def dependency(request: Request, creds: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
        check(request, f"{creds.scheme} {creds.credentials}" if creds is not None else None)

    return dependency


GUARDED_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class AuthFirst:
    """ASGI middleware: a mutating request under ``prefix`` (POST, PUT, PATCH, DELETE) is
    checked with ``check`` before anything reads its body, so a client without the right token
    gets 401/403/429 without the server reading (or parsing) what it sends."""

    def __init__(self, app, check: Callable[[Request, str | None], None], prefix: str = "/api/") -> None:  # noqa: ANN001
        self.app, self.check, self.prefix = app, check, prefix

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope["type"] == "http" and scope["method"] in GUARDED_METHODS and scope["path"].startswith(self.prefix):
            request = Request(scope)  # headers and client address only: the body stays unread
            try:
                self.check(request, request.headers.get("authorization"))
            except HTTPException as e:
                # the connection closes: whatever body the client is still sending is not read
                headers = {**(e.headers or {}), "Connection": "close"}
                response = JSONResponse({"detail": e.detail}, status_code=e.status_code, headers=headers)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyTooLarge(Exception):
    """Raised from ``receive`` once a request body passes the limit (the 413 is already sent)."""


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` gets 413. A declared Content-Length
    over the limit is refused before anything is read; otherwise the bytes actually received
    are counted as they arrive, whatever the headers say (a chunked body, or one whose
    Content-Length understates it), and the 413 goes out as soon as the total passes the
    limit: the server holds at most ``max_bytes`` of a body, plus the chunk that passed it."""

    def __init__(self, app, max_bytes: int) -> None:  # noqa: ANN001
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and (not value.isdigit() or int(value) > self.max_bytes):
                await self._refuse(send)
                return
        seen, refused, started = 0, False, False

        async def counted() -> dict:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    refused = True
                    if not started:
                        await self._refuse(send)
                    raise BodyTooLarge(f"request body larger than {self.max_bytes} bytes")
            return msg

        async def guarded_send(msg: dict) -> None:
            nonlocal started
            if refused:  # the 413 is the answer; whatever the app makes of the aborted read is dropped
                return
            started = started or msg["type"] == "http.response.start"
            await send(msg)

        try:
            await self.app(scope, counted, guarded_send)
        except BodyTooLarge:
            pass

    async def _refuse(self, send) -> None:  # noqa: ANN001
        import json

        body = json.dumps({"detail": f"request body larger than {self.max_bytes} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def make_limiter(redis_url: str | None):  # -> slowapi.Limiter
    """Per-client-address limiter; counters in Redis when configured, else in memory."""
    from slowapi import Limiter
    from slowapi.util import get_remote_address

    return Limiter(key_func=get_remote_address, storage_uri=redis_url or "memory://", headers_enabled=False)


# The dashboard loads its page, script, styles and Chart.js from /static and talks to /api and /ws
# on the same host; /docs is plain HTML: nothing else is allowed, and no other site may frame them.
DASHBOARD_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                 "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


class SecurityHeaders:
    """ASGI middleware: every HTTP response says ``X-Content-Type-Options: nosniff``,
    ``X-Frame-Options: DENY`` and ``Referrer-Policy: no-referrer``, and carries the dashboard's
    Content-Security-Policy."""

    def __init__(self, app, csp: str = DASHBOARD_CSP) -> None:  # noqa: ANN001
        self.app, self.csp = app, csp.encode()

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
                 (b"referrer-policy", b"no-referrer"), (b"content-security-policy", self.csp)]

        async def with_headers(msg: dict) -> None:
            if msg["type"] == "http.response.start":
                names = {name.lower() for name, _ in msg.get("headers", ())}
                msg = {**msg, "headers": [*msg.get("headers", ()), *((n, v) for n, v in extra if n not in names)]}
            await send(msg)

        await self.app(scope, receive, with_headers)


class HeadAsGet:
    """ASGI middleware: ``HEAD`` is answered as ``GET`` would be, headers only (FastAPI routes
    declare GET alone, which would make HEAD a 405)."""

    def __init__(self, app) -> None:  # noqa: ANN001
        self.app = app

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(msg: dict) -> None:
            if msg["type"] == "http.response.body":
                if msg.get("more_body", False):
                    return
                msg = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(msg)

        await self.app({**scope, "method": "GET"}, receive, headers_only)


_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


def _host_port(netloc: str, scheme: str) -> tuple[str, int | None]:
    """(lower-case host, port or the scheme's default) of ``host[:port]`` ([v6]:port too)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(f"//{netloc}")
        return (parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:  # a malformed port
        return netloc.lower(), None


LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


def allowed_host_names(configured: list[str], bound: str) -> list[str]:
    """The ``Host`` names the service answers: ``configured`` (``service.allowed_hosts``) when
    given, else this machine's loopback names and the bound address ``bound``."""
    names = configured or [*LOCAL_HOSTS, bound]
    return list(dict.fromkeys(n.strip().lower().strip("[]") for n in names if n.strip()))


def host_allowed(host: str | None, allowed: list[str]) -> bool:
    """Whether a request's ``Host`` header names one of ``allowed`` (``*`` allows any;
    ``*.example.org`` any subdomain of example.org). The port is not compared."""
    if "*" in allowed:
        return True
    if not host:
        return False
    name = _host_port(host, "http")[0].strip("[]")
    return any(name == a or (a.startswith("*.") and name.endswith(a[1:])) for a in allowed)


class HostCheck:
    """ASGI middleware: a request (HTTP or WebSocket) whose ``Host`` is not one of ``allowed``
    gets 400 with one line naming the host and the setting, before anything else runs: a page
    of another site that resolves its own name to this server (DNS rebinding) is answered
    nothing."""

    def __init__(self, app, allowed: list[str]) -> None:  # noqa: ANN001
        self.app, self.allowed = app, allowed

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = next((v.decode("latin-1") for n, v in scope.get("headers", ()) if n == b"host"), None)
        if host_allowed(host, self.allowed):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # before accept: HTTP 403
            return
        detail = (f"Host {host!r} is not served here; allowed: {', '.join(self.allowed)} "
                  f"(service.allowed_hosts or HYBRIDSCHED_ALLOWED_HOSTS)")
        await JSONResponse({"detail": detail}, status_code=400, headers={"Connection": "close"})(scope, receive, send)


def origin_allowed(origin: str | None, host: str | None, allowed: list[str]) -> bool:
    """Whether a WebSocket handshake's ``Origin`` may connect: no Origin (not a browser), an
    Origin listed in ``allowed``, or one whose host and port are the request's ``Host``."""
    from urllib.parse import urlsplit

    if origin is None:
        return True
    if origin.rstrip("/") in {a.rstrip("/") for a in allowed}:
        return True
    if not host or origin == "null":
        return False
    try:
        o = urlsplit(origin)
        theirs = ((o.hostname or "").lower(), o.port or _DEFAULT_PORTS.get(o.scheme))
    except ValueError:
        return False
    # a page opens its socket with the matching scheme (http -> ws, https -> wss), so a Host
    # without a port has the Origin scheme's default port (this holds behind a TLS proxy too)
    return bool(theirs[0]) and theirs == _host_port(host, o.scheme)
