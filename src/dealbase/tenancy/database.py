"""The connection pool and the units of work that bind a transaction to one tenant."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from psycopg_pool import ConnectionPool
from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.engine import make_url

from dealbase.tenancy.scope import Scope
from dealbase.tenancy.statements import StatementCache, StatementListener, TenantConnection

# psycopg prepares a statement on a connection once it has run it this many times (its default).
PREPARE_AFTER = 5


def application_name(pid: int) -> str:
    return f"dealbase pid={pid}"


def libpq_url(database_url: str) -> str:
    """The URL as libpq (psycopg.connect) takes it: without SQLAlchemy's ``+driver`` part."""
    url = make_url(database_url)
    return url.set(drivername=url.drivername.split("+")[0]).render_as_string(hide_password=False)


def sqlalchemy_url(database_url: str) -> str:
    """The same URL, with the psycopg 3 driver named so SQLAlchemy does not pick psycopg2."""
    url = make_url(database_url)
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)


@dataclass(frozen=True, slots=True)
class UnitOfWork:
    """One transaction in one tenant's schema, opened and committed at the edge, not in services."""

    connection: TenantConnection
    scope: Scope

    def narrowed_to(self, scope: Scope) -> UnitOfWork:
        """The same transaction for a narrower Scope of the same tenant (one department)."""
        if scope.schema != self.scope.schema:
            raise ValueError("a unit of work never changes tenant")
        return replace(self, scope=scope)


class Database:
    """Units of work (tenant data) on a psycopg pool; the control schema through SQLAlchemy.

    ``prepared_statements=False`` keeps psycopg from preparing statements on the server, which a
    pgbouncer in transaction mode cannot keep (the next transaction may land on another server
    connection).
    """

    def __init__(
        self,
        database_url: str,
        *,
        pool_size: int = 10,
        max_overflow: int = 10,
        prepared_statements: bool = True,
    ) -> None:
        self.url = database_url
        # Operators (and tests) see in pg_stat_activity which process holds a connection.
        connection_settings: dict[str, object] = {
            "application_name": application_name(os.getpid()),
            "prepare_threshold": PREPARE_AFTER if prepared_statements else None,
        }
        self.engine: Engine = create_engine(
            sqlalchemy_url(database_url),
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_recycle=1800,
            connect_args=connection_settings,
        )
        self.pool: ConnectionPool = ConnectionPool(
            libpq_url(database_url),
            min_size=0,  # no connection before the first unit of work (the CLI may need none)
            max_size=pool_size + max_overflow,
            max_lifetime=1800,
            kwargs=connection_settings,
            name="units-of-work",
            open=True,
        )
        self.statements = StatementCache(self.engine.dialect)
        # Called with the SQL of every statement a unit of work runs (tests count them).
        self.statement_listeners: list[StatementListener] = []

    @contextmanager
    def unit_of_work(self, scope: Scope) -> Iterator[UnitOfWork]:
        """A transaction whose SQL lands in ``scope.schema``; commits on success, else rolls back.

        The schema is written into each statement's text, so the pooled connection (or a
        pgbouncer server connection in transaction mode) carries no tenant state to its next user.
        """
        with self.pool.connection() as connection:
            statements = TenantConnection(
                connection, scope.schema, self.statements, self.statement_listeners
            )
            yield UnitOfWork(statements, scope)

    @contextmanager
    def control(self) -> Iterator[Connection]:
        """A transaction on the control schema (tenants, keys)."""
        with self.engine.begin() as connection:
            yield connection

    def dispose(self) -> None:
        self.pool.close()
        self.engine.dispose()
