"""A record's JSON shape is declared once (``shapes.shape_of`` of its read model), and a field
added to that declaration is in every rendering of it, each equal to the others: the read
model's JSON in Python, PostgreSQL's JSON of its row and of its values, and the data of the
events recorded both ways."""

from __future__ import annotations

import dataclasses
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import orjson
import pytest
from sqlalchemy import (
    TIMESTAMP,
    Column,
    Connection,
    MetaData,
    Table,
    Text,
    bindparam,
    cast,
    insert,
    select,
    text,
)

from dealbase.db.database import Database
from dealbase.platform.customers.models import Customer
from dealbase.platform.events.repository import recorded_alone, recorded_with
from dealbase.platform.resources import CUSTOMER, CUSTOMER_HIDDEN
from dealbase.platform.shapes import TENANT_ID, Kind, shape_of
from dealbase.platform.tables import customers, events
from dealbase.tenancy.scope import TENANT_SCHEMA_PLACEHOLDER
from tests.support import TenantWorld


@dataclass(frozen=True, slots=True)
class ContactedCustomer(Customer):
    """The customer's read model with one more attribute: the edit that adds a field."""

    first_contact_at: datetime | None = None


# The scratch table: the customers' columns, and the new field's (its migration).
contacted_customers = Table(
    "contacted_customers",
    MetaData(schema=TENANT_SCHEMA_PLACEHOLDER),
    *(Column(each.name, each.type, nullable=each.nullable) for each in customers.c),
    Column("first_contact_at", TIMESTAMP(timezone=True)),
)
# Declared as ``resources.CUSTOMER`` is.
CONTACTED = shape_of(
    ContactedCustomer,
    contacted_customers,
    hidden=CUSTOMER_HIDDEN,
    sources={"tenant_id": TENANT_ID},
)

_VALUES: dict[str, Any] = {
    "external_id": "crm-'1'",
    "last_name": 'Lovelace "Ada" \\ </script>',
    "first_name": "Ünïcødé ✓",
    "note": "line\nbreak\ttab",
    "birthday": date(1815, 12, 10),
    "created_at": datetime(999, 1, 2, 3, 4, 5, tzinfo=UTC),
    "updated_at": datetime(2026, 12, 3, 10, 30, 0, 250000, tzinfo=UTC),
    "first_contact_at": datetime(2026, 12, 1, 9, 0, 0, 1, tzinfo=UTC),
    "version": 1,
}


def _in_schema(connection: Connection, schema: str) -> Connection:
    return connection.execution_options(schema_translate_map={TENANT_SCHEMA_PLACEHOLDER: schema})


def _recorded_data(connection: Connection, event_id: uuid.UUID) -> str:
    return str(
        connection.execute(
            select(cast(events.c.data, Text)).where(events.c.id == event_id)
        ).scalar_one()
    )


def test_a_field_added_to_a_declaration_is_in_every_rendering_each_equal_to_the_others(
    database: Database, world: TenantWorld
) -> None:
    schema, tenant_id = world.tenant.schema, str(world.tenant.id)
    department_id = world.department.id
    given = {
        **{each.name: None for each in contacted_customers.c},
        **_VALUES,
        "id": uuid.uuid4(),
        "department_id": department_id,
    }
    parameters = {
        **{
            name: bindparam(name, type_=contacted_customers.c[name].type)
            for name in given
            if name != "department_id"
        },
        "department_id": bindparam("department_id", type_=customers.c.department_id.type),
    }
    from_row, from_values = uuid.uuid4(), uuid.uuid4()
    with database.control() as control:
        control.execute(
            text(
                f'CREATE TABLE "{schema}".contacted_customers'
                f' (LIKE "{schema}".customers, first_contact_at timestamptz)'
            )
        )
        connection = _in_schema(control, schema)
        # Inserted with its event, whose data is the JSON of the row it inserted (a single
        # server's create) ...
        inserted = insert(contacted_customers).values(parameters).returning(*contacted_customers.c)
        rows = inserted.cte("inserted")
        recorded, _ = recorded_with(
            rows, "customer.created", CONTACTED.json_of_row(rows), parameters["department_id"]
        )
        connection.execute(
            select(rows.c.id).add_cte(recorded),
            {**given, "event_id": from_row, "tenant_id": tenant_id},
        )
        # ... and an event whose data is the JSON of the same values (a distributed schema's).
        connection.execute(
            recorded_alone("customer.created", CONTACTED.json_of_values(parameters)),
            {**given, "event_id": from_values, "tenant_id": tenant_id},
        )
        row = (
            connection.execute(
                select(
                    contacted_customers, CONTACTED.text_of_row(contacted_customers).label("shown")
                ),
                {"tenant_id": tenant_id},
            )
            .mappings()
            .one()
        )
        of_values = connection.execute(
            select(cast(CONTACTED.json_of_values(parameters), Text)),
            {**given, "tenant_id": tenant_id},
        ).scalar_one()
        recorded_texts = [_recorded_data(connection, each) for each in (from_row, from_values)]
        control.execute(text(f'DROP TABLE "{schema}".contacted_customers'))

    read_model = ContactedCustomer(
        **{name: row[name] for name in row if name != "shown"}, tenant_id=world.tenant.id
    )
    in_python = CONTACTED.as_json(read_model)
    assert CONTACTED.names == (*CUSTOMER.names, "first_contact_at")
    assert in_python["first_contact_at"] == "2026-12-01T09:00:00.000001Z"
    assert in_python["created_at"] == "0999-01-02T03:04:05.000000Z"
    # The same JSON text, byte for byte, however it was made.
    texts = [row["shown"], of_values, *recorded_texts]
    assert texts == [orjson.dumps(in_python).decode()] * 4
    assert [list(json.loads(each)) for each in texts] == [list(in_python)] * 4


def test_a_declaration_takes_each_fields_kind_from_its_read_models_type() -> None:
    kinds = {each.name: each.kind for each in CONTACTED.fields}

    assert kinds["id"] is Kind.ID
    assert kinds["tenant_id"] is Kind.ID
    assert kinds["last_name"] is Kind.AS_IS
    assert kinds["birthday"] is Kind.DATE
    assert kinds["first_contact_at"] is Kind.TIMESTAMP
    assert not set(kinds) & CUSTOMER_HIDDEN


def test_a_declaration_refuses_a_field_its_table_has_no_column_for() -> None:
    @dataclass(frozen=True)
    class Unstored:
        id: uuid.UUID
        nickname: str

    with pytest.raises(ValueError, match="nickname"):
        shape_of(Unstored, customers)


def test_a_declaration_refuses_a_type_json_has_no_kind_for() -> None:
    @dataclass(frozen=True)
    class Odd:
        id: uuid.UUID
        weights: frozenset[int]

    with pytest.raises(TypeError, match="frozenset"):
        shape_of(Odd, customers)


def test_the_python_rendering_shows_every_declared_field_by_its_kind() -> None:
    customer = ContactedCustomer(
        **{
            each.name: None
            for each in dataclasses.fields(ContactedCustomer)
            if each.name not in _VALUES
        }
        | _VALUES
        | {"id": uuid.UUID(int=1), "tenant_id": uuid.UUID(int=2), "department_id": uuid.UUID(int=3)}
    )

    shown = CONTACTED.as_json(customer)

    assert list(shown) == list(CONTACTED.names)
    assert shown["id"] == "00000000-0000-0000-0000-000000000001"
    assert shown["birthday"] == "1815-12-10"
    assert shown["first_name"] == "Ünïcødé ✓"
    assert shown["phone_1"] is None
