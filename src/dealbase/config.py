"""Settings, read once from the environment (prefix ``DEALBASE_``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import Field, FilePath, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# A browser's Origin: a scheme, a host and perhaps a port; no path.
_ORIGIN = re.compile(
    r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?|https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?"
)


# How many tenant schemas a pooled connection works in before it is replaced, by default
# (``Settings.tenants_per_connection``).
TENANTS_PER_CONNECTION = 250
TENANTS_PER_CONNECTION_ON_A_CLUSTER = 16


def cors_origins_of(value: str) -> list[str]:
    """``DEALBASE_CORS_ORIGINS`` as a list (empty: CORS off)."""
    return [origin.strip() for origin in value.split(",") if origin.strip()]


_REDIS_URL_SCHEMES = ("redis", "rediss", "unix")


def check_redis_url(url: str) -> None:
    """Raises ValueError, naming the problem, for a URL the rate limiter (``RedisLimiter``)
    cannot connect with: redis://[[user]:password@]host[:port][/db], rediss:// (TLS, the
    system's trusted certificates), unix://[[user]:password@]/path[?db=N].

    The URL's query may name the database and nothing else: redis-py would take any of its
    connection options from there (``ssl_cert_reqs=none`` among them), which RedisLimiter sets
    itself."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if parts.scheme not in _REDIS_URL_SCHEMES:
        raise ValueError("Redis URL: the scheme must be redis://, rediss:// or unix://")
    if set(query) - {"db"}:
        raise ValueError(f"Redis URL: unsupported parameters {sorted(set(query) - {'db'})}")
    path_db = [parts.path.strip("/")] if parts.scheme != "unix" and parts.path.strip("/") else []
    db = query.get("db", path_db or ["0"])[-1]
    if not db.isdigit():
        raise ValueError(f"Redis URL: the database must be a number, not {db!r}")
    if parts.username and parts.password is None:
        raise ValueError("Redis URL: a user name without a password")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DEALBASE_", extra="ignore", frozen=True)

    database_url: str | None = Field(
        default=None,
        description="postgresql:// URL; unset starts an embedded PostgreSQL under data_dir.",
    )
    database_listen_url: str | None = Field(
        default=None,
        description=(
            "A direct (not pgbouncer transaction-mode) URL for LISTEN, which key revocation"
            " relies on; unset: database_url."
        ),
    )
    data_dir: Path = Field(
        default=Path(".dealbase"), description="Embedded PostgreSQL and demo files."
    )
    redis_url: str | None = Field(default=None, description="redis:// URL; optional.")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    metrics_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description=(
            "Serve GET /metrics on this port of DEALBASE_HOST (from the serving process), and not"
            " on the API's port; unset: on the API's port."
        ),
    )
    shutdown_timeout_seconds: int = Field(
        default=30,
        ge=1,
        le=600,
        description=(
            "On SIGTERM, how long requests in progress may take to finish before they are"
            " cancelled and the server stops."
        ),
    )
    body_timeout_seconds: int = Field(
        default=60,
        ge=1,
        le=3600,
        description=(
            "How long a request's body may take to arrive, from the end of its headers, before"
            " the request is answered 408 and its connection closed."
        ),
    )
    write_timeout_seconds: int = Field(
        default=30,
        ge=1,
        le=3600,
        description=(
            "How long the server may be unable to write to a client (its socket full: the"
            " client does not read) before it closes the connection: a live subscriber's, and"
            " any other (the kernel's TCP_USER_TIMEOUT)."
        ),
    )
    route_shortcuts: bool = Field(
        default=True,
        description=(
            "Find a request's route by a lookup (edge/route_index.py) and call a REST route"
            " straight from the request edge, past Starlette's exception layer, FastAPI's exit"
            " stack and the router's scan; off, every request goes through them as FastAPI"
            " routes it."
        ),
    )
    freeze_startup_objects: bool = Field(
        default=False,
        description=(
            "Once the app has started, move every object it holds into the garbage collector's"
            " permanent generation, so that a full collection scans only what came after"
            " (`dealbase serve` turns it on for its workers)."
        ),
    )
    gc_young_threshold: int | None = Field(
        default=None,
        ge=100,
        le=1_000_000,
        description=(
            "Once the app has started, how many more objects than were freed its process may"
            " allocate before the garbage collector's youngest generation is collected (Python's"
            " first threshold, 700 when unset; `dealbase serve` sets 10,000 for its workers:"
            " docs/operations.md says why)."
        ),
    )
    log_format: Literal["console", "json"] = "console"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    db_pool_size: int = Field(default=10, ge=1, le=200)
    # No overflow by default: on a saturated database host, more connections than the pool's
    # cost every request more of PostgreSQL's CPU (bench/README.md), and the pool's queue hands
    # a returned connection to the longest waiter at once.
    db_max_overflow: int = Field(default=0, ge=0, le=200)
    db_tenants_per_connection: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description=(
            "A pooled connection is replaced once it has worked in this many tenant schemas:"
            " PostgreSQL keeps the catalog entries of every relation a backend touched, so this"
            " bounds each backend's memory however many tenants there"
            " are; on a Citus cluster it also bounds the connections each coordinator session"
            " keeps to a worker, one for every tenant role it worked as. 250 by default, 16 with"
            " CITUS_SCHEMA_SHARDING (docs/scaling.md)."
        ),
    )
    db_pgbouncer: bool = Field(
        default=False,
        description=(
            "DATABASE_URL goes through pgbouncer in transaction mode: no prepared statements,"
            " and no startup options (pgbouncer refuses them; its connect_query sets the time"
            " limits then)."
        ),
    )
    db_prepared_statements: bool = Field(
        default=True,
        description=(
            "Prepare statements run often on a connection; turn off behind a pgbouncer in"
            " transaction mode that does not track them (before 1.21, or"
            " max_prepared_statements = 0)."
        ),
    )
    db_statement_timeout_ms: int = Field(
        default=15_000,
        ge=0,
        le=3_600_000,
        description="A statement of a request running longer is cancelled (503); 0: no limit.",
    )
    db_lock_timeout_ms: int = Field(
        default=3_000,
        ge=0,
        le=3_600_000,
        description="A statement waiting longer for a row or table lock fails (503); 0: no limit.",
    )
    db_acquire_timeout_ms: int = Field(
        default=3_000,
        ge=100,
        le=60_000,
        description=(
            "How long a request waits for a database connection (the pool's, or PostgreSQL to"
            " accept a new one) before it is answered 503."
        ),
    )
    migrate_concurrency: int = Field(default=4, ge=1, le=64)
    spare_tenant_schemas: int = Field(
        default=10,
        ge=0,
        le=1000,
        description=(
            "Tenant schemas the workers keep made ahead of time, so that creating a tenant"
            " runs no DDL; 0: every tenant's schema is made when the tenant is created."
        ),
    )
    citus_schema_sharding: bool = Field(
        default=False,
        description=(
            "Create each tenant schema with citus.enable_schema_based_sharding on: on a Citus"
            " cluster, a distributed schema that lives on one node and can move (docs/scaling.md)."
        ),
    )
    citus_reads_on_workers: bool = Field(
        default=False,
        description=(
            "With CITUS_SCHEMA_SHARDING: serve each single-statement read on a connection to the"
            " worker that holds the tenant's schema, as pg_dist_node names it (DATABASE_URL with"
            " that node's host and port), not through the coordinator; writes stay on the"
            " coordinator. The servers must reach the workers there. Not behind DB_PGBOUNCER."
        ),
    )
    rate_limit_key: str = Field(
        default="10/s", description="Default rate per API key, as N/s (a key may have its own)."
    )
    rate_limit_key_burst: int = Field(default=20, ge=1, le=1_000_000)
    rate_limit_tenant: str = Field(default="100/s", description="Rate per tenant, all keys.")
    rate_limit_tenant_burst: int = Field(default=200, ge=1, le=1_000_000)
    rate_limit_auth_failures: str = Field(
        default="1/s",
        description=(
            "Failed authentications (401) a client address may make, as N/s; past its burst"
            " the address is refused 429 until it has room again, with a good key too."
        ),
    )
    rate_limit_auth_failures_burst: int = Field(default=10, ge=1, le=1_000_000)
    rate_limit_fail: Literal["open", "closed"] = Field(
        default="open",
        description="When Redis does not answer: serve the request (open) or refuse it, 503.",
    )
    redis_timeout_ms: int = Field(default=50, ge=1, le=10_000)
    graphql_introspection: bool = Field(default=True, description="Schema introspection on.")
    graphql_ide: bool = Field(default=True, description="The GraphiQL page at GET /graphql.")
    graphql_max_depth: int = Field(default=10, ge=2, le=50)
    graphql_max_aliases: int = Field(default=15, ge=0, le=1000)
    graphql_max_tokens: int = Field(default=2000, ge=100, le=100_000)
    graphql_max_cost: int = Field(
        default=50_000, ge=100, description="Budget of the estimated cost of one query."
    )
    graphql_compiled_reads: bool = Field(
        default=True,
        description=(
            "Query root fields that read customers, deals and activities answered by one SQL"
            " statement each, its JSON built by PostgreSQL; false: every field through the"
            " resolvers."
        ),
    )
    graphql_document_cache_size: int = Field(
        default=100,
        ge=0,
        le=100_000,
        description=(
            "GraphQL documents each worker keeps parsed, validated and costed, the least"
            " recently used dropped first; 0 reads every document anew."
        ),
    )
    live_connections_per_key: int = Field(
        default=20,
        ge=1,
        le=100_000,
        description=(
            "Live connections (WebSockets and event streams of subscriptions) one API key may"
            " hold to each server process; one more is refused."
        ),
    )
    live_subscriptions_per_connection: int = Field(
        default=20,
        ge=1,
        le=1000,
        description="Subscriptions one WebSocket may run at once; one more is refused.",
    )
    live_init_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        le=300,
        description="How long a WebSocket may take to send connection_init before it is closed.",
    )
    live_unintroduced_per_address: int = Field(
        default=16,
        ge=1,
        le=100_000,
        description=(
            "WebSockets one client address may hold to each server process before their"
            " connection_init; one more is refused (429)."
        ),
    )
    live_unintroduced_per_process: int = Field(
        default=256,
        ge=1,
        le=1_000_000,
        description=(
            "WebSockets each server process holds before their connection_init, from every"
            " address; one more is refused (429)."
        ),
    )
    live_idle_timeout_seconds: float = Field(
        default=300.0,
        gt=0,
        le=86_400,
        description="How long a WebSocket may stay without a subscription before it is closed.",
    )
    live_keepalive_seconds: float = Field(
        default=15.0,
        gt=0,
        le=300,
        description=(
            "How often a live connection is pinged (a WebSocket's ping, a stream's comment line);"
            " a WebSocket that leaves a ping unanswered as long is closed."
        ),
    )
    live_buffer_events: int = Field(
        default=1000,
        ge=1,
        le=1_000_000,
        description=(
            "Events that may wait for one subscription; past it the client reads too slowly and"
            " its connection is closed (it resumes from its last cursor)."
        ),
    )
    live_poll_seconds: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description=(
            "How often each subscribed department is read even without a notification: writes"
            " no server announced (the CLI's), notices lost with the LISTEN connection."
        ),
    )
    cors_origins: str = Field(
        default="",
        description=(
            "Origins (scheme://host[:port], comma-separated, or *) whose pages may call the API"
            " from a browser (CORS); empty: none, and no CORS headers are sent."
        ),
    )
    webhooks_ca_bundle: FilePath | None = Field(
        default=None,
        description=(
            "A PEM file of certificate authorities the webhook worker trusts besides the"
            " public ones (a receiver whose certificate a private CA signed)."
        ),
    )
    webhooks_allow_private: bool = Field(
        default=False,
        description=(
            "Webhook endpoints may use http and addresses that are not public (loopback,"
            " private, link-local): for development and tests only."
        ),
    )

    def tenants_per_connection(self) -> int:
        """``db_tenants_per_connection``, or its default: lower on a Citus cluster, where a
        coordinator session opens its connections to a worker as the statement's role, the
        tenant's, and keeps one for each role it has worked as (``citus.max_cached_conns_per_worker``
        is per role): a pooled connection's tenants are then worker connections held."""
        if self.db_tenants_per_connection is not None:
            return self.db_tenants_per_connection
        if self.citus_schema_sharding:
            return TENANTS_PER_CONNECTION_ON_A_CLUSTER
        return TENANTS_PER_CONNECTION

    @field_validator("database_url", "database_listen_url")
    @classmethod
    def _postgres_only(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
            raise ValueError("must be a postgresql:// URL")
        return value

    @field_validator("citus_reads_on_workers")
    @classmethod
    def _reads_on_workers(cls, value: bool, info: ValidationInfo) -> bool:
        # Refused rather than ignored: an operator who turns it on expects it to work.
        if value and not info.data.get("citus_schema_sharding"):
            raise ValueError("needs DEALBASE_CITUS_SCHEMA_SHARDING=true")
        if value and info.data.get("db_pgbouncer"):
            # The reads would connect to the workers directly, without the time limits that
            # pgbouncer's connect_query sets (no startup options) and past the pooler.
            raise ValueError("does not go with DEALBASE_DB_PGBOUNCER=true")
        return value

    @field_validator("rate_limit_key", "rate_limit_tenant", "rate_limit_auth_failures")
    @classmethod
    def _rate(cls, value: str) -> str:
        parse_rate(value)
        return value

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: str) -> str:
        for origin in cors_origins_of(value):
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ValueError(f"{origin!r} is not an origin (scheme://host[:port], or *)")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_only(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        # Checked here, with the rules the limiter checks its URL by, so a URL it cannot use
        # stops the service with the setting's name rather than a traceback from each worker.
        check_redis_url(value)
        return value


class SettingsError(Exception):
    """Settings that cannot start the service; the message names the setting in one line."""


def load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = "DEALBASE_" + "_".join(str(part) for part in first["loc"]).upper()
        raise SettingsError(f"invalid setting {name}: {first['msg']}") from None


def parse_rate(text: str) -> float:
    """Requests a second from ``N/s`` (or a bare number), for settings and the CLI."""
    number = text.strip().removesuffix("/s")
    try:
        rate = float(number)
    except ValueError:
        raise ValueError("must be a rate like 10/s") from None
    if not 0 < rate <= 100_000:
        raise ValueError("must be above 0 and at most 100000/s")
    return rate
