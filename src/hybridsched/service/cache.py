"""Optional Redis (``REDIS_URL``): the live status cache shared by several app processes.
(The rate-limit counters use the same URL through slowapi's storage.)"""

from __future__ import annotations

import json
from typing import Any

STATUS_KEY = "hybridsched:status"


class RedisCache:
    """Status snapshots in Redis, expiring when the process that owns the race goes away."""

    def __init__(self, url: str, ttl_s: int = 10) -> None:
        import redis

        self.client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self.ttl_s = ttl_s

    def ping(self) -> None:
        self.client.ping()

    def put_status(self, status: dict[str, Any]) -> None:
        from hybridsched.service.ws import dumps

        try:
            self.client.set(STATUS_KEY, dumps(status), ex=self.ttl_s)
        except Exception:  # a cache outage must not stop the race; health reports it
            pass

    def get_status(self) -> dict[str, Any] | None:
        raw = self.client.get(STATUS_KEY)
        return json.loads(raw) if raw else None

    def close(self) -> None:
        self.client.close()
