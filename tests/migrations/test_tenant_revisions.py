"""Data migrations of the tenant tree, checked on a schema made at the revision before them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError

from dealbase.db.database import Database
from dealbase.migrations.runner import upgrade_tenant
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.events import service as events
from dealbase.platform.events.models import EventFilter
from dealbase.platform.validation import validated
from dealbase.tenancy.scope import Scope


def _scratch_schema() -> str:
    """A tenant schema's name no other test and no other run uses (its role is cluster-wide)."""
    return f"t_{uuid.uuid4().hex}"


def _drop(connection: Connection, *schemas: str) -> None:
    """The schemas and their roles, which no tenant registers for the teardown to find."""
    for schema in schemas:
        connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE; DROP ROLE "{schema}"'))


@contextmanager
def _schema_at(database: Database, revision: str) -> Iterator[tuple[Connection, str]]:
    """A scratch tenant schema at ``revision``, and the control connection that made it; the
    schema dropped afterwards."""
    schema = _scratch_schema()
    with database.control() as connection:
        upgrade_tenant(connection, schema, revision)
        yield connection, schema
        _drop(connection, schema)


@contextmanager
def _upgraded_from(database: Database, revision: str, rows_sql: str) -> Iterator[Scope]:
    """A scratch tenant schema at ``revision``, given the rows ``rows_sql`` writes (``{schema}``
    and ``{department_id}`` in it: the schema and its department), then upgraded to the head:
    the department's scope; the schema dropped afterwards."""
    tenant_id, department_id = uuid.uuid4(), uuid.uuid4()
    schema = f"t_{tenant_id.hex}"
    with database.control() as connection:
        upgrade_tenant(connection, schema, revision)
        connection.execute(text(rows_sql.format(schema=schema, department_id=department_id)))
        upgrade_tenant(connection, schema)
    try:
        yield Scope(tenant_id, schema, department_id)
    finally:
        with database.control() as connection:
            _drop(connection, schema)


def test_t0003_marks_the_default_pipelines_won_and_lost_steps(database: Database) -> None:
    rows = """
        INSERT INTO "{schema}".departments VALUES ('{department_id}', 'Sales', now(), now());
        INSERT INTO "{schema}".steps (id, department_id, name, position, created_at, updated_at)
        SELECT gen_random_uuid(), '{department_id}', name, position, now(), now()
        FROM unnest(ARRAY['Lead', 'Won', 'Lost']) WITH ORDINALITY AS s(name, position);
    """
    with _upgraded_from(database, "t0002", rows) as scope, database.control() as connection:
        steps = connection.execute(text(f'SELECT name, kind FROM "{scope.schema}".steps')).all()
        kinds = {str(name): str(kind) for name, kind in steps}

    assert kinds == {"Lead": "open", "Won": "won", "Lost": "lost"}


def _columns(connection: Connection, schema: str) -> list[tuple[str, ...]]:
    rows = connection.execute(
        text(
            "SELECT table_name, column_name, data_type, is_nullable, coalesce(column_default, '')"
            " FROM information_schema.columns WHERE table_schema = :schema ORDER BY 1, 2"
        ),
        {"schema": schema},
    )
    return [tuple(str(value) for value in row) for row in rows]


def test_required_columns_added_to_tables_with_rows_match_a_fresh_schemas(
    database: Database,
) -> None:
    """``add_required_column`` (add, default, fill, require) leaves what one ADD COLUMN with a
    default and NOT NULL would: rows from before it get the default, and the columns are alike."""
    rows = """
        INSERT INTO "{schema}".departments VALUES ('{department_id}', 'Sales', now(), now());
        INSERT INTO "{schema}".customers (id, department_id, last_name, created_at, updated_at)
        VALUES (gen_random_uuid(), '{department_id}', 'Lovelace', now(), now());
    """
    with (
        _upgraded_from(database, "t0001", rows) as scope,
        _schema_at(database, "head") as (connection, fresh),
    ):
        upgraded = scope.schema
        versions = (
            connection.execute(text(f'SELECT version FROM "{upgraded}".customers')).scalars().all()
        )
        columns = {schema: _columns(connection, schema) for schema in (upgraded, fresh)}

    assert versions == [1]
    assert columns[upgraded] == columns[fresh]
    assert ("customers", "version", "bigint", "NO", "1") in columns[fresh]
    assert ("steps", "kind", "text", "NO", "'open'::text") in columns[fresh]


def test_t0007_keeps_the_positions_of_events_from_before_and_numbers_new_ones_after_them(
    database: Database,
) -> None:
    rows = """
        INSERT INTO "{schema}".departments VALUES ('{department_id}', 'Sales', now(), now());
        INSERT INTO "{schema}".event_positions VALUES ('{department_id}', 2);
        INSERT INTO "{schema}".events (id, department_id, position, type, data, created_at)
        SELECT gen_random_uuid(), '{department_id}', n, 'customer.created',
               jsonb_build_object('last_name', 'Before ' || n), now()
        FROM generate_series(1, 2) AS n;
    """
    with _upgraded_from(database, "t0006", rows) as scope:
        with database.unit_of_work(scope) as uow:
            customers.create(uow, validated(CustomerFields, {"last_name": "After"}))
        with database.unit_of_work(scope) as uow:
            page = events.feed(uow, EventFilter(), 10, None)
        feed = [(event.position, event.data["last_name"]) for event in page.items]

    assert feed == [(1, "Before 1"), (2, "Before 2"), (3, "After")]


def test_t0008_keeps_the_data_and_previous_of_events_from_before_as_json(
    database: Database,
) -> None:
    rows = """
        INSERT INTO "{schema}".departments VALUES ('{department_id}', 'Sales', now(), now());
        INSERT INTO "{schema}".events (id, department_id, sequence, type, data,
                                       changed_fields, previous, created_at)
        VALUES (gen_random_uuid(), '{department_id}', 1, 'customer.updated',
                '{{"last_name": "Lovelace", "notes": "ünïcode \\" quoted"}}'::jsonb,
                ARRAY['last_name'], '{{"last_name": "Byron"}}'::jsonb, now());
    """
    with _upgraded_from(database, "t0007", rows) as scope:
        with database.control() as connection:
            types = connection.execute(
                text(
                    "SELECT column_name, data_type FROM information_schema.columns"
                    " WHERE table_schema = :schema AND table_name = 'events'"
                    " AND column_name IN ('data', 'previous') ORDER BY 1"
                ),
                {"schema": scope.schema},
            ).all()
        with database.unit_of_work(scope) as uow:
            page = events.feed(uow, EventFilter(), 10, None)

    assert [tuple(row) for row in types] == [("data", "json"), ("previous", "json")]
    assert [(event.data, event.previous) for event in page.items] == [
        ({"last_name": "Lovelace", "notes": 'ünïcode " quoted'}, {"last_name": "Byron"})
    ]


def test_t0009_leaves_the_written_tables_department_undeclared_and_keeps_the_other_keys(
    database: Database,
) -> None:
    keys = (
        "SELECT t.relname, pg_get_constraintdef(k.oid) FROM pg_constraint k"
        " JOIN pg_class t ON t.oid = k.conrelid"
        " WHERE k.contype = 'f' AND k.connamespace = CAST(:schema AS regnamespace)"
    )
    with _schema_at(database, "t0008") as (connection, schema):
        before = set(connection.execute(text(keys), {"schema": schema}).all())
        upgrade_tenant(connection, schema)
        after = set(connection.execute(text(keys), {"schema": schema}).all())

    undeclared = {
        (table, "FOREIGN KEY (department_id) REFERENCES departments(id)")
        for table in ("customers", "deals", "activities", "events")
    }
    assert undeclared <= before
    assert after == before - undeclared


def test_t0010_keeps_in_each_customer_made_before_it_the_json_the_api_shows(
    database: Database,
) -> None:
    customer_id, department_id = uuid.uuid4(), uuid.uuid4()
    with _schema_at(database, "t0009") as (connection, schema):
        connection.execute(
            text(
                f'INSERT INTO "{schema}".customers'
                " (id, department_id, last_name, first_name, note, birthday, external_id,"
                "  created_at, updated_at)"
                " VALUES (:id, :department, 'Lovelace \"Ada\"', 'Ünïcødé', NULL, '1815-12-10',"
                "  'crm-1', '2026-11-27 10:00:00+00', '2026-11-27 11:30:00.25+01')"
            ),
            {"id": customer_id, "department": department_id},
        )
        upgrade_tenant(connection, schema, "t0010")
        kept = connection.execute(
            text(f'SELECT api_json::text FROM "{schema}".customers')
        ).scalar_one()

    shown = json.loads(kept)
    assert list(shown)[:3] == ["id", "external_id", "tenant_id"]
    assert shown["id"] == str(customer_id)
    assert shown["tenant_id"] == str(uuid.UUID(schema.removeprefix("t_")))
    assert shown["last_name"] == 'Lovelace "Ada"'
    assert shown["first_name"] == "Ünïcødé"
    assert shown["note"] is None and shown["email"] is None
    assert shown["birthday"] == "1815-12-10"
    assert shown["created_at"] == "2026-11-27T10:00:00.000000Z"
    assert shown["updated_at"] == "2026-11-27T10:30:00.250000Z"
    assert "department_id" not in shown and "version" not in shown


def test_t0011_computes_each_customers_json_as_before_and_keeps_event_positions_unique(
    database: Database,
) -> None:
    customer_id, department_id = uuid.uuid4(), uuid.uuid4()
    with _schema_at(database, "t0010") as (connection, schema):
        add_event = (
            f'INSERT INTO "{schema}".events (id, department_id, position, type, data, created_at)'
            " VALUES (gen_random_uuid(), :department, :position, 'customer.created', '{}', now())"
        )
        connection.execute(
            text(
                f'INSERT INTO "{schema}".customers'
                " (id, department_id, last_name, first_name, note, birthday, external_id,"
                "  created_at, updated_at)"
                " VALUES (:id, :department, 'Lovelace \"Ada\"', 'Ünïcødé', E'a\\nb',"
                "  '1815-12-10', 'crm-1', '2026-11-27 10:00:00+00', '2026-11-27 11:30:00.25+01')"
            ),
            {"id": customer_id, "department": department_id},
        )
        for position in (1, 2, None):
            connection.execute(text(add_event), {"department": department_id, "position": position})
        before = connection.execute(
            text(f'SELECT api_json::text FROM "{schema}".customers')
        ).scalar_one()
        upgrade_tenant(connection, schema, "t0011")
        # Written again, the column is computed by the new function.
        connection.execute(text(f'UPDATE "{schema}".customers SET note = note'))
        after = connection.execute(
            text(f'SELECT api_json::text FROM "{schema}".customers')
        ).scalar_one()
        connection.execute(text(add_event), {"department": department_id, "position": None})
        duplicate = connection.begin_nested()
        try:
            connection.execute(text(add_event), {"department": department_id, "position": 2})
            refused = False
        except IntegrityError:
            refused = True
        duplicate.rollback()
        positions = (
            connection.execute(
                text(f'SELECT position FROM "{schema}".events ORDER BY position NULLS LAST')
            )
            .scalars()
            .all()
        )

    assert '"note":"a\\nb"' in after
    assert after == before
    assert refused
    assert positions == [1, 2, None, None]


def test_t0012_leaves_customers_without_kept_json_and_the_schema_without_its_function_and_type(
    database: Database,
) -> None:
    customer_id, department_id = uuid.uuid4(), uuid.uuid4()
    kept = (
        "SELECT (SELECT count(*) FROM pg_proc WHERE proname = 'customer_api_json'"
        "  AND pronamespace = CAST(:schema AS regnamespace)),"
        " (SELECT count(*) FROM pg_type WHERE typname = 'customer_api_shape'"
        "  AND typnamespace = CAST(:schema AS regnamespace)),"
        " (SELECT count(*) FROM information_schema.columns"
        "  WHERE table_schema = CAST(:schema AS text) AND column_name = 'api_json')"
    )
    with _schema_at(database, "t0011") as (connection, schema):
        connection.execute(
            text(
                f'INSERT INTO "{schema}".customers'
                " (id, department_id, last_name, created_at, updated_at)"
                " VALUES (:id, :department, 'Lovelace', now(), now())"
            ),
            {"id": customer_id, "department": department_id},
        )
        before = connection.execute(text(kept), {"schema": schema}).one()
        upgrade_tenant(connection, schema)
        after = connection.execute(text(kept), {"schema": schema}).one()
        names = connection.execute(text(f'SELECT id, last_name FROM "{schema}".customers')).all()

    assert tuple(before) == (1, 1, 1)
    assert tuple(after) == (0, 0, 0)
    assert [tuple(row) for row in names] == [(customer_id, "Lovelace")]
