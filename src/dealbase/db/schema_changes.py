"""Changes to a tenant schema's tables while the service runs (a custom field's column and
index), each on a connection of its own, straight to PostgreSQL, as the owner of tenant schemas.

Its own connection, not one of the pools': the change becomes another role for the session and
builds indexes concurrently, outside any transaction, which a transaction-pooling proxy would
not keep on one server connection; and such changes are rare. Each change of a table takes its
lock for a moment only: ``in_short_locks`` waits for the lock at most ``lock_timeout_ms`` (the
table's writers queue behind a waiting ``ALTER TABLE``), gives up, and tries again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import sqlalchemy.exc
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.pool import NullPool

from dealbase.db.database import sqlalchemy_url
from dealbase.db.faults import database_faults, fault_of
from dealbase.errors import Unavailable
from dealbase.tenancy.scope import TENANT_SCHEMA_PLACEHOLDER, checked_schema_name

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ShortLocks:
    """How long one try may wait for a table's lock, how many tries, and the pause between."""

    lock_timeout_ms: int = 200
    tries: int = 50
    pause_seconds: float = 0.2


class SchemaChanges:
    def __init__(
        self,
        database_url: str,
        owner_role: str,
        *,
        locks: ShortLocks = ShortLocks(),
        pause: Callable[[float], None] = time.sleep,
    ) -> None:
        self._engine: Engine = create_engine(sqlalchemy_url(database_url), poolclass=NullPool)
        self._owner_role = owner_role
        self._locks = locks
        self._pause = pause

    @contextmanager
    def session(self, schema: str) -> Iterator[Connection]:
        """A connection in autocommit as the owner, its tenant tables' statements mapped onto
        ``schema``; closed after."""
        mapped = {TENANT_SCHEMA_PLACEHOLDER: checked_schema_name(schema)}
        with database_faults(), self._engine.connect() as connection:
            connection = connection.execution_options(
                isolation_level="AUTOCOMMIT", schema_translate_map=mapped
            )
            connection.exec_driver_sql(f"SET ROLE {self._owner_role}")
            yield connection

    def in_short_locks(self, connection: Connection, work: Callable[[Connection], T]) -> T:
        """``work`` in one transaction whose every lock is waited for briefly: tried again
        while a table's lock is not had in time, then Unavailable."""
        # Out of autocommit for the transaction (SQLAlchemy's begin() is a formality in it);
        # the commit ends the formal one the session's statements so far began.
        connection.commit()
        connection.execution_options(isolation_level=connection.default_isolation_level)
        try:
            for attempt in range(self._locks.tries):
                if attempt:
                    self._pause(self._locks.pause_seconds)
                try:
                    with connection.begin():
                        connection.execute(
                            text("SELECT set_config('lock_timeout', :timeout, true)"),
                            {"timeout": f"{self._locks.lock_timeout_ms}ms"},
                        )
                        return work(connection)
                except sqlalchemy.exc.DBAPIError as error:
                    fault = fault_of(error.orig) if error.orig is not None else None
                    if fault is None or fault.kind != "lock_timeout":
                        raise
        finally:
            connection.execution_options(isolation_level="AUTOCOMMIT")
        raise Unavailable(
            "The table is busy with long transactions; try the change again later.",
            retry_after_seconds=5,
        )

    def dispose(self) -> None:
        self._engine.dispose()
