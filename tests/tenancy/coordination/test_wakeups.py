"""Wakeups: a tenant's transaction may announce deliveries for its own schema and nothing more,
and workers claim them one at a time, for a lease."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from sqlalchemy import delete, select, text

from dealbase.db.database import Database
from dealbase.tenancy.control_tables import webhook_wakeups
from dealbase.tenancy.coordination import wakeups
from tests.support import TenantWorld

LEASE = timedelta(minutes=1)


def rows_of(database: Database, schema: str) -> list[tuple[datetime, uuid.UUID | None]]:
    with database.control() as connection:
        found = connection.execute(
            select(webhook_wakeups.c.due_at, webhook_wakeups.c.claimed_by)
            .where(webhook_wakeups.c.schema_name == schema)
            .order_by(webhook_wakeups.c.due_at)
        )
        return [(row.due_at, row.claimed_by) for row in found]


def wake(database: Database, world: TenantWorld) -> str:
    """Wakes the worker for ``world``'s schema in a unit of work of the tenant's; the schema."""
    with database.unit_of_work(world.tenant.scope) as uow:
        uow.connection.execute(wakeups.WAKEUP)
    return world.tenant.schema


def test_a_unit_of_work_wakes_the_worker_for_its_own_schema_once_it_commits(
    database: Database, world: TenantWorld
) -> None:
    schema = world.tenant.schema

    def wake_and_fail() -> None:
        with database.unit_of_work(world.tenant.scope) as uow:
            uow.connection.execute(wakeups.WAKEUP)
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        wake_and_fail()
    assert rows_of(database, schema) == []

    wake(database, world)

    [(due_at, claimed_by)] = rows_of(database, schema)
    assert claimed_by is None and due_at <= datetime.now(UTC)


@pytest.mark.parametrize(
    "statement",
    [
        # another tenant's schema: row security refuses the row
        "INSERT INTO control.webhook_wakeups (schema_name) VALUES ('{other}')",
        # a time of its own choosing, or a claim: no privilege on those columns
        "INSERT INTO control.webhook_wakeups (schema_name, due_at) VALUES (current_user, now())",
        "INSERT INTO control.webhook_wakeups (schema_name, claimed_by)"
        " VALUES (current_user, gen_random_uuid())",
        "SELECT count(*) FROM control.webhook_wakeups",
        "UPDATE control.webhook_wakeups SET due_at = now()",
        "DELETE FROM control.webhook_wakeups",
        "SELECT count(*) FROM control.worker_tasks",
        "SELECT count(*) FROM control.tenants",
    ],
)
def test_a_tenant_role_may_add_its_own_wakeup_and_do_nothing_else_in_control(
    database: Database, make_tenant: Callable[[], TenantWorld], statement: str
) -> None:
    mine, theirs = make_tenant(), make_tenant()
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege),
        database.unit_of_work(mine.tenant.scope) as uow,
    ):
        uow.connection.execute(text(statement.format(other=theirs.tenant.schema)))


def test_a_claimed_wakeup_is_no_other_workers_until_its_lease_lapses(
    database: Database, world: TenantWorld
) -> None:
    wake(database, world)
    schema = wake(database, world)
    first, second = uuid.uuid4(), uuid.uuid4()
    now = datetime.now(UTC)

    with database.control() as connection:
        assert schema in wakeups.claim(connection, first, now, LEASE, 1000)
    with database.control() as connection:
        assert schema not in wakeups.claim(connection, second, now, LEASE, 1000)
    # Both of the schema's wakeups went with the one claim.
    assert [claimed_by for _, claimed_by in rows_of(database, schema)] == [first, first]
    with database.control() as connection:
        later = now + LEASE + timedelta(seconds=1)
        assert schema in wakeups.claim(connection, second, later, LEASE, 1000)


def test_ending_a_visit_deletes_its_claim_and_schedules_the_next_retry_once(
    database: Database, world: TenantWorld
) -> None:
    schema = wake(database, world)
    worker, now = uuid.uuid4(), datetime.now(UTC)
    retry = now + timedelta(minutes=5)
    with database.control() as connection:
        wakeups.claim(connection, worker, now, LEASE, 1000)
        wakeups.end_visit(connection, worker, schema, retry)
    assert rows_of(database, schema) == [(retry, None)]

    # A later visit that finds the same retry due (or a later one) adds nothing.
    with database.control() as connection:
        wakeups.end_visit(connection, worker, schema, retry + timedelta(minutes=1))
    assert rows_of(database, schema) == [(retry, None)]
    # An earlier one is added: the later row only makes one more visit.
    sooner = now + timedelta(minutes=1)
    with database.control() as connection:
        wakeups.end_visit(connection, worker, schema, sooner)
        wakeups.end_visit(connection, worker, schema, None)
    assert rows_of(database, schema) == [(sooner, None), (retry, None)]

    with database.control() as connection:
        connection.execute(delete(webhook_wakeups).where(webhook_wakeups.c.schema_name == schema))
