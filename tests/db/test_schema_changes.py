"""A schema change waits for its table's lock briefly and tries again, so that the table's
writers never queue behind it for long; it gives up, with a retryable error, after its tries."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Connection, text

from dealbase.db.database import Database
from dealbase.db.schema_changes import SchemaChanges, ShortLocks
from dealbase.errors import Unavailable
from dealbase.tenancy.roles import TENANT_OWNER_ROLE
from tests.support import TenantWorld, build_tenant


@pytest.fixture
def tenant(database: Database) -> TenantWorld:
    return build_tenant(database)


@pytest.fixture
def holder(database: Database, tenant: TenantWorld) -> Iterator[Connection]:
    """A transaction holding the lock every write of the tenant's customers takes."""
    with database.engine.connect() as connection:
        connection.execute(
            text(f"LOCK TABLE {tenant.tenant.schema}.customers IN ROW EXCLUSIVE MODE")
        )
        yield connection
        connection.rollback()


def write_lock_taken(database: Database, schema: str) -> bool:
    """Whether a writer's lock of the table is had at once (waiting at most 5 s)."""
    with database.engine.begin() as connection:
        connection.execute(text("SET LOCAL lock_timeout = '5s'"))
        connection.execute(text(f"LOCK TABLE {schema}.customers IN ROW EXCLUSIVE MODE"))
    return True


def add_column(schema: str) -> str:
    return f"ALTER TABLE {schema}.customers ADD COLUMN cf_probe text"


def test_a_change_behind_a_long_transaction_lets_writers_pass_between_its_tries(
    database: Database, database_url: str, tenant: TenantWorld, holder: Connection
) -> None:
    schema = tenant.tenant.schema
    events: list[str] = []

    def pause(_: float) -> None:
        # The change gave up its place in the lock queue: a writer goes straight through.
        events.append(f"writer {write_lock_taken(database, schema)}")
        if len(events) == 2:
            holder.rollback()
            events.append("released")

    changes = SchemaChanges(
        database_url,
        TENANT_OWNER_ROLE,
        locks=ShortLocks(50, tries=10, pause_seconds=0),
        pause=pause,
    )

    def add(connection: Connection) -> None:
        connection.exec_driver_sql(add_column(schema))
        events.append("added")

    try:
        with changes.session(schema) as connection:
            changes.in_short_locks(connection, add)
    finally:
        changes.dispose()

    assert events == ["writer True", "writer True", "released", "added"]


def test_a_change_that_never_gets_its_lock_is_unavailable_and_changes_nothing(
    database: Database, database_url: str, tenant: TenantWorld, holder: Connection
) -> None:
    schema = tenant.tenant.schema
    pauses: list[float] = []
    changes = SchemaChanges(
        database_url,
        TENANT_OWNER_ROLE,
        locks=ShortLocks(50, tries=3, pause_seconds=0.5),
        pause=pauses.append,
    )
    try:
        with changes.session(schema) as connection, pytest.raises(Unavailable):
            changes.in_short_locks(connection, lambda c: c.exec_driver_sql(add_column(schema)))
    finally:
        changes.dispose()

    assert pauses == [0.5, 0.5]
    holder.rollback()
    with database.engine.connect() as connection:
        found = connection.execute(
            text(
                "SELECT count(*) FROM information_schema.columns"
                " WHERE table_schema = :schema AND column_name = 'cf_probe'"
            ),
            {"schema": schema},
        ).scalar_one()
    assert found == 0
