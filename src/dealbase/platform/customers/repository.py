from __future__ import annotations

import dataclasses
import functools
import operator
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    Text,
    bindparam,
    cast,
    func,
    or_,
    select,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.sql.dml import Insert, ReturningInsert
from sqlalchemy.sql.elements import BindParameter

from dealbase.db.faults import Fault
from dealbase.db.statements import Kept, Record, Rows, built_once
from dealbase.db.transactions import Deferred, TenantConnection
from dealbase.errors import ExternalIdTaken, ValueTaken
from dealbase.ids import new_ids
from dealbase.platform.customers.models import Customer, CustomerFields, CustomerFilter
from dealbase.platform.events.repository import (
    WAKES_IN_DEPARTMENT,
    recorded_alone,
    recorded_with,
)
from dealbase.platform.listing import BY_ID, ListFilters, Rule, equal
from dealbase.platform.listing import Shape as FilterShape
from dealbase.platform.pagination import PageRequest
from dealbase.platform.resources import CUSTOMER
from dealbase.platform.rows import (
    OwnedRows,
    first_as,
    owned_by,
)
from dealbase.platform.shapes import CUSTOM_FIELDS, Shape
from dealbase.platform.tables import customers, deal_customers, events

# Its rows as every department-owned, versioned record's are read and written.
rows = OwnedRows(customers, "customer")

# Named once: iterating a Table's columns is slow, and a page of deals maps 150 customer rows.
_COLUMNS = tuple(column.name for column in customers.c)


# The read model's fields but the tenant's id (no row holds it) as the row names them, and
# where the tenant's id goes among them.
_FIELDS = tuple(field.name for field in dataclasses.fields(Customer))
_READ = operator.itemgetter(*(name for name in _FIELDS if name != "tenant_id"))
_TENANT_AT = _FIELDS.index("tenant_id")


def to_customer(row: Record, tenant_id: uuid.UUID) -> Customer:
    # Positional: 28 keyword arguments cost several times as much, and a dashboard page makes
    # 150 customers.
    values = list(_READ(row))
    values.insert(_TENANT_AT, tenant_id)
    return Customer(*values)


def external_id_taken() -> ExternalIdTaken:
    return ExternalIdTaken(
        "Another customer of the department has this external_id; to change that customer,"
        " upsert it: PUT /customers/by-external-id/{external_id}."
    )


def _given(table: Table) -> dict[str, BindParameter[Any]]:
    """The customer's own values, as parameters named after its columns (a tenant's custom
    fields' among them, on its table with theirs)."""
    return {
        name: bindparam(name, type_=table.c[name].type)
        for name in ("id", "department_id", *OwnedRows(table, "customer").field_columns)
    }


def _insert_statement(table: Table, as_json: bool) -> ReturningInsert[Any]:
    """A new customer: its columns, or (``as_json``) only those an answer needs besides its
    JSON, which its event's insert returns (27 fewer to send and load)."""
    columns = (table.c.id, table.c.version) if as_json else table.c
    return (
        insert(table)
        .values(created_at=func.now(), updated_at=func.now(), **_given(table))
        .returning(*columns)
    )


def _insert_recorded_statement(shape: Shape, as_json: bool) -> Select[Any]:
    """A new customer and its customer.created event in one statement, its data the row's
    JSON (made once), with the row's JSON text (``shown``) and whether the worker is to be woken
    (read last)."""
    table = shape.table
    inserted = (
        insert(table)
        .values(created_at=func.now(), updated_at=func.now(), **_given(table))
        .returning(*table.c)
        .cte("inserted")
    )
    # Read twice (the event, the answer), the CTE is materialized: it carries only the columns
    # read after it.
    columns = (table.c.id, table.c.version) if as_json else table.c
    kept = (*columns, table.c.department_id) if as_json else columns
    shown = select(
        *(inserted.c[column.name] for column in kept), shape.json_of_row(inserted).label("shown")
    ).cte("shown")
    recorded, wakes = recorded_with(
        shown,
        "customer.created",
        shown.c.shown,
        bindparam("department_id", type_=table.c.department_id.type),
    )
    return select(
        *(shown.c[column.name] for column in columns),
        cast(shown.c.shown, Text).label("shown"),
        wakes.label("wakes"),
    ).add_cte(recorded)


def _record_created(shape: Shape, as_json: bool) -> Insert | ReturningInsert[Any]:
    """A new customer's event, of the JSON PostgreSQL makes of its values, returning the
    event's data as text when the create answers its JSON."""
    now = func.now()
    event = recorded_alone(
        "customer.created",
        shape.json_of_values({**_given(shape.table), "created_at": now, "updated_at": now}),
    )
    return event.returning(cast(events.c.data, Text)) if as_json else event


@dataclass(frozen=True)
class _Statements:
    """A new customer and its customer.created event: on one server one statement
    (``recorded``); on a distributed schema three (the customer, its event with the JSON
    PostgreSQL makes of the same values, and whether the worker is to be woken), each of which
    Citus routes whole."""

    recorded: Select[Any]
    insert: ReturningInsert[Any]
    event: Insert | ReturningInsert[Any]


# By the customer's table (a tenant's with its custom fields' columns is one of its own, of a
# shape of its own) and whether the create answers its JSON.
_STATEMENTS: Kept[tuple[Table, bool], _Statements] = Kept()


def _statements(shape: Shape, as_json: bool) -> _Statements:
    return _STATEMENTS.get(
        (shape.table, as_json),
        lambda: _Statements(
            built_once(_insert_recorded_statement(shape, as_json)),
            built_once(_insert_statement(shape.table, as_json)),
            built_once(_record_created(shape, as_json)),
        ),
    )


@dataclass(frozen=True, slots=True)
class Inserted:
    """A customer ``defer_insert_recorded`` inserts, and where it learns whether its event wakes
    the worker and its JSON text: statements of their own, or (None) the insert's columns."""

    row: Deferred
    wakes: Deferred | None
    shown: Deferred | None


def _external_id_meaning(fault: Fault) -> ExternalIdTaken | ValueTaken | None:
    taken = rows.unique_value_meaning(fault)
    return external_id_taken() if isinstance(taken, ExternalIdTaken) else taken


def defer_insert_recorded(
    connection: TenantConnection,
    tenant_id: uuid.UUID,
    department_id: uuid.UUID,
    fields: CustomerFields,
    *,
    as_json: bool,
    shape: Shape = CUSTOMER,
    custom: Mapping[str, object] | None = None,
) -> Inserted:
    """Inserts a customer and records its ``customer.created`` event (its data made by
    PostgreSQL), sent with the unit of work's next round trip: with the COMMIT, when nothing
    else runs. ``recorded`` reads it, or ``recorded_as_json`` when ``as_json``. An external id
    another customer of the department has is ExternalIdTaken, raised by that round trip
    (nothing was written). ``shape``: the customer's of the tenant's custom fields, whose
    values by column ``custom`` gives."""
    customer_id, event_id = new_ids(2)
    # The custom values are ``custom``'s. Without them, dumped whole (a fitted create model's
    # dump drops the null itself): excluding a field costs pydantic more than dropping it
    # after; with them, excluded: dumping them costs more still.
    if getattr(fields, CUSTOM_FIELDS) is None:
        values = fields.model_dump()
        values.pop(CUSTOM_FIELDS, None)
    else:
        values = fields.model_dump(exclude={CUSTOM_FIELDS})
    if custom:
        values.update(custom)
    values.update(
        id=customer_id, department_id=department_id, event_id=event_id, tenant_id=str(tenant_id)
    )
    statements = _statements(shape, as_json)
    if not connection.distributed:
        row = connection.defer(statements.recorded, values, meaning=_external_id_meaning)
        return Inserted(row, None, None)
    row = connection.defer(statements.insert, values, meaning=_external_id_meaning)
    shown = connection.defer(statements.event, values)
    wakes = connection.defer(WAKES_IN_DEPARTMENT, {"department_id": department_id})
    return Inserted(row, wakes, shown)


def recorded(inserted: Inserted, tenant_id: uuid.UUID) -> Customer:
    """The customer ``defer_insert_recorded`` inserted."""
    return to_customer(inserted.row.rows().mappings().one(), tenant_id)


def recorded_as_json(inserted: Inserted) -> tuple[uuid.UUID, int, str]:
    """``recorded``'s customer as its id, its version and its JSON text made by PostgreSQL."""
    row = inserted.row.rows().mappings().one()
    if inserted.shown is not None:
        return (row["id"], row["version"], inserted.shown.rows().scalar_one())
    return (row["id"], row["version"], row["shown"])


def recorded_wakes(inserted: Inserted) -> bool:
    """Whether the worker is to be woken for the event ``defer_insert_recorded`` recorded."""
    if inserted.wakes is None:
        return bool(inserted.row.rows().one()[-1])
    return bool(inserted.wakes.rows().scalar())


def get_customer(
    connection: TenantConnection,
    tenant_id: uuid.UUID,
    department_id: uuid.UUID | None,
    customer_id: uuid.UUID,
) -> Customer | None:
    query = select(customers).where(owned_by(customers, department_id, customer_id))
    return first_as(connection, query, lambda row: to_customer(row, tenant_id))


def _contains(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _text_search() -> ColumnElement[bool]:
    pattern = bindparam("q", type_=Text)
    return or_(
        *(
            column.ilike(pattern, escape="\\")
            for column in (customers.c.last_name, customers.c.first_name, customers.c.company)
        )
    )


CUSTOMER_FILTERS = ListFilters(
    customers,
    (
        Rule("external_id", equal(customers.c.external_id)),
        Rule(
            "email",
            lambda: func.lower(customers.c.email) == bindparam("email", type_=Text),
            str.lower,
        ),
        Rule("q", _text_search, _contains),
        Rule(
            "updated_since",
            lambda: (
                customers.c.updated_at
                >= bindparam("updated_since", type_=customers.c.updated_at.type)
            ),
        ),
    ),
)


@functools.lru_cache(maxsize=64)
def _page_query(shape: FilterShape, after: bool, as_json: bool) -> Select[Any]:
    """Up to ``limit`` customers of a list in id order, after the id ``after`` when paging on:
    the rows, or each one's id and JSON text."""
    columns: tuple[Any, ...] = (
        (customers.c.id, CUSTOMER.text_of_row(customers)) if as_json else tuple(customers.c)
    )
    query = select(*columns).where(*CUSTOMER_FILTERS.conditions(shape))
    if after:
        query = query.where(customers.c.id > bindparam("after", type_=customers.c.id.type))
    return built_once(query.order_by(customers.c.id).limit(bindparam("limit")))


def _page(
    connection: TenantConnection,
    department_id: uuid.UUID | None,
    filters: CustomerFilter,
    page: PageRequest,
    *,
    tenant_id: uuid.UUID | None = None,
    completed: Callable[[Select[Any], dict[str, Any]], Select[Any]] | None = None,
) -> Rows:
    """A page's rows, or (given the tenant's id, which their JSON shows) each one's id and JSON
    text, its statement run as ``completed`` makes it."""
    shape, values = CUSTOMER_FILTERS.page_values(department_id, filters, BY_ID, page)
    query = _page_query(shape, page.after is not None, tenant_id is not None)
    if tenant_id is not None:
        values["tenant_id"] = str(tenant_id)
    return connection.execute(query if completed is None else completed(query, values), values)


def list_customers(
    connection: TenantConnection,
    tenant_id: uuid.UUID,
    department_id: uuid.UUID | None,
    filters: CustomerFilter,
    page: PageRequest,
    narrowed: Callable[[Select[Any], dict[str, Any]], Select[Any]] | None = None,
) -> list[Customer]:
    """Up to ``page.limit + 1`` customers in id order (the extra one tells there is more), its
    statement run as ``narrowed`` makes it."""
    rows = _page(connection, department_id, filters, page, completed=narrowed)
    return [to_customer(row, tenant_id) for row in rows.mappings()]


def list_customers_as_json(
    connection: TenantConnection,
    tenant_id: uuid.UUID,
    department_id: uuid.UUID | None,
    filters: CustomerFilter,
    page: PageRequest,
    completed: Callable[[Select[Any], dict[str, Any]], Select[Any]],
) -> list[tuple[uuid.UUID, None, str]]:
    """``list_customers``, each customer as its JSON text made by PostgreSQL (its id beside it,
    for the cursor; no other sort value), its statement run as ``completed`` makes it."""
    rows = _page(connection, department_id, filters, page, tenant_id=tenant_id, completed=completed)
    return [(customer_id, None, text) for customer_id, text in rows]


def customers_of_deals(
    connection: TenantConnection, tenant_id: uuid.UUID, deal_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[Customer]]:
    """Each deal's customers in link order, for many deals in one statement."""
    by_deal: dict[uuid.UUID, list[Customer]] = {deal_id: [] for deal_id in deal_ids}
    if not deal_ids:
        return by_deal
    rows = connection.execute(
        select(customers, deal_customers.c.deal_id.label("linked_deal_id"))
        .join(deal_customers, deal_customers.c.customer_id == customers.c.id)
        .where(deal_customers.c.deal_id.in_(deal_ids))
        .order_by(deal_customers.c.deal_id, deal_customers.c.position)
    ).mappings()
    for row in rows:
        by_deal[row["linked_deal_id"]].append(to_customer(row, tenant_id))
    return by_deal
