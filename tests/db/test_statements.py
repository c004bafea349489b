"""Units of work run SQLAlchemy Core statements through the compiled-statement cache: each shape
compiled once, the tenant's schema written into the text, values bound by psycopg."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from sqlalchemy import (
    DateTime,
    Insert,
    Select,
    bindparam,
    func,
    insert,
    literal,
    select,
    table,
    text,
)

from dealbase.db.database import PREPARE_AFTER, Database
from dealbase.db.statements import (
    Fetched,
    ServerPrepared,
    StatementCache,
    TenantConnection,
    built_once,
)
from dealbase.db.units import UnitOfWork
from dealbase.ids import new_id
from dealbase.platform.tables import customers, departments
from dealbase.tenancy.scope import Scope, tenant_role
from tests.support import TenantWorld


def _customer_count(database: Database, scope: Scope) -> int:
    with database.unit_of_work(scope) as uow:
        count: int = uow.connection.execute(
            select(func.count()).select_from(customers)
        ).scalar_one()
        return count


def _insert_customer(last_name: str, department_id: uuid.UUID) -> tuple[Insert, dict[str, object]]:
    statement = insert(customers).values(created_at=func.now(), updated_at=func.now())
    return statement, {"id": new_id(), "department_id": department_id, "last_name": last_name}


def test_a_statement_lands_in_the_schema_of_the_unit_of_works_tenant(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    first, second = make_tenant(), make_tenant()
    statement, values = _insert_customer("Lovelace", first.department.id)
    with database.unit_of_work(first.tenant.scope) as uow:
        uow.connection.execute(statement, values)

    assert _customer_count(database, first.tenant.scope) == 1
    assert _customer_count(database, second.tenant.scope) == 0


def test_one_shape_is_compiled_once_whatever_its_values_and_tenant(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    cache = StatementCache(database.engine.dialect)
    rendered = []
    for world in (make_tenant(), make_tenant()):
        for name in ("Ada", "Grace"):
            statement = select(customers.c.id).where(customers.c.last_name == name)
            sql, values, _ = cache.render(statement, [], world.tenant.schema)
            rendered.append((world.tenant.schema, sql, list(values[0].values())))

    assert len(cache) == 1
    assert [values for _, _, values in rendered] == [["Ada"], ["Grace"]] * 2
    for schema, sql, _ in rendered:
        assert f"{schema}.customers" in sql
        assert "tenant" not in sql.replace(schema, "")


def test_the_cache_keeps_at_most_its_size_dropping_the_least_recently_used(
    database: Database,
) -> None:
    cache = StatementCache(database.engine.dialect, size=2)
    shapes = [select(literal(1).label(f"column_{n}")) for n in range(3)]
    schema = Scope.for_tenant(new_id()).schema
    for shape in shapes:
        cache.render(shape, [], schema)
    assert len(cache) == 2


def test_in_lists_of_any_length_expand_including_empty_ones(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant()
    names = ["Ada", "Grace", "Barbara"]
    with database.unit_of_work(world.tenant.scope) as uow:
        for name in names:
            statement, values = _insert_customer(name, world.department.id)
            uow.connection.execute(statement, values)
        for asked in ([], ["Ada"], names):
            found = uow.connection.execute(
                select(customers.c.last_name).where(customers.c.last_name.in_(asked))
            ).all()
            assert sorted(row[0] for row in found) == sorted(asked)


@pytest.mark.parametrize("prepared_after", [None, 1], ids=["as text", "prepared"])
def test_many_parameter_sets_return_their_rows_in_the_order_given(
    database_url: str, make_tenant: Callable[..., TenantWorld], prepared_after: int | None
) -> None:
    world = make_tenant()
    database = Database(database_url, pool_size=1, max_overflow=0)
    if prepared_after is not None:  # one EXECUTE a set, in one script
        database.server_prepared = ServerPrepared(after=prepared_after)
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
    try:
        with database.unit_of_work(world.tenant.scope) as uow:
            returned = uow.connection.execute(statement, rows).mappings().all()
    finally:
        database.dispose()

    assert [row["id"] for row in returned] == ids
    assert [row["last_name"] for row in returned] == [f"Customer {n}" for n in range(20)]


@pytest.mark.parametrize("prepared", [True, False])
def test_prepared_statements_can_be_turned_off_for_pgbouncer(
    database_url: str, make_tenant: Callable[..., TenantWorld], prepared: bool
) -> None:
    world = make_tenant()
    database = Database(database_url, pool_size=1, max_overflow=0, prepared_statements=prepared)
    try:
        with database.unit_of_work(world.tenant.scope) as uow:
            for _ in range(10):
                uow.connection.execute(select(departments.c.name))
            on_server = uow.connection.execute(
                select(func.count()).select_from(table("pg_prepared_statements"))
            ).scalar_one()
    finally:
        database.dispose()

    assert (on_server > 0) is prepared


def test_a_statement_built_once_renders_as_any_other_for_each_tenant_and_its_own_values(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    def shape() -> Insert:
        # A literal of its own (the 2) besides the values a caller gives.
        return insert(customers).values(
            created_at=func.now(), updated_at=func.now(), version=literal(2)
        )

    marked, plain = built_once(shape()), shape()
    cache = StatementCache(database.engine.dialect)
    for world in (make_tenant(), make_tenant(), make_tenant()):
        for last_name in ("Ada", "O'Brien"):
            values = {"id": new_id(), "department_id": world.department.id, "last_name": last_name}
            assert (
                cache.render(marked, [values], world.tenant.schema)[:2]
                == cache.render(plain, [values], world.tenant.schema)[:2]
            )

    world = make_tenant()
    with database.unit_of_work(world.tenant.scope) as uow:
        for last_name in ("Ada", "Grace"):
            uow.connection.execute(
                marked,
                {"id": new_id(), "department_id": world.department.id, "last_name": last_name},
            )
    with database.unit_of_work(world.tenant.scope) as uow:
        rows = uow.connection.execute(
            select(customers.c.last_name, customers.c.version).order_by(customers.c.last_name)
        ).all()
    assert rows == [("Ada", 2), ("Grace", 2)]


def test_a_statement_built_once_with_other_parameter_names_or_an_in_list_is_rendered_afresh(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant()
    department = world.department.id
    cache = StatementCache(database.engine.dialect)
    inserting = built_once(insert(customers).values(created_at=func.now(), updated_at=func.now()))
    short = {"id": new_id(), "department_id": department, "last_name": "Ada"}
    longer = {**short, "first_name": "Augusta"}
    cache.render(inserting, [short], world.tenant.schema)
    sql, values, _ = cache.render(inserting, [longer], world.tenant.schema)
    assert "first_name" in sql
    assert values[0]["first_name"] == "Augusta"

    listing = built_once(
        select(customers.c.id).where(customers.c.last_name.in_(bindparam("names", expanding=True)))
    )
    for names in (["Ada"], ["Ada", "Grace", "Hedy"]):
        sql, values, _ = cache.render(listing, [{"names": names}], world.tenant.schema)
        assert sql.count("%(names_") == len(names)


def _scripts_sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The scripts units of work send from now on, one per round trip."""
    sent: list[str] = []
    send = TenantConnection._script

    def counting(self: TenantConnection, statements: list[str]) -> list[Fetched]:
        sent.append("; ".join(statements))
        return send(self, statements)

    monkeypatch.setattr(TenantConnection, "_script", counting)
    return sent


def test_a_deferred_statement_goes_before_the_next_statement_in_its_round_trip(
    database: Database, make_tenant: Callable[..., TenantWorld], monkeypatch: pytest.MonkeyPatch
) -> None:
    world = make_tenant()
    statement, values = _insert_customer("Lovelace", world.department.id)
    sent = _scripts_sent(monkeypatch)
    with database.unit_of_work(world.tenant.scope) as uow:
        deferred = uow.connection.defer(statement.returning(customers.c.last_name), values)
        seen = uow.connection.execute(select(func.count()).select_from(customers)).scalar_one()
        assert len(sent) == 1
        assert deferred.rows().all() == [("Lovelace",)]
        assert len(sent) == 1

    assert seen == 1
    assert len(sent) == 2  # the COMMIT


def test_reading_a_deferred_statement_before_anything_else_ran_sends_it_with_the_begin(
    database: Database, make_tenant: Callable[..., TenantWorld], monkeypatch: pytest.MonkeyPatch
) -> None:
    world = make_tenant()
    statement, values = _insert_customer("Lovelace", world.department.id)
    sent = _scripts_sent(monkeypatch)
    with database.unit_of_work(world.tenant.scope) as uow:
        deferred = uow.connection.defer(statement.returning(customers.c.last_name), values)
        assert sent == []
        assert deferred.rows().all() == [("Lovelace",)]
        assert len(sent) == 1 and sent[0].startswith("BEGIN")

    assert _customer_count(database, world.tenant.scope) == 1


def test_discarding_forgets_only_what_was_deferred_after_the_mark_and_has_not_gone(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant()
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


def _prepared_on_server(uow: UnitOfWork) -> list[str]:
    """The text of what the unit of work's connection has prepared on its server (each
    ``PREPARE``'s whole script), read on the driver's connection: through the unit of work the
    query would be a statement run, and counted, too."""
    connection = uow.connection._connection
    assert isinstance(connection, psycopg.Connection), "a unit of work of the synchronous pool"
    cursor = connection.execute("SELECT statement FROM pg_prepared_statements")
    return [statement for (statement,) in cursor.fetchall()]


def pipelines_sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pipelines units of work send from now on (``TenantConnection._pipelined``): how many
    statements each ran besides the role switch."""
    sent: list[int] = []
    pipelined = TenantConnection._pipelined

    def counting(self: TenantConnection, calls: list[Any]) -> list[Fetched] | None:
        ran = pipelined(self, calls)
        if ran is not None:
            sent.append(len(ran))
        return ran

    monkeypatch.setattr(TenantConnection, "_pipelined", counting)
    return sent


def _prepared_after_one_run(database_url: str) -> Database:
    """A database of one connection, whose statements are prepared at their first run."""
    own = Database(database_url, pool_size=1, max_overflow=0)
    own.server_prepared = ServerPrepared(after=1)
    return own


def test_a_unit_of_work_of_prepared_statements_is_one_pipeline_as_the_tenants_role(
    database: Database,
    database_url: str,
    make_tenant: Callable[..., TenantWorld],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = make_tenant()
    own = _prepared_after_one_run(database_url)
    statement, values = _insert_customer("Lovelace", world.department.id)
    inserting = statement.returning(customers.c.last_name)
    whoami = select(func.current_user())
    try:
        with own.unit_of_work(world.tenant.scope) as uow:  # both prepared on the connection
            uow.connection.execute(inserting, values)
            uow.connection.execute(whoami)
        scripts, pipelines = _scripts_sent(monkeypatch), pipelines_sent(monkeypatch)
        with own.unit_of_work(world.tenant.scope) as uow:
            inserted = uow.connection.defer(
                inserting, _insert_customer("Hopper", world.department.id)[1]
            )
            role = uow.connection.defer(whoami, {})
        with own.pool.connection() as connection:  # the one connection, as the pool has it
            after = connection.execute("SELECT current_user").fetchone()
            pipeline_status = connection.pgconn.pipeline_status
    finally:
        own.dispose()

    assert scripts == [] and pipelines == [2]
    assert inserted.rows().all() == [("Hopper",)]
    assert role.rows().scalar_one() == tenant_role(world.tenant.schema)
    assert _customer_count(database, world.tenant.scope) == 2
    # The role was the transaction's only, and the connection left pipeline mode.
    assert after is not None and after[0] != tenant_role(world.tenant.schema)
    assert pipeline_status == psycopg.pq.PipelineStatus.OFF


def test_a_pipeline_with_a_failing_statement_writes_nothing_and_leaves_the_connection_usable(
    database: Database,
    database_url: str,
    make_tenant: Callable[..., TenantWorld],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = make_tenant()
    own = _prepared_after_one_run(database_url)
    statement, values = _insert_customer("Lovelace", world.department.id)
    try:
        with own.unit_of_work(world.tenant.scope) as uow:
            uow.connection.execute(statement, values)
        pipelines = pipelines_sent(monkeypatch)

        def both_in_one_pipeline() -> None:
            with own.unit_of_work(world.tenant.scope) as uow:
                uow.connection.defer(*_insert_customer("Hopper", world.department.id))
                uow.connection.defer(statement, values)  # the first customer's id again

        with pytest.raises(psycopg.errors.UniqueViolation):
            both_in_one_pipeline()
        with own.unit_of_work(world.tenant.scope) as uow:
            uow.connection.defer(*_insert_customer("Kept", world.department.id))
    finally:
        own.dispose()

    assert pipelines == [1]  # the failed one raised before counting; the last one ran
    assert _customer_count(database, world.tenant.scope) == 2


def test_a_connection_with_the_role_switchs_name_taken_sends_one_script_then_pipelines(
    database: Database,
    database_url: str,
    make_tenant: Callable[..., TenantWorld],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = make_tenant()
    own = _prepared_after_one_run(database_url)
    statement, values = _insert_customer("Lovelace", world.department.id)
    try:
        with own.pool.connection() as connection:
            connection.execute("PREPARE dealbase_role AS SELECT set_config('role', $1, true)")
        with own.unit_of_work(world.tenant.scope) as uow:
            uow.connection.execute(statement, values)
        scripts, pipelines = _scripts_sent(monkeypatch), pipelines_sent(monkeypatch)
        for last_name in ("Hopper", "Liskov"):
            with own.unit_of_work(world.tenant.scope) as uow:
                uow.connection.defer(*_insert_customer(last_name, world.department.id))
    finally:
        own.dispose()

    assert len(scripts) == 1 and pipelines == [1]
    assert _customer_count(database, world.tenant.scope) == 3


def test_a_value_written_only_as_a_literal_sends_the_unit_of_work_as_a_script(
    database_url: str, make_tenant: Callable[..., TenantWorld], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A timestamp goes as a literal (its time zone converted as the literal's type says), so
    the statement that takes one goes as ``EXECUTE`` in a script."""
    world = make_tenant()
    own = _prepared_after_one_run(database_url)
    stamped = select(bindparam("at", type_=DateTime(timezone=True)))
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    try:
        with own.unit_of_work(world.tenant.scope) as uow:
            uow.connection.execute(stamped, {"at": at})
        scripts, pipelines = _scripts_sent(monkeypatch), pipelines_sent(monkeypatch)
        with own.unit_of_work(world.tenant.scope) as uow:
            read = uow.connection.defer(stamped, {"at": at})
    finally:
        own.dispose()

    assert pipelines == [] and len(scripts) == 1 and "EXECUTE dealbase_" in scripts[0]
    assert read.rows().scalar_one() == at


def test_a_statement_run_often_on_a_connection_is_prepared_there_then_run_by_name(
    database_url: str, make_tenant: Callable[..., TenantWorld], monkeypatch: pytest.MonkeyPatch
) -> None:
    world = make_tenant()
    own = Database(database_url, pool_size=1, max_overflow=0)
    sent = _scripts_sent(monkeypatch)
    names = select(departments.c.name).where(departments.c.id == world.department.id)
    try:
        found = []
        for _ in range(PREPARE_AFTER + 1):
            with own.unit_of_work(world.tenant.scope) as uow:
                found.append(uow.connection.execute(names).scalar_one())
                prepared = _prepared_on_server(uow)
    finally:
        own.dispose()

    assert found == [world.department.name] * (PREPARE_AFTER + 1)
    firsts = [script for script in sent if script.startswith("BEGIN")]
    # Run as text until it is due; then prepared (in a savepoint), and run by name from then on.
    assert not any("EXECUTE" in script for script in firsts[: PREPARE_AFTER - 1])
    assert "SAVEPOINT" in firsts[PREPARE_AFTER - 1]
    assert "PREPARE dealbase_" in firsts[PREPARE_AFTER - 1]
    assert "EXECUTE dealbase_" in firsts[PREPARE_AFTER]
    assert len([text for text in prepared if "departments" in text]) == 1


def test_a_prepared_statement_outlives_a_unit_of_work_that_rolled_back(
    database: Database,
    database_url: str,
    make_tenant: Callable[..., TenantWorld],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """psycopg deallocates every statement of a session after a ROLLBACK once it has prepared
    one itself; units of work prepare theirs alone, so theirs stay."""
    world = make_tenant()
    own = Database(database_url, pool_size=1, max_overflow=0)
    statement, _ = _insert_customer("", world.department.id)

    def insert_one(last_name: str) -> None:
        with own.unit_of_work(world.tenant.scope) as uow:
            uow.connection.execute(statement, _insert_customer(last_name, world.department.id)[1])
            if last_name == "Rolled back":
                raise RuntimeError("rolled back")

    try:
        for n in range(PREPARE_AFTER):
            insert_one(f"C{n}")
        sent = _scripts_sent(monkeypatch)
        with pytest.raises(RuntimeError):
            insert_one("Rolled back")
        insert_one("Kept")
    finally:
        own.dispose()

    firsts = [script for script in sent if script.startswith("BEGIN")]
    assert len(firsts) == 2 and all("EXECUTE dealbase_" in script for script in firsts), sent
    assert _customer_count(database, world.tenant.scope) == PREPARE_AFTER + 1


def test_a_statement_postgresql_will_not_prepare_runs_as_text_and_its_transaction_goes_on(
    database: Database,
    database_url: str,
    make_tenant: Callable[..., TenantWorld],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = make_tenant()
    own = Database(database_url, pool_size=1, max_overflow=0)
    # PREPARE cannot tell the type of pg_typeof's $1; a literal 5 in its place is an integer.
    untyped: Select[tuple[str]] = select(func.pg_typeof(bindparam("n")))
    sent = _scripts_sent(monkeypatch)
    runs = PREPARE_AFTER + 2
    try:
        types = []
        for n in range(runs):
            with own.unit_of_work(world.tenant.scope) as uow:
                types.append(uow.connection.execute(untyped, {"n": n}).scalar_one())
                uow.connection.execute(*_insert_customer(f"C{n}", world.department.id))
                prepared = _prepared_on_server(uow)
    finally:
        own.dispose()

    assert types == ["integer"] * runs
    # Tried once, when due, and refused: rolled back to its savepoint, never tried again.
    assert len([script for script in sent if "PREPARE" in script and "pg_typeof" in script]) == 1
    assert len([script for script in sent if "ROLLBACK TO SAVEPOINT" in script]) == 1
    assert not [text for text in prepared if "pg_typeof" in text]
    assert _customer_count(database, world.tenant.scope) == runs


def test_a_connection_keeps_its_most_recently_run_prepared_statements_up_to_its_bound(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant()
    own = Database(database_url, pool_size=1, max_overflow=0)
    own.server_prepared = ServerPrepared(after=1, per_connection=2)
    shapes = [select(literal(n).label(f"n{n}")) for n in range(3)]
    try:
        with own.unit_of_work(world.tenant.scope) as uow:
            for shape in shapes:
                uow.connection.execute(shape)
            prepared = _prepared_on_server(uow)
            counted = own.server_prepared.count(uow.connection._connection)
    finally:
        own.dispose()

    assert counted == 2
    assert sorted(f"n{n}" for n in range(3) if any(f"AS n{n};" in p for p in prepared)) == [
        "n1",
        "n2",
    ]


def test_a_statement_due_to_be_prepared_goes_after_what_was_deferred_before_it(
    database: Database,
    database_url: str,
    make_tenant: Callable[..., TenantWorld],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = make_tenant()
    own = Database(database_url, pool_size=1, max_overflow=0)
    own.server_prepared = ServerPrepared(after=1)
    sent = _scripts_sent(monkeypatch)
    count = select(func.count()).select_from(customers)
    try:
        with own.unit_of_work(world.tenant.scope) as uow:
            uow.connection.defer(*_insert_customer("Deferred", world.department.id))
            seen = uow.connection.execute(count).scalar_one()
    finally:
        own.dispose()

    assert seen == 1
    # Every statement is due at its first run here: the INSERT is prepared as it is deferred
    # and waits as an EXECUTE; the count, due in turn, sends it before its own PREPARE.
    assert "PREPARE" in sent[0] and "INSERT INTO" in sent[0]
    assert sent[1].startswith("EXECUTE dealbase_")
    assert "PREPARE" in sent[2] and "count" in sent[2]
    assert sent[3].startswith("EXECUTE dealbase_")
    assert sent[4] == "COMMIT"
    assert _customer_count(database, world.tenant.scope) == 1


def test_a_statement_that_commits_with_it_is_the_unit_of_works_last(
    database: Database, world: TenantWorld
) -> None:
    statement, values = _insert_customer("Lovelace", world.department.id)
    with database.unit_of_work(world.tenant.scope) as uow:
        uow.connection.commit_with_next()
        uow.connection.execute(statement, values)
        # Committed with it: another transaction sees the row at once.
        assert _customer_count(database, world.tenant.scope) == 1
        with pytest.raises(RuntimeError, match="no statement may follow"):
            uow.connection.execute(select(func.count()).select_from(customers))


def test_a_unit_of_work_in_one_round_trip_is_an_implicit_transaction_as_the_tenants_role(
    database: Database, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No BEGIN and COMMIT when the whole transaction is one round trip: its statements still
    run as the tenant's role and commit or fail together."""
    statement, values = _insert_customer("Lovelace", world.department.id)
    sent = _scripts_sent(monkeypatch)
    with database.unit_of_work(world.tenant.scope) as uow:
        uow.connection.defer(statement, values)
        role = uow.connection.defer(select(func.current_user()), {})

    [script] = sent
    assert script.startswith("SET LOCAL ROLE") and not script.endswith("COMMIT")
    assert role.rows().scalar_one() == tenant_role(world.tenant.schema)
    assert _customer_count(database, world.tenant.scope) == 1

    # Two statements in one round trip, the second refused: neither is written.
    def both_in_one_round_trip() -> None:
        with database.unit_of_work(world.tenant.scope) as uow:
            uow.connection.defer(*_insert_customer("Hopper", world.department.id))
            uow.connection.defer(statement, values)  # the first customer's id again

    with pytest.raises(psycopg.errors.UniqueViolation):
        both_in_one_round_trip()
    assert _customer_count(database, world.tenant.scope) == 1
