"""A unit of work's round trips: the opening, the deferred statements and the COMMIT travel with
the statements around them; one round trip is one implicit transaction; values are bound, and
psycopg prepares what a connection runs often; the tenant's role is the transaction's (on the
event loop's pool the session's: test_sessions.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from sqlalchemy import Insert, func, insert, literal, select, text

from dealbase.db import transactions
from dealbase.db.database import PREPARE_AFTER, Database
from dealbase.db.sessions import SWITCH_TO_ROLE
from dealbase.db.transactions import Deferred, TenantConnection
from dealbase.db.units import UnitOfWork
from dealbase.ids import new_id
from dealbase.platform.tables import customers, departments
from dealbase.tenancy.scope import tenant_role
from tests.support import TenantWorld, row_count


@contextmanager
def round_trips_sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[str]]]:
    """The round trips units of work send meanwhile: the SQL of each statement of each."""
    sent: list[list[str]] = []
    alone, on_the_loop = transactions._round_trip, transactions._round_trip_async

    def counted(connection: Any, calls: list[Any]) -> Any:
        sent.append([call.sql.decode() for call in calls])
        return alone(connection, calls)

    async def counted_on_the_loop(connection: Any, calls: list[Any]) -> Any:
        sent.append([call.sql.decode() for call in calls])
        return await on_the_loop(connection, calls)

    with monkeypatch.context() as patched:
        patched.setattr(transactions, "_round_trip", counted)
        patched.setattr(transactions, "_round_trip_async", counted_on_the_loop)
        yield sent


def _insert_customer(last_name: str, department_id: uuid.UUID) -> tuple[Insert, dict[str, object]]:
    statement = insert(customers).values(created_at=func.now(), updated_at=func.now())
    return statement, {"id": new_id(), "department_id": department_id, "last_name": last_name}


def _defer_lovelace(connection: TenantConnection, world: TenantWorld) -> Deferred:
    """A new customer's insert deferred on ``connection``, returning her last name."""
    statement, values = _insert_customer("Lovelace", world.department.id)
    return connection.defer(statement.returning(customers.c.last_name), values)


def _insert_again_after_another(
    database: Database, world: TenantWorld, written: tuple[Insert, dict[str, object]]
) -> None:
    """One unit of work that inserts a new customer, then the customer ``written`` again."""
    with database.unit_of_work(world.tenant.scope) as uow:
        uow.connection.defer(*_insert_customer("Hopper", world.department.id))
        uow.connection.defer(*written)


def test_a_deferred_statement_goes_before_the_next_statement_in_its_round_trip(
    database: Database, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    with round_trips_sent(monkeypatch) as sent, database.unit_of_work(world.tenant.scope) as uow:
        deferred = _defer_lovelace(uow.connection, world)
        seen = uow.connection.execute(select(func.count()).select_from(customers)).scalar_one()
        assert deferred.rows().all() == [("Lovelace",)]
        assert len(sent) == 1

    assert seen == 1
    [(begin, switch, inserted, counted), commit] = sent
    assert (begin, switch, commit) == ("BEGIN", SWITCH_TO_ROLE, ["COMMIT"])
    assert inserted.startswith("INSERT") and counted.startswith("SELECT count")


def test_reading_a_deferred_statement_before_anything_else_ran_sends_it_with_the_opening(
    database: Database, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    with round_trips_sent(monkeypatch) as sent, database.unit_of_work(world.tenant.scope) as uow:
        deferred = _defer_lovelace(uow.connection, world)
        assert sent == []
        assert deferred.rows().all() == [("Lovelace",)]
        assert [trip[:2] for trip in sent] == [["BEGIN", SWITCH_TO_ROLE]]

    assert row_count(database, world.tenant.scope, customers) == 1


def test_discarding_forgets_only_what_was_deferred_after_the_mark_and_has_not_gone(
    database: Database, world: TenantWorld
) -> None:
    with database.unit_of_work(world.tenant.scope) as uow:
        connection = uow.connection
        connection.defer(*_insert_customer("Kept before", world.department.id))
        mark = connection.deferred_count
        connection.execute(text("SAVEPOINT operation"))  # the first one goes with it
        connection.defer(*_insert_customer("Sent, then rolled back", world.department.id))
        connection.execute(select(literal(1)))
        connection.defer(*_insert_customer("Never sent", world.department.id))
        connection.discard_deferred_after(mark)
        connection.execute(text("ROLLBACK TO SAVEPOINT operation"))
        connection.defer(*_insert_customer("Kept after", world.department.id))

    with database.unit_of_work(world.tenant.scope) as uow:
        names = [
            name
            for (name,) in uow.connection.execute(
                select(customers.c.last_name).order_by(customers.c.last_name)
            )
        ]
    assert names == ["Kept after", "Kept before"]


def test_a_unit_of_work_in_one_round_trip_is_an_implicit_transaction_as_the_tenants_role(
    database: Database, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No BEGIN and COMMIT when the whole transaction is one round trip: its statements still
    run as the tenant's role and commit or fail together."""
    statement, values = _insert_customer("Lovelace", world.department.id)
    with round_trips_sent(monkeypatch) as sent, database.unit_of_work(world.tenant.scope) as uow:
        uow.connection.defer(statement, values)
        role = uow.connection.defer(select(func.current_user()), {})

    [trip] = sent
    assert trip[0] == SWITCH_TO_ROLE and "BEGIN" not in trip and "COMMIT" not in trip
    assert role.rows().scalar_one() == tenant_role(world.tenant.schema)
    assert row_count(database, world.tenant.scope, customers) == 1

    # Two statements in one round trip, the second refused: neither is written.
    with pytest.raises(psycopg.errors.UniqueViolation):
        _insert_again_after_another(database, world, (statement, values))
    assert row_count(database, world.tenant.scope, customers) == 1


def test_a_statement_that_commits_with_it_is_the_unit_of_works_last(
    database: Database, world: TenantWorld
) -> None:
    statement, values = _insert_customer("Lovelace", world.department.id)
    with database.unit_of_work(world.tenant.scope) as uow:
        uow.connection.commit_with_next()
        uow.connection.execute(statement, values)
        # Committed with it: another transaction sees the row at once.
        assert row_count(database, world.tenant.scope, customers) == 1
        with pytest.raises(RuntimeError, match="no statement may follow"):
            uow.connection.execute(select(func.count()).select_from(customers))


def test_many_parameter_sets_return_their_rows_in_the_order_given(
    database: Database, world: TenantWorld
) -> None:
    # Ids in descending order, so an order by id (or by insertion in the heap) would show.
    ids = sorted((new_id() for _ in range(20)), reverse=True)
    rows = [
        {"id": row_id, "department_id": world.department.id, "last_name": f"Customer {n}"}
        for n, row_id in enumerate(ids)
    ]
    statement = (
        insert(customers)
        .values(created_at=func.now(), updated_at=func.now())
        .returning(customers.c.id, customers.c.last_name)
    )
    with database.unit_of_work(world.tenant.scope) as uow:
        returned = uow.connection.execute(statement, rows).mappings().all()

    assert [row["id"] for row in returned] == ids
    assert [row["last_name"] for row in returned] == [f"Customer {n}" for n in range(20)]


def _prepared_on_server(uow: UnitOfWork) -> list[str]:
    """The statements the unit of work's connection has prepared, read on the driver's
    connection (through the unit of work the query would be a statement run, and counted)."""
    connection = uow.connection._connection
    assert isinstance(connection, psycopg.Connection), "a unit of work of the synchronous pool"
    cursor = connection.execute("SELECT statement FROM pg_prepared_statements")
    return [statement for (statement,) in cursor.fetchall()]


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "off for pgbouncer"])
def test_a_statement_a_connection_runs_often_is_prepared_there_unless_turned_off(
    database_url: str, world: TenantWorld, prepared: bool
) -> None:
    own = Database(database_url, pool_size=1, max_overflow=0, prepared_statements=prepared)
    names = select(departments.c.name).where(departments.c.id == world.department.id)
    try:
        found, on_server = [], []
        for _ in range(PREPARE_AFTER + 1):
            with own.unit_of_work(world.tenant.scope) as uow:
                found.append(uow.connection.execute(names).scalar_one())
                on_server = _prepared_on_server(uow)
    finally:
        own.dispose()

    assert found == [world.department.name] * (PREPARE_AFTER + 1)
    assert any("departments" in statement for statement in on_server) is prepared


def test_a_transactions_role_ends_with_it_on_the_synchronous_pool(
    database_url: str, world: TenantWorld
) -> None:
    own = Database(database_url, pool_size=1, max_overflow=0)
    try:
        with own.unit_of_work(world.tenant.scope) as uow:
            during = uow.connection.execute(select(func.current_user())).scalar_one()
        with own.pool.connection() as connection:  # the one connection, as the pool has it
            after = connection.execute("SELECT current_user").fetchone()
    finally:
        own.dispose()

    assert during == tenant_role(world.tenant.schema)
    assert after is not None and after[0] != during


def test_without_pipelines_each_statement_is_an_exchange_of_its_own_in_one_transaction(
    database: Database, database_url: str, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As behind pgbouncer: no pipeline, so a unit of work of one round trip opens and commits
    its transaction itself, and its statements still commit or fail together."""
    own = Database(database_url, pool_size=1, max_overflow=0, pipelines=False)
    statement, values = _insert_customer("Lovelace", world.department.id)
    try:
        with round_trips_sent(monkeypatch) as sent, own.unit_of_work(world.tenant.scope) as uow:
            uow.connection.defer(statement, values)
            role = uow.connection.defer(select(func.current_user()), {})
        with pytest.raises(psycopg.errors.UniqueViolation):
            _insert_again_after_another(own, world, (statement, values))
    finally:
        own.dispose()

    assert [len(trip) for trip in sent] == [1] * 5
    assert [trip[0] for trip in sent][:2] == ["BEGIN", SWITCH_TO_ROLE]
    assert sent[-1] == ["COMMIT"]
    assert role.rows().scalar_one() == tenant_role(world.tenant.schema)
    assert row_count(database, world.tenant.scope, customers) == 1
