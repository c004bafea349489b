"""Custom fields' SQL: their definitions' rows, and the columns and indexes that hold their
values. Definitions are read in a unit of work, as the tenant's role; they change only with
their columns, on a schema change's connection as the tables' owner (``service``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import sqlalchemy.exc
from sqlalchemy import Connection, bindparam, delete, func, insert, select, text, update

from dealbase.db.faults import fault_of
from dealbase.db.statements import Record, built_once
from dealbase.db.transactions import TenantConnection
from dealbase.errors import Unavailable, ValuesNotUnique
from dealbase.platform.custom_fields.models import (
    CustomField,
    FieldType,
    Option,
    RecordKind,
    Settable,
)
from dealbase.platform.custom_fields.rules import SQL_TYPES, TABLES, column_name, index_name
from dealbase.platform.tables import custom_fields

_OLDEST_FIRST = select(custom_fields).order_by(custom_fields.c.created_at, custom_fields.c.id)
_ALL = built_once(_OLDEST_FIRST)
_OF_RECORD = built_once(_OLDEST_FIRST.where(custom_fields.c.record == bindparam("record")))
_ONE = built_once(select(custom_fields).where(custom_fields.c.id == bindparam("id")))


def to_field(row: Mapping[Any, Any]) -> CustomField:
    options = row["options"]
    return CustomField(
        id=row["id"],
        record=row["record"],
        name=row["name"],
        label=row["label"],
        type=FieldType(row["type"]),
        max_length=row["max_length"],
        options=None
        if options is None
        else tuple(
            Option(uuid.UUID(each["id"]), each["label"], each["archived"]) for each in options
        ),
        required=row["required"],
        unique=row["unique"],
        filterable=row["filterable"],
        archived=row["archived"],
        version=row["version"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _options_json(options: tuple[Option, ...] | None) -> list[dict[str, object]] | None:
    if options is None:
        return None
    return [
        {"id": str(each.id), "label": each.label, "archived": each.archived} for each in options
    ]


def list_fields(connection: TenantConnection, record: RecordKind | None) -> list[CustomField]:
    """The tenant's fields, of ``record`` or of every record, oldest first."""
    rows: list[Record] = (
        (
            connection.execute(_ALL)
            if record is None
            else connection.execute(_OF_RECORD, {"record": record})
        )
        .mappings()
        .all()
    )
    return [to_field(row) for row in rows]


def get_field(connection: TenantConnection, field_id: uuid.UUID) -> CustomField | None:
    row = connection.execute(_ONE, {"id": field_id}).mappings().first()
    return None if row is None else to_field(row)


# What follows runs on a schema change's connection, as the owner.


def fields_for_change(connection: Connection, record: RecordKind) -> list[CustomField]:
    return [to_field(row) for row in connection.execute(_OF_RECORD, {"record": record}).mappings()]


def field_for_change(connection: Connection, field_id: uuid.UUID) -> CustomField | None:
    row = connection.execute(_ONE, {"id": field_id}).mappings().first()
    return None if row is None else to_field(row)


# Told each schema whose fields changed, once the change is done (``definitions``).
CHANGES_CHANNEL = "dealbase_custom_fields"


@contextmanager
def definitions_locked(connection: Connection, schema: str) -> Iterator[None]:
    """Holds, for the session, the lock every change of the schema's fields takes: one change
    at a time, indexes built included. Not waited for: a change under way may build an index
    for long, and a waiting request would hold a thread and a connection meanwhile. Released
    before the connection closes: a backend lets go of its locks only once it has ended, after
    the client has gone on to its next request. Every process is then told that the schema's
    fields may have changed (``CHANGES_CHANNEL``)."""
    key = {"key": definitions_lock_key(schema)}
    taken = connection.execute(
        text("SELECT pg_try_advisory_lock(hashtextextended(:key, 0))"), key
    ).scalar_one()
    if not taken:
        raise Unavailable(
            "Another change of the tenant's custom fields is under way; try again shortly.",
            retry_after_seconds=2,
        )
    try:
        yield
    finally:
        connection.execute(text("SELECT pg_advisory_unlock(hashtextextended(:key, 0))"), key)
        connection.execute(
            text("SELECT pg_notify(:channel, :schema)"),
            {"channel": CHANGES_CHANNEL, "schema": schema},
        )


def definitions_lock_key(schema: str) -> str:
    return f"custom_fields:{schema}"


def highest_column_number(connection: Connection, schema: str, record: RecordKind) -> int:
    """The highest column number the record's table has used, dropped columns included."""
    return int(
        connection.execute(
            text(
                "SELECT max(attnum) FROM pg_attribute"
                " WHERE attrelid = to_regclass(:table) AND attnum > 0"
            ),
            {"table": f'"{schema}"."{TABLES[record].name}"'},
        ).scalar_one()
    )


def insert_field(
    connection: Connection, field_id: uuid.UUID, record: RecordKind, name: str, wanted: Settable
) -> CustomField:
    row = (
        connection.execute(
            insert(custom_fields)
            .values(
                **_values_of(wanted), id=field_id, record=record, name=name, created_at=func.now()
            )
            .returning(*custom_fields.c)
        )
        .mappings()
        .one()
    )
    return to_field(row)


def _values_of(wanted: Settable) -> dict[str, object]:
    return {
        "label": wanted.label,
        "type": wanted.type.value,
        "max_length": wanted.max_length,
        "options": _options_json(wanted.options),
        "required": wanted.required,
        "unique": wanted.unique,
        "filterable": wanted.filterable,
        "archived": wanted.archived,
        "updated_at": func.now(),
    }


def update_field(connection: Connection, field_id: uuid.UUID, wanted: Settable) -> CustomField:
    row = (
        connection.execute(
            update(custom_fields)
            .where(custom_fields.c.id == field_id)
            .values(**_values_of(wanted), version=custom_fields.c.version + 1)
            .returning(*custom_fields.c)
        )
        .mappings()
        .one()
    )
    return to_field(row)


def delete_field(connection: Connection, field_id: uuid.UUID) -> None:
    connection.execute(delete(custom_fields).where(custom_fields.c.id == field_id))


def _table(schema: str, record: RecordKind) -> str:
    return f'"{schema}"."{TABLES[record].name}"'


def add_column(connection: Connection, schema: str, field: CustomField) -> None:
    """Nullable, without a default: the catalog changes, no row is rewritten."""
    column = column_name(field.name)
    connection.exec_driver_sql(
        f'ALTER TABLE {_table(schema, field.record)} ADD COLUMN "{column}" {SQL_TYPES[field.type]}'
    )


def drop_column(connection: Connection, schema: str, field: CustomField) -> None:
    """The catalog marks the column dropped; its values go with the rows' next rewrite."""
    column = column_name(field.name)
    connection.exec_driver_sql(f'ALTER TABLE {_table(schema, field.record)} DROP COLUMN "{column}"')


def build_index(connection: Connection, schema: str, field: CustomField, unique: bool) -> None:
    """The field's index, built without blocking the table's writes (outside a transaction).
    A build that fails leaves an invalid index, dropped here (and first, after a crash); a
    unique one fails when a department's records share a value: ValuesNotUnique."""
    drop_index(connection, schema, field, unique)
    try:
        _create_index(connection, schema, field, unique)
    except sqlalchemy.exc.DBAPIError as error:
        drop_index(connection, schema, field, unique)
        fault = None if error.orig is None else fault_of(error.orig)
        if fault is not None and fault.kind == "unique":
            raise ValuesNotUnique(
                f"Records of one department share a value of {field.name}: make them differ"
                " before making the field unique."
            ) from None
        raise


def _create_index(connection: Connection, schema: str, field: CustomField, unique: bool) -> None:
    name = index_name(field.record, field.name, unique)
    column = column_name(field.name)
    if field.type is FieldType.MULTI_SELECT:
        over = f'USING gin ("{column}")'
    else:
        over = f'(department_id, "{column}")'
    connection.exec_driver_sql(
        f'CREATE {"UNIQUE " if unique else ""}INDEX CONCURRENTLY "{name}"'
        f" ON {_table(schema, field.record)} {over}"
    )


def drop_index(connection: Connection, schema: str, field: CustomField, unique: bool) -> None:
    name = index_name(field.record, field.name, unique)
    connection.exec_driver_sql(f'DROP INDEX CONCURRENTLY IF EXISTS "{schema}"."{name}"')
