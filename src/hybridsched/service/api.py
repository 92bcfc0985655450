"""REST endpoints (``/api/...``); OpenAPI at ``/docs``. Mutating endpoints need the bearer
token and are rate limited; no endpoint takes a filesystem path."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from hybridsched.errors import HybridschedError

NAME = r"^[A-Za-z0-9_.-]{1,64}$"


class StartRequest(BaseModel):
    """Start a run; every field is optional (the service settings fill the rest)."""

    model_config = ConfigDict(extra="forbid")
    workload: str | None = Field(None, pattern=NAME, description="a machine-kind workload of conf/workload/")
    speed: float | None = Field(None, ge=0.0, le=1e7, description="simulated s per wall s; 0 = as fast as possible")
    policies: list[str] | None = Field(None, min_length=1, max_length=16)
    seed: int | None = Field(None, ge=0, le=2**31 - 1)
    resume: bool = Field(False, description="continue the latest stopped or interrupted run")


class SpeedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    speed: float = Field(..., ge=0.0, le=1e7)


class Ack(BaseModel):
    ok: bool = True
    state: str
    run_id: int | None = None


def build_router(app_state: Any, auth, limit: str) -> APIRouter:  # noqa: ANN001
    """The /api routes over the app's race, store, metrics and cache."""
    router = APIRouter(prefix="/api")
    limiter = app_state.limiter
    race, store, metrics, cache = app_state.race, app_state.store, app_state.metrics, app_state.cache
    guard = [Depends(auth)]

    async def call(fn, *args, **kw):  # noqa: ANN001, ANN202
        """Race control off the event loop; its one-line errors as 409."""
        try:
            return await asyncio.to_thread(fn, *args, **kw)
        except HybridschedError as e:
            raise HTTPException(409, str(e)) from None

    @router.post("/simulation/start", dependencies=guard, response_model=Ack, tags=["simulation"])
    @limiter.limit(limit)
    async def start(request: Request, body: StartRequest | None = None) -> Ack:
        """Start a run (or resume the latest stopped/interrupted one)."""
        b = body or StartRequest()
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
        router.post(f"/simulation/{action}", dependencies=guard, response_model=Ack, tags=["simulation"])(
            limiter.limit(limit)(endpoint))

    control("stop", race.stop, "Stop the run; what was released is committed before the answer.")
    control("pause", race.pause, "Freeze the simulated clock.")
    control("resume", race.resume, "Let the simulated clock run again.")

    @router.post("/simulation/speed", dependencies=guard, response_model=Ack, tags=["simulation"])
    @limiter.limit(limit)
    async def speed(request: Request, body: SpeedRequest) -> Ack:
        """Change the speed (simulated s per wall s; 0 = as fast as possible)."""
        race.set_speed(body.speed)
        return Ack(state=race.state, run_id=race.run_id)

    @router.get("/simulation/status", tags=["simulation"])
    async def status() -> dict[str, Any]:
        """State, run, speed, simulated time, tasks, tasks/s and per-policy summary. Served from
        the Redis status cache when this process has no run and a cache is configured."""
        s = race.status()
        if s["state"] == "idle" and cache is not None:
            cached = await asyncio.to_thread(cache.get_status)
            if cached:
                return {**cached, "source": "cache"}
        return {**s, "source": "local"}

    @router.get("/gantt", tags=["simulation"])
    async def gantt(policy: str = Query(..., pattern=NAME)) -> dict[str, Any]:
        """The last simulated minute of one policy's devices (parts: device, start, end, task)."""
        try:
            return race.gantt(policy)
        except HybridschedError as e:
            raise HTTPException(404, str(e)) from None

    @router.get("/full_history", tags=["history"])
    async def full_history(limit: int = Query(100, ge=1, le=1000), offset: int = Query(0, ge=0),
                           policy: str | None = Query(None, pattern=NAME),
                           run_id: int | None = Query(None, ge=1)) -> dict[str, Any]:
        """Results, newest first (run, then task), paginated; optionally one policy / run."""
        total, items = await asyncio.to_thread(store.history, limit, offset, policy, run_id)
        return {"total": total, "limit": limit, "offset": offset, "items": items}

    @router.delete("/history", dependencies=guard, tags=["history"])
    @limiter.limit(limit)
    async def delete_history(request: Request) -> dict[str, Any]:
        """Delete the stored history (409 while a run is running or paused: stop it first)."""
        if race.state in ("running", "paused"):
            raise HTTPException(409, f"run {race.run_id} is {race.state}; stop it before deleting the history")
        n = await asyncio.to_thread(store.delete_history)
        return {"deleted_runs": n}

    @router.get("/health", tags=["operations"])
    async def health(response: Response) -> dict[str, Any]:
        """Database (and cache, when configured) reachable: 200, else 503."""
        out: dict[str, Any] = {"status": "ok", "race": race.state}
        try:
            await asyncio.to_thread(store.ping)
            out["database"] = "ok"
        except Exception as e:
            out["database"], out["status"] = f"error: {str(e).splitlines()[0]}", "error"
        if cache is None:
            out["cache"] = "not configured"
        else:
            try:
                await asyncio.to_thread(cache.ping)
                out["cache"] = "ok"
            except Exception as e:
                out["cache"], out["status"] = f"error: {str(e).splitlines()[0]}", "error"
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
        """What a client may choose: policies and workloads; the defaults in use."""
        s = app_state.settings
        return {"policies": sorted(s.machine.get("policies", {})), "workloads": sorted(s.machine.get("workloads", {})),
                "default_policies": s.policies, "speed": race.speed, "n_devices": race.cluster.n_devices,
                "left_out": s.left_out}  # configured policies left out: their model is missing

    return router
