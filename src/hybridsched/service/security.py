"""Bearer-token auth and the rate limiter of the mutating endpoints."""

from __future__ import annotations

import secrets
from collections.abc import Callable

from fastapi import Depends, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

_bearer = HTTPBearer(auto_error=False, description="HYBRIDSCHED_TOKEN (printed once at start when generated)")


def require_token(token: str) -> Callable:
    """A dependency: 401 without a bearer token, 403 with a wrong one."""

    def check(creds: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
        if creds is None or creds.scheme.lower() != "bearer":
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing bearer token",
                                headers={"WWW-Authenticate": "Bearer"})
        if not secrets.compare_digest(creds.credentials.encode(), token.encode()):
            raise HTTPException(status.HTTP_403_FORBIDDEN, "invalid token")

    return check


def make_limiter(redis_url: str | None):  # -> slowapi.Limiter
    """Per-client-address limiter; counters in Redis when configured, else in memory."""
    from slowapi import Limiter
    from slowapi.util import get_remote_address

    return Limiter(key_func=get_remote_address, storage_uri=redis_url or "memory://", headers_enabled=False)
