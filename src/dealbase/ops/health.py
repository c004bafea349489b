"""``GET /healthz`` and ``GET /readyz``: whether to restart a process, and whether to send it
traffic. Neither needs a key, neither is rate limited, and neither is part of the integration
API's OpenAPI document (docs/operations.md describes them)."""

from __future__ import annotations

import asyncio

import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

from dealbase.db.database import Database
from dealbase.db.faults import RETRY_AFTER_SECONDS
from dealbase.edge.problems import problem_body, problem_response
from dealbase.errors import Unavailable
from dealbase.tenancy.rate_limits.limiter import RateLimiterUnavailable, RedisLimiter


def install_health(app: FastAPI, database: Database, redis: RedisLimiter | None) -> None:
    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> Response:
        # Liveness: the event loop answers. No I/O, so a database outage never gets a healthy
        # process restarted.
        return Response(orjson.dumps({"status": "ok"}), media_type="application/json")

    @app.get("/readyz", include_in_schema=False)
    async def readyz(request: Request) -> Response:
        checks = {"postgresql": _postgresql(database)}
        if redis is not None:
            checks["redis"] = _redis(redis)
        outcomes = dict(zip(checks, await asyncio.gather(*checks.values()), strict=True))
        failed = [name for name, outcome in outcomes.items() if outcome != "ok"]
        if not failed:
            return Response(
                orjson.dumps({"status": "ready", "checks": outcomes}),
                media_type="application/json",
            )
        body = problem_body(
            request,
            503,
            "not_ready",
            "Not ready",
            f"Not answering: {', '.join(failed)}.",
            members={"checks": outcomes},
        )
        return problem_response(503, body, {"Retry-After": str(RETRY_AFTER_SECONDS)})


async def _postgresql(database: Database) -> str:
    try:
        await database.ping()
    except Unavailable as exc:
        return exc.code
    return "ok"


async def _redis(redis: RedisLimiter) -> str:
    try:
        await redis.ping()
    except RateLimiterUnavailable:
        return "unavailable"
    return "ok"
