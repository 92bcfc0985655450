"""REST endpoints (``/api/...``); the OpenAPI schema at ``/openapi.json`` (listed at ``/docs``). Mutating endpoints need the bearer
token and are rate limited; no endpoint takes a filesystem path."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from hybridsched.errors import HybridschedError
from hybridsched.service.engine import InvalidRequest
from hybridsched.service.persistence import HistoryKey

NAME = r"^[A-Za-z0-9_.-]{1,64}$"
# a history cursor: "<run_id>.<task_id>.<policy>", the key of the last row of a page
CURSOR = r"^[0-9]{1,10}\.[0-9]{1,10}\.[A-Za-z0-9_.-]{1,64}$"
MAX_LIMIT = 1000  # rows per history page
# rows an offset may skip: skipping walks the keys it skips, so it is bounded; deeper pages use
# the cursor (``after``), which costs the same at any depth
MAX_OFFSET = 10_000
PROBE_TIMEOUT_S = 5.0  # a health check without an answer by then has failed
# what to do instead, added to the 422 line of a query parameter: (name, pydantic error type) -> hint
HINTS = {("offset", "less_than_equal"): "page further with after=<the next of the previous page>"}
# every integer the API takes fits a PostgreSQL INTEGER (the runs table's id): larger values
# are bad input (422), never a database overflow (500)
MAX_INT = 2**31 - 1
# strict: JSON types as declared (``true`` is not a speed, ``"1"`` is not a seed); no NaN/inf
STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
PolicyName = Annotated[str, Field(pattern=NAME)]


class StartRequest(BaseModel):
    """Start a run; every field is optional (the service settings fill the rest)."""

    model_config = STRICT
    workload: str | None = Field(None, pattern=NAME, description="a machine-kind workload of conf/workload/")
    speed: float | None = Field(None, ge=0.0, le=1e7, description="simulated s per wall s; 0 = as fast as possible")
    policies: list[PolicyName] | None = Field(None, min_length=1, max_length=16,
                                              description="distinct policy names (GET /api/config lists them)")
    seed: int | None = Field(None, ge=0, le=MAX_INT)
    resume: bool = Field(False, description="continue the latest stopped or interrupted run")

    @field_validator("policies")
    @classmethod
    def _distinct(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            dup = sorted({p for p in v if v.count(p) > 1})
            if dup:
                raise ValueError(f"policy name(s) {dup} given more than once (each policy races once)")
        return v


class SpeedRequest(BaseModel):
    model_config = STRICT
    speed: float = Field(..., ge=0.0, le=1e7)


def _codes(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error answers an endpoint gives (documented in docs/api.md)."""
    text = {401: "missing bearer token", 403: "wrong token",
            409: "not possible in the race's state (e.g. a run is already running)",
            413: "request body over max_body_bytes", 422: "bad input: one line naming the field or the name",
            429: "rate limit (or too many failed tokens) exceeded; Retry-After says when to try again"}
    return {c: {"description": text[c]} for c in codes}


GUARDED = (401, 403, 413, 429)


class Ack(BaseModel):
    ok: bool = True
    state: str
    run_id: int | None = None


def _cursor(key: HistoryKey) -> str:
    """The ``next`` of a history page: the key of its last row."""
    return f"{key.run_id}.{key.task_id}.{key.policy}"


def _parse_cursor(text: str) -> HistoryKey:
    """A cursor made by :func:`_cursor` (already matched against ``CURSOR``); 422 if its numbers
    cannot be a row's."""
    run_id, task_id, policy = text.split(".", 2)
    if int(run_id) > MAX_INT or int(task_id) > MAX_INT:
        raise HTTPException(422, "after: not a cursor of this history (pass the `next` of the previous page)")
    return HistoryKey(int(run_id), int(task_id), policy)


async def _on(pool: Executor, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a thread of ``pool``."""
    return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)


def build_router(app_state: Any, auth, limit: str) -> APIRouter:  # noqa: ANN001
    """The /api routes over the app's race, store, metrics and cache."""
    router = APIRouter(prefix="/api")
    limiter = app_state.limiter
    race, store, metrics, cache = app_state.race, app_state.store, app_state.metrics, app_state.cache
    guard = [Depends(auth)]

    async def call(fn, *args, **kw):  # noqa: ANN001, ANN202
        """Race control off the event loop; bad input as 422, a conflict with the state as 409
        (one line each)."""
        try:
            return await asyncio.to_thread(fn, *args, **kw)
        except InvalidRequest as e:
            raise HTTPException(422, str(e)) from None
        except HybridschedError as e:
            raise HTTPException(409, str(e)) from None

    @router.post("/simulation/start", dependencies=guard, response_model=Ack, tags=["simulation"],
                 responses=_codes(*GUARDED, 409, 422))
    @limiter.limit(limit)
    async def start(request: Request, body: StartRequest | None = None) -> Ack:
        """Start a run (or resume the latest stopped/interrupted one)."""
        b = body or StartRequest()
        if b.resume and (b.workload is not None or b.policies is not None or b.seed is not None):
            raise HTTPException(422, "resume: continues the stored run with its own workload, policies and seed; "
                                     "give only speed with it")
        run_id = await call(race.start, workload=b.workload, speed=b.speed, policies=b.policies, seed=b.seed,
                            resume=b.resume)
        return Ack(state=race.state, run_id=run_id)

    def control(action: str, fn, doc: str) -> None:  # noqa: ANN001
        """POST /simulation/<action>: one race transition, guarded and rate limited."""

        async def endpoint(request: Request) -> Ack:
            await call(fn)
            return Ack(state=race.state, run_id=race.run_id)

        endpoint.__name__ = endpoint.__qualname__ = action  # route name and rate-limit key
        endpoint.__doc__ = doc
        router.post(f"/simulation/{action}", dependencies=guard, response_model=Ack, tags=["simulation"],
                    responses=_codes(*GUARDED, 409))(
            limiter.limit(limit)(endpoint))

    control("stop", functools.partial(race.stop, wait=False),
            "Stop the run. The answer comes at once with state `stopping` while what was released is "
            "committed; the status then says `stopped` (resumable), every released task stored.")
    control("pause", race.pause, "Freeze the simulated clock.")
    control("resume", race.resume, "Let the simulated clock run again.")

    @router.post("/simulation/speed", dependencies=guard, response_model=Ack, tags=["simulation"],
                 responses=_codes(*GUARDED, 422))
    @limiter.limit(limit)
    async def speed(request: Request, body: SpeedRequest) -> Ack:
        """Change the speed (simulated s per wall s; 0 = as fast as possible)."""
        await call(race.set_speed, body.speed)
        return Ack(state=race.state, run_id=race.run_id)

    @router.get("/simulation/status", tags=["simulation"])
    async def status() -> dict[str, Any]:
        """State, ``phase`` (``starting`` from a start until its first tasks are released, while the
        first segment loads the models and compiles the engine; then ``racing``; null without a
        live run), run, speed, simulated time, tasks, tasks/s (over the last 5 s of this run; 0
        unless running) and per-policy summary. After a restart the newest run shows as ``interrupted``
        (the server died during it) or ``stopped``, with ``resumable: true``: POST start with
        ``{"resume": true}`` continues it with its summaries and speed. Served from the Redis
        status cache when this process has no run and a cache is configured."""
        s = {**race.status(), "websocket": app_state.hub.counts()}
        if s["state"] == "idle" and cache is not None:
            cached = await asyncio.to_thread(cache.get_status)
            if cached:
                return {**cached, "source": "cache"}
        return {**s, "source": "local"}

    @router.get("/gantt", tags=["simulation"], responses={404: {"description": "policy not in the current race"}})
    async def gantt(policy: str = Query(..., pattern=NAME)) -> dict[str, Any]:
        """The last simulated minute of one policy's devices (parts: device, start, end, task)."""
        try:
            return await asyncio.to_thread(race.gantt, policy)  # the worker answers it
        except HybridschedError as e:
            raise HTTPException(404, str(e)) from None

    @router.get("/full_history", tags=["history"], responses=_codes(422))
    async def full_history(
            limit: int = Query(100, ge=1, le=MAX_LIMIT, description=f"rows per page, at most {MAX_LIMIT}"),
            after: str | None = Query(None, pattern=CURSOR, max_length=96,
                                      description="the `next` of the previous page (an opaque cursor): the page "
                                                  "starts right after the row it names; every row comes exactly "
                                                  "once, at the same cost at any depth"),
            offset: int = Query(0, ge=0, le=MAX_OFFSET,
                                description=f"rows to skip from the start, at most {MAX_OFFSET} (422 past it: "
                                            "page further with `after`); not together with `after`"),
            policy: str | None = Query(None, pattern=NAME, description="only this policy's results"),
            run_id: int | None = Query(None, ge=1, le=MAX_INT, description="only this run's results"),
    ) -> dict[str, Any]:
        """Results, newest first (run, then task, then policy name, each descending), a page at a
        time; optionally one policy / run. ``next`` is the cursor of the following page (null on
        the last page): pass it as ``after``. ``total`` counts every matching row."""
        key = None
        if after is not None:
            if offset:
                raise HTTPException(422, "after: give after or offset, not both")
            key = _parse_cursor(after)
        total, items, nxt = await _on(app_state.history_pool, store.history, limit, offset, policy, run_id, key)
        return {"total": total, "limit": limit, "offset": offset, "after": after,
                "next": _cursor(nxt) if nxt is not None else None, "items": items}

    @router.delete("/history", dependencies=guard, tags=["history"], responses=_codes(*GUARDED, 409))
    @limiter.limit(limit)
    async def delete_history(request: Request) -> dict[str, Any]:
        """Delete the stored history (409 while a run is running or paused: stop it first).
        Afterwards the race is idle: no deleted run is shown or resumable."""
        n = await call(race.delete_history)
        if cache is not None:  # the cached status would still show the deleted run
            await asyncio.to_thread(cache.put_status, race.status())
        return {"deleted_runs": n}

    @router.get("/health", tags=["operations"],
                responses={503: {"description": "the database or the cache failed or gave no answer within 5 s"}})
    async def health(response: Response) -> dict[str, Any]:
        """Database (and cache, when configured) reachable: 200, else 503. Answered on its own
        thread and database connection: busy history queries do not delay it; a check without an
        answer within 5 s counts as failed."""
        out: dict[str, Any] = {"status": "ok", "race": race.state}
        checks = [("database", store.ping)] + ([("cache", cache.ping)] if cache is not None else [])
        if cache is None:
            out["cache"] = "not configured"
        # on the probe's own thread and connection (the app's ``probe_pool``, the store's ``probe``):
        # history queries and race control hold others
        for name, ping in checks:
            try:
                await asyncio.wait_for(_on(app_state.probe_pool, ping), PROBE_TIMEOUT_S)
                out[name] = "ok"
            except TimeoutError:
                out[name], out["status"] = f"error: no answer within {PROBE_TIMEOUT_S:g} s", "error"
            except Exception as e:
                out[name], out["status"] = f"error: {str(e).splitlines()[0]}", "error"
        if out["status"] != "ok":
            response.status_code = 503
        return out

    @router.get("/metrics", tags=["operations"], response_class=Response)
    async def prometheus() -> Response:
        """Prometheus text exposition (private registry of this app)."""
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @router.get("/config", tags=["operations"])
    async def config() -> dict[str, Any]:
        """What a client may choose: the policies a run can race (arrival mode, model and tuned
        weights present) and workloads; the defaults in use. ``not_raceable`` names every other
        configured policy with the reason (a start naming one is 422); ``left_out``, the default
        policies left out at start-up because their model is missing."""
        s = app_state.settings
        workloads = await asyncio.to_thread(s.workloads)  # composed on first use
        not_raceable = await asyncio.to_thread(race.not_raceable)
        return {"policies": sorted(p for p in s.machine.get("policies", {}) if p not in not_raceable),
                "workloads": sorted(workloads), "default_policies": s.policies, "speed": race.speed,
                "n_devices": race.cluster.n_devices, "not_raceable": not_raceable, "left_out": s.left_out}

    return router
