"""Bearer-token auth, the rate limiter of the mutating endpoints, and the request-body limit."""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

_bearer = HTTPBearer(auto_error=False, description="HYBRIDSCHED_TOKEN (printed once at start when generated)")


def retry_after(limiter, item, *keys: str) -> str:  # noqa: ANN001
    """Seconds until the window of ``item`` for ``keys`` resets (a Retry-After value, >= 1)."""
    try:
        reset = limiter.limiter.get_window_stats(item, *keys)[0]
        return str(max(1, math.ceil(reset - time.time())))
    except Exception:  # storage trouble: the whole window is a safe upper bound
        return str(max(1, int(item.get_expiry())))


def require_token(token: str, limiter=None, fail_limit: str | None = None) -> Callable:  # noqa: ANN001
    """A dependency: 401 without a bearer token, 403 with a wrong one. With ``limiter`` and
    ``fail_limit`` (e.g. "10/minute"), failures are counted per client address and, once over
    the limit, that address gets 429 (with Retry-After) until the window ends, whatever token
    it sends: guessing a token costs time."""
    from limits import parse

    item = parse(fail_limit) if limiter is not None and fail_limit else None

    def check(request: Request, creds: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
        keys = ()
        if item is not None:
            keys = (limiter._key_func(request), "auth-failures")
            if not limiter.limiter.test(item, *keys):
                raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS,
                                    f"too many failed authentications from this address (limit {fail_limit})",
                                    headers={"Retry-After": retry_after(limiter, item, *keys)})
        if creds is None or creds.scheme.lower() != "bearer":
            detail, code, headers = "missing bearer token", status.HTTP_401_UNAUTHORIZED, {"WWW-Authenticate": "Bearer"}
        elif not secrets.compare_digest(creds.credentials.encode(), token.encode()):
            detail, code, headers = "invalid token", status.HTTP_403_FORBIDDEN, None
        else:
            return
        if item is not None:
            limiter.limiter.hit(item, *keys)
        raise HTTPException(code, detail, headers=headers)

    return check


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` gets 413 before it is read into
    memory (by its Content-Length; a chunked body is counted as it streams in)."""

    def __init__(self, app, max_bytes: int) -> None:  # noqa: ANN001
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.max_bytes
                except ValueError:
                    too_big = True
                if too_big:
                    await self._refuse(send)
                    return
            if name == b"content-length":  # declared and within the limit: the server reads no more
                await self.app(scope, receive, send)
                return
        # no Content-Length (chunked): read it here, at most max_bytes, then hand it on whole
        parts, seen = [], 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":  # the client went away
                return
            parts.append(msg.get("body", b""))
            seen += len(parts[-1])
            if seen > self.max_bytes:
                await self._refuse(send)
                return
            if not msg.get("more_body", False):
                break
        body, replayed = b"".join(parts), False

        async def replay():  # noqa: ANN202
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

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
