"""``create_app(settings)``: the ASGI app, REST and GraphQL over one service layer."""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import psycopg
import structlog
from anyio import to_thread
from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from dealbase.config import Settings, cors_origins_of, load_settings, parse_rate
from dealbase.db.database import Database
from dealbase.db.notifications import Notifications
from dealbase.db.proxy import through_a_proxy
from dealbase.db.schema_changes import SchemaChanges
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
from dealbase.ops.embedded_postgres import database_url_of
from dealbase.ops.health import install_health
from dealbase.ops.live_metrics import LiveMetrics
from dealbase.ops.metrics import Metrics, install_metrics, worker_stopped
from dealbase.ops.observability import configure_logging, log_request
from dealbase.ops.web_pages.pages import graphiql_page, install_web_pages, shipped_assets
from dealbase.platform.custom_fields.definitions import DefinitionChangeListener
from dealbase.platform.webhooks.addresses import AddressPolicy
from dealbase.rest_api.api import install_rest_api
from dealbase.tenancy.callers.authentication import Authenticator, KeyCache, KeyChangeListener
from dealbase.tenancy.callers.key_usage import KeyUseRecorder
from dealbase.tenancy.rate_limits.admission import Admission, LimiterFaults
from dealbase.tenancy.rate_limits.failure_allowance import FailureAllowance
from dealbase.tenancy.rate_limits.in_process import InProcessLimiter
from dealbase.tenancy.rate_limits.limiter import RedisLimiter
from dealbase.tenancy.rate_limits.local_admissions import LocalAdmissions
from dealbase.tenancy.roles import TENANT_OWNER_ROLE
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
    services = _Services.of(settings, clock)
    app = FastAPI(
        title="dealbase integration API",
        version="1.0.0",
        description=DESCRIPTION,
        lifespan=services.lifespan,
        # /docs is install_web_pages': FastAPI's loads Swagger UI from a public CDN.
        docs_url=None,
        # operationIds are the route functions' names: stable, and readable in generated clients.
        generate_unique_id_function=lambda route: route.name,
        redoc_url=None,
    )
    services.hand_to_routes(app)
    _install_routes(app, services)
    _install_middleware(app, settings, services.metrics)
    if settings.route_shortcuts:
        RouteIndex(app.router).install()
    return app


@dataclass(frozen=True, slots=True)
class _RateLimits:
    # Where the counts live: Redis, shared by every server process, else this process.
    limiter: RedisLimiter | InProcessLimiter
    # What admits a request: with Redis, the local admissions in front of it.
    admitting: LocalAdmissions | InProcessLimiter
    admission: Admission
    failure_allowance: FailureAllowance

    @classmethod
    def of(cls, settings: Settings, metrics: Metrics, clock: Callable[[], float]) -> _RateLimits:
        limiter: RedisLimiter | InProcessLimiter = (
            RedisLimiter(settings.redis_url, timeout_seconds=settings.redis_timeout_ms / 1000)
            if settings.redis_url
            else InProcessLimiter(clock)
        )
        admitting: LocalAdmissions | InProcessLimiter = (
            LocalAdmissions(limiter) if isinstance(limiter, RedisLimiter) else limiter
        )
        faults = LimiterFaults(
            fail_closed=settings.rate_limit_fail == "closed", on_fault=metrics.rate_limiter_fault
        )
        admission = Admission(
            admitting,
            key_rate=Rate(parse_rate(settings.rate_limit_key), settings.rate_limit_key_burst),
            tenant_rate=Rate(
                parse_rate(settings.rate_limit_tenant), settings.rate_limit_tenant_burst
            ),
            faults=faults,
            on_refused=metrics.rate_limit_refused,
        )
        failure_allowance = FailureAllowance(
            limiter,
            rate=Rate(
                parse_rate(settings.rate_limit_auth_failures),
                settings.rate_limit_auth_failures_burst,
            ),
            faults=faults,
            on_refused=metrics.auth_failure_refused,
            clock=clock,
        )
        return cls(limiter, admitting, admission, failure_allowance)

    @property
    def redis(self) -> RedisLimiter | None:
        return self.limiter if isinstance(self.limiter, RedisLimiter) else None


@dataclass(frozen=True, slots=True)
class _Services:
    """What the app's process runs beside its routes, started and stopped by its lifespan."""

    settings: Settings
    database_url: str
    database: Database
    metrics: Metrics
    rate_limits: _RateLimits
    # The process's one LISTEN connection: the key cache and the live hub subscribe to it.
    notifications: Notifications
    key_listener: KeyChangeListener
    # Keeps each tenant's custom fields while their changes are heard.
    definitions_listener: DefinitionChangeListener
    key_uses: KeyUseRecorder
    authenticator: Authenticator
    live: LiveService
    schema_changes: SchemaChanges

    @classmethod
    def of(cls, settings: Settings, clock: Callable[[], float]) -> _Services:
        database_url = database_url_of(settings)
        database = Database.from_settings(
            settings,
            database_url,
            pool_size=settings.db_pool_size,
            max_overflow=settings.db_max_overflow,
            reads_on_workers=settings.citus_reads_on_workers,
            clock=clock,
        )
        key_cache = KeyCache()
        notifications = Notifications(settings.database_listen_url or database_url)
        key_listener = KeyChangeListener(notifications, key_cache)
        key_uses = KeyUseRecorder(database)
        metrics = Metrics()
        database.on_connection_warmth = metrics.unit_of_work_started
        rate_limits = _RateLimits.of(settings, metrics, clock)
        authenticator = Authenticator(
            database, key_cache, on_lookup=metrics.key_looked_up, on_accepted=key_uses.note
        )
        # Subscriptions run on a schema of their own (the same types, guards and error codes):
        # its document cache holds subscription documents only.
        live = LiveService(
            database,
            build_schema(settings, metrics.graphql_operation),
            LiveLimits.of(settings),
            rate_limits.admission,
            LiveMetrics(metrics).reports(),
        )
        return cls(
            settings,
            database_url,
            database,
            metrics,
            rate_limits,
            notifications,
            key_listener,
            DefinitionChangeListener(notifications),
            key_uses,
            authenticator,
            live,
            SchemaChanges(settings.database_listen_url or database_url, TENANT_OWNER_ROLE),
        )

    def hand_to_routes(self, app: FastAPI) -> None:
        """What the routes and the edge find on ``app.state``."""
        app.state.database = self.database
        app.state.schema_changes = self.schema_changes
        app.state.webhook_addresses = AddressPolicy(
            allow_private=self.settings.webhooks_allow_private
        )
        app.state.authenticator = self.authenticator
        app.state.failure_allowance = self.rate_limits.failure_allowance
        app.state.admission = self.rate_limits.admission

    @asynccontextmanager
    async def lifespan(self, _: FastAPI) -> AsyncIterator[None]:
        await self._start()
        metrics_keeper = asyncio.create_task(self.metrics.keep_up(self.database.pool_usage))
        key_use_flusher = asyncio.create_task(self.key_uses.flush_periodically())
        thresholds = _settle_the_garbage_collector(self.settings)
        # Told by the HTTP server as it starts to stop (ops.serving): streams of subscriptions
        # end at once, telling their clients to reconnect elsewhere; uvicorn closes each
        # WebSocket itself, with 1012.
        forget_live = PROCESS_DRAINING.on_begin(self.live.shut_down)
        try:
            yield
        finally:
            forget_live()
            metrics_keeper.cancel()
            key_use_flusher.cancel()
            await self._stop()
            gc.set_threshold(*thresholds)
            worker_stopped(os.getpid())

    async def _start(self) -> None:
        await self.database.open()
        if not self.settings.db_pgbouncer:
            await to_thread.run_sync(_warn_of_a_proxy, self.database_url)
        self.key_listener.start()
        self.definitions_listener.start()
        await self.live.start(self.notifications)
        self.notifications.start()

    async def _stop(self) -> None:
        # Clients are told to reconnect (to another server) and resume.
        await self.live.stop()
        # The uses noted since the last flush, before the pools close.
        await to_thread.run_sync(self.key_uses.flush)
        self.key_listener.stop()
        self.definitions_listener.stop()
        self.notifications.stop()
        if isinstance(self.rate_limits.admitting, LocalAdmissions):
            await self.rate_limits.admitting.close()
        await self.database.close()
        self.schema_changes.dispose()


def _settle_the_garbage_collector(settings: Settings) -> tuple[int, ...]:
    """Freezes what the started app holds and sets the youngest generation's threshold, as the
    settings ask; returns the thresholds to put back when the app stops."""
    if settings.freeze_startup_objects:
        # A worker starts holding the schema, the routes and the libraries, which every full
        # collection visits with the event loop stopped, every request in flight waiting.
        # Frozen, they are no longer visited.
        gc.collect()
        gc.freeze()
    thresholds = gc.get_threshold()
    if settings.gc_young_threshold is not None:
        # Put back when the app stops: a process that builds many apps (tests) goes on.
        gc.set_threshold(settings.gc_young_threshold, *thresholds[1:])
    return thresholds


def _install_routes(app: FastAPI, services: _Services) -> None:
    settings, metrics = services.settings, services.metrics
    if settings.metrics_port is None:
        install_metrics(app, metrics)
    # The router tries its routes in order: /graphql, a single path that dashboards call all
    # day, goes before the REST routes; RouteIndex (create_app) finds a path without
    # parameters at once.
    web_assets = shipped_assets()
    # Before /graphql's HTTP routes: the WebSocket at the same path is this one.
    install_live(app, services.live)
    install_graphql_api(
        app,
        settings,
        metrics.graphql_operation,
        metrics.graphql_root_field,
        ide_page=graphiql_page(web_assets),
    )
    install_health(app, services.database, services.rate_limits.redis)
    install_rest_api(app)
    install_web_pages(app, web_assets)


def _install_middleware(app: FastAPI, settings: Settings, metrics: Metrics) -> None:
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
