"""``create_app(settings)``: the ASGI app, REST and GraphQL over one service layer."""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import psycopg
import structlog
from anyio import to_thread
from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from dealbase.config import Settings, cors_origins_of, load_settings, parse_rate
from dealbase.db.database import Database, DatabaseLimits
from dealbase.db.notifications import Notifications
from dealbase.db.proxy import through_a_proxy
from dealbase.edge.cors import (
    CORS_MAX_AGE_SECONDS,
    CORS_METHODS,
    CORS_REQUEST_HEADERS,
    CORS_RESPONSE_HEADERS,
    ProblemPreflights,
)
from dealbase.edge.draining import PROCESS_DRAINING
from dealbase.edge.request_edge import RequestEdge
from dealbase.edge.route_index import RouteIndex
from dealbase.graphql_api.api import install_graphql_api
from dealbase.graphql_api.live import install_live
from dealbase.graphql_api.live.service import LiveLimits, LiveService
from dealbase.graphql_api.schema import build_schema
from dealbase.ops.embedded_postgres import embedded_database_url
from dealbase.ops.health import install_health
from dealbase.ops.live_metrics import LiveMetrics
from dealbase.ops.metrics import Metrics, install_metrics, worker_stopped
from dealbase.ops.observability import configure_logging, log_request
from dealbase.ops.web_pages.pages import graphiql_page, install_web_pages, shipped_assets
from dealbase.platform.webhooks.addresses import AddressPolicy
from dealbase.rest_api.api import install_rest_api
from dealbase.tenancy.callers.authentication import Authenticator, KeyCache, KeyChangeListener
from dealbase.tenancy.callers.key_usage import KeyUseRecorder
from dealbase.tenancy.rate_limits.admission import Admission, LimiterFaults
from dealbase.tenancy.rate_limits.failure_allowance import FailureAllowance
from dealbase.tenancy.rate_limits.in_process import InProcessLimiter
from dealbase.tenancy.rate_limits.limiter import RedisLimiter
from dealbase.tenancy.rate_limits.local_admissions import LocalAdmissions
from dealbase.tenancy.scope import Rate

DESCRIPTION = """\
The dealbase integration API: customers and deals of one department, authenticated with
`X-Api-Key` and `X-Department-Id`. Errors are `application/problem+json` (RFC 9457) with a
stable `code`; see docs/api.md.
"""


log = structlog.get_logger(__name__)


def _warn_of_a_proxy(database_url: str) -> None:
    """Says at start-up what would otherwise show only as failing requests: the database is
    reached through a proxy (pgbouncer?) the settings do not mention."""
    try:
        proxied = through_a_proxy(database_url)
    except psycopg.Error:
        return  # the pool, which opened, reports what fails
    if proxied:
        log.warning(
            "database_through_a_proxy",
            detail="PostgreSQL sees this service's connections come from another address: if"
            " it is pgbouncer in transaction mode, set DEALBASE_DB_PGBOUNCER=true, or requests"
            " will fail (docs/operations.md).",
        )


def create_app(
    settings: Settings | None = None, *, clock: Callable[[], float] = time.monotonic
) -> FastAPI:
    """The app. ``clock`` is the monotonic clock, in seconds, of the rate limits the process
    keeps itself (the in-process limiter and the failed-authentication allowance) and of how
    long a tenant's placement on a Citus worker is believed (``CITUS_READS_ON_WORKERS``): tests
    move it instead of waiting. The Redis limiter keeps Redis's clock."""
    settings = settings or load_settings()
    configure_logging(settings.log_format, settings.log_level)
    database_url = settings.database_url or embedded_database_url(settings.data_dir)
    database = Database(
        database_url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        prepared_statements=settings.db_prepared_statements and not settings.db_pgbouncer,
        startup_options=not settings.db_pgbouncer,
        distributed_schemas=settings.citus_schema_sharding,
        reads_on_workers=settings.citus_reads_on_workers,
        clock=clock,
        limits=DatabaseLimits(
            statement_timeout_ms=settings.db_statement_timeout_ms,
            lock_timeout_ms=settings.db_lock_timeout_ms,
            acquire_timeout_seconds=settings.db_acquire_timeout_ms / 1000,
        ),
        tenants_per_connection=settings.tenants_per_connection(),
        tenant_affinity=not settings.db_pgbouncer,
        sessions=not settings.db_pgbouncer,
        pipelines=not settings.db_pgbouncer,
    )
    key_cache = KeyCache()
    limiter: RedisLimiter | InProcessLimiter = (
        RedisLimiter(settings.redis_url, timeout_seconds=settings.redis_timeout_ms / 1000)
        if settings.redis_url
        else InProcessLimiter(clock)
    )
    admitting: LocalAdmissions | InProcessLimiter = (
        LocalAdmissions(limiter) if isinstance(limiter, RedisLimiter) else limiter
    )
    # The process's one LISTEN connection: the key cache and the live hub subscribe to it.
    notifications = Notifications(settings.database_listen_url or database_url)
    key_listener = KeyChangeListener(notifications, key_cache)
    key_uses = KeyUseRecorder(database)
    metrics = Metrics()
    database.on_connection_warmth = metrics.unit_of_work_started
    limiter_faults = LimiterFaults(
        fail_closed=settings.rate_limit_fail == "closed", on_fault=metrics.rate_limiter_fault
    )
    admission = Admission(
        admitting,
        key_rate=Rate(parse_rate(settings.rate_limit_key), settings.rate_limit_key_burst),
        tenant_rate=Rate(parse_rate(settings.rate_limit_tenant), settings.rate_limit_tenant_burst),
        faults=limiter_faults,
        on_refused=metrics.rate_limit_refused,
    )
    # Subscriptions run on a schema of their own (the same types, guards and error codes): its
    # document cache holds subscription documents only.
    live = LiveService(
        database,
        build_schema(settings, metrics.graphql_operation),
        LiveLimits.of(settings),
        admission,
        LiveMetrics(metrics).reports(),
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await database.open()
        if not settings.db_pgbouncer:
            await to_thread.run_sync(_warn_of_a_proxy, database_url)
        key_listener.start()
        await live.start(notifications)
        notifications.start()
        metrics_keeper = asyncio.create_task(metrics.keep_up(database.pool_usage))
        key_use_flusher = asyncio.create_task(key_uses.flush_periodically())
        if settings.freeze_startup_objects:
            # A worker starts holding about 150,000 objects (the schema, the routes, the
            # libraries), which a full collection visits: 50 ms or more with the event loop
            # stopped, every request in flight waiting. Frozen, they are no longer visited.
            gc.collect()
            gc.freeze()
        thresholds = gc.get_threshold()
        if settings.gc_young_threshold is not None:
            # Put back when the app stops: a process that builds many apps (tests) goes on.
            gc.set_threshold(settings.gc_young_threshold, *thresholds[1:])
        # Told by the HTTP server as it starts to stop (ops.serving): streams of subscriptions
        # end at once, telling their clients to reconnect elsewhere; uvicorn closes each
        # WebSocket itself, with 1012.
        forget_live = PROCESS_DRAINING.on_begin(live.shut_down)
        try:
            yield
        finally:
            forget_live()
            metrics_keeper.cancel()
            key_use_flusher.cancel()
            # Clients are told to reconnect (to another server) and resume.
            await live.stop()
            # The uses noted since the last flush, before the pools close.
            await to_thread.run_sync(key_uses.flush)
            key_listener.stop()
            notifications.stop()
            if isinstance(admitting, LocalAdmissions):
                await admitting.close()
            await database.close()
            gc.set_threshold(*thresholds)
            worker_stopped(os.getpid())

    app = FastAPI(
        title="dealbase integration API",
        version="1.0.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        # /docs is install_web_pages': FastAPI's loads Swagger UI from a public CDN.
        docs_url=None,
        # operationIds are the route functions' names: stable, and readable in generated clients.
        generate_unique_id_function=lambda route: route.name,
        redoc_url=None,
    )
    app.state.database = database
    app.state.webhook_addresses = AddressPolicy(allow_private=settings.webhooks_allow_private)
    app.state.authenticator = Authenticator(
        database, key_cache, on_lookup=metrics.key_looked_up, on_accepted=key_uses.note
    )
    app.state.failure_allowance = FailureAllowance(
        limiter,
        rate=Rate(
            parse_rate(settings.rate_limit_auth_failures), settings.rate_limit_auth_failures_burst
        ),
        faults=limiter_faults,
        on_refused=metrics.auth_failure_refused,
        clock=clock,
    )
    app.state.admission = admission
    if settings.metrics_port is None:
        install_metrics(app, metrics)
    # The router tries its routes in order: /graphql, a single path that dashboards call all
    # day, goes before the REST routes; RouteIndex (below) finds a path without parameters
    # at once.
    web_assets = shipped_assets()
    # Before /graphql's HTTP routes: the WebSocket at the same path is this one.
    install_live(app, live)
    install_graphql_api(
        app,
        settings,
        metrics.graphql_operation,
        metrics.graphql_root_field,
        ide_page=graphiql_page(web_assets),
    )
    install_health(app, database, limiter if isinstance(limiter, RedisLimiter) else None)
    install_rest_api(app)
    install_web_pages(app, web_assets)
    origins = cors_origins_of(settings.cors_origins)
    if origins:
        # Inside the request edge: a preflight gets its request id and access line too, and
        # is answered here, before any route asks for a key it does not carry.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=CORS_METHODS,
            allow_headers=CORS_REQUEST_HEADERS,
            expose_headers=CORS_RESPONSE_HEADERS,
            max_age=CORS_MAX_AGE_SECONDS,
        )
        app.add_middleware(ProblemPreflights)
    app.add_middleware(
        RequestEdge,
        observe=metrics.request_answered,
        log=log_request,
        body_seconds=settings.body_timeout_seconds,
    )
    if settings.route_shortcuts:
        RouteIndex(app.router).install()
    return app
