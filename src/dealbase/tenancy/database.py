"""The connection pool and the units of work that bind a transaction to one tenant."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, create_engine, func, select
from sqlalchemy.engine import make_url

from dealbase.tenancy.scope import TENANT_SCHEMA_PLACEHOLDER, Scope


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

    connection: Connection
    scope: Scope


class Database:
    def __init__(self, database_url: str, *, pool_size: int = 10, max_overflow: int = 10) -> None:
        self.url = database_url
        self.engine: Engine = create_engine(
            sqlalchemy_url(database_url),
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_recycle=1800,
            # Operators (and tests) see in pg_stat_activity which process holds a connection.
            connect_args={"application_name": application_name(os.getpid())},
        )

    @contextmanager
    def unit_of_work(self, scope: Scope) -> Iterator[UnitOfWork]:
        """A transaction whose SQL lands in ``scope.schema``; commits on success, else rolls back.

        The tenant routing is transaction-local on purpose: the pooled connection (or a pgbouncer
        server connection in transaction mode) carries no tenant state to its next user.
        """
        with self.engine.begin() as connection:
            connection.execution_options(
                schema_translate_map={TENANT_SCHEMA_PLACEHOLDER: scope.schema}
            )
            connection.execute(select(func.set_config("search_path", scope.schema, True)))
            yield UnitOfWork(connection, scope)

    @contextmanager
    def control(self) -> Iterator[Connection]:
        """A transaction on the control schema (tenants, keys)."""
        with self.engine.begin() as connection:
            yield connection

    def dispose(self) -> None:
        self.engine.dispose()
