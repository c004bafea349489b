from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    FromClause,
    Select,
    Table,
    bindparam,
    delete,
    exists,
    func,
    literal,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

from dealbase.db.statements import Record, built_once, dataclass_of_row
from dealbase.db.transactions import Deferred, TenantConnection
from dealbase.ids import new_id
from dealbase.platform.customers.models import Customer
from dealbase.platform.deals.models import Deal, DealFilter
from dealbase.platform.listing import KeysetOrder, ListFilters, Rule, Shape, equal
from dealbase.platform.pagination import PageRequest
from dealbase.platform.resources import DEAL
from dealbase.platform.rows import (
    OwnedRows,
    in_department,
    insert_reading,
    lookup,
    owned_by,
)
from dealbase.platform.tables import deal_customers, deals, employees, steps

# Its rows as every department-owned, versioned record's are read and written.
rows = OwnedRows(deals, "deal")

# The fields that name a row of another table, which must be of the deal's department.
REFERENCES = {"step_id": steps, "employee_id": employees}


def new_version(connection: TenantConnection, department_id: uuid.UUID, deal_id: uuid.UUID) -> None:
    """A new version of the deal, its fields as they are: what changed is its links."""
    rows.update(connection, department_id, deal_id, {})


def first_step_query() -> Select[Any]:
    """The first step (lowest position) of the department the parameter ``department_id``
    names: where a new deal starts unless told otherwise."""
    return (
        select(steps.c.id)
        .where(
            steps.c.department_id == bindparam("department_id", type_=deals.c.department_id.type)
        )
        .order_by(steps.c.position)
        .limit(1)
    )


_FIRST_STEP = built_once(first_step_query())


def first_step(connection: TenantConnection, department_id: uuid.UUID) -> uuid.UUID | None:
    """The department's first step, None when it has none: read by a statement of its own on
    a distributed schema, where Citus routes no insert whole that both reads it and stamps
    ``now()`` (``rows.lookup``)."""
    found: uuid.UUID | None = connection.execute(
        _FIRST_STEP, {"department_id": department_id}
    ).scalar()
    return found


@functools.lru_cache(maxsize=64)
def _insert_deal_statement(table: Table, columns: tuple[str, ...], in_first_step: bool) -> Any:
    """Built once per table (a tenant's with its custom fields' columns is one of its own) and
    set of columns a caller gives: building a statement costs more CPU than running it."""
    department_id = bindparam("department_id", type_=table.c.department_id.type)
    first_step = lookup(first_step_query(), "first_step")
    values = {
        "id": bindparam("id", type_=table.c.id.type),
        "department_id": department_id,
        "step_id": select(first_step.c.id).scalar_subquery()
        if in_first_step
        else bindparam("step_id", type_=table.c.step_id.type),
        "created_at": func.now(),
        "updated_at": func.now(),
        **{name: bindparam(name, type_=table.c[name].type) for name in columns},
    }
    return built_once(
        insert_reading(table, values, *([first_step] if in_first_step else []))
        .on_conflict_do_nothing(index_elements=[table.c.department_id, table.c.external_id])
        .returning(*table.c)
    )


@functools.lru_cache(maxsize=64)
def _insert_deal_values_statement(table: Table, columns: tuple[str, ...]) -> Any:
    """``_insert_deal_statement`` on a distributed schema: an ``INSERT ... VALUES``, its step
    given, which Citus routes whole (it pulls an ``INSERT ... SELECT`` that stamps ``now()``
    through the coordinator)."""
    values = {
        name: bindparam(name, type_=table.c[name].type)
        for name in ("id", "department_id", "step_id", *columns)
    }
    return built_once(
        pg_insert(table)
        .values(created_at=func.now(), updated_at=func.now(), **values)
        .on_conflict_do_nothing(index_elements=[table.c.department_id, table.c.external_id])
        .returning(*table.c)
    )


def insert_deal(
    connection: TenantConnection,
    department_id: uuid.UUID,
    step_id: uuid.UUID | None,
    values: dict[str, object],
    table: Table = deals,
) -> Record | None:
    """The new deal's row, in ``step_id`` or else the department's first step (found by the
    same statement; none: a NOT NULL violation of ``step_id``); None when another deal of the
    department has its external id (ON CONFLICT DO NOTHING: the transaction stays usable, and a
    concurrent insert of the same external id is waited for). ``table``: the deals' with the
    tenant's custom fields' columns, of which ``values`` may give some.

    On a distributed schema the first step is read by a round trip of its own before
    (``first_step``), and the insert is given it."""
    columns = tuple(sorted(values))
    parameters = {**values, "id": new_id(), "department_id": department_id}
    if connection.distributed:
        if step_id is None:
            step_id = first_step(connection, department_id)
        statement = _insert_deal_values_statement(table, columns)
        parameters["step_id"] = step_id
    else:
        statement = _insert_deal_statement(table, columns, step_id is None)
        if step_id is not None:
            parameters["step_id"] = step_id
    return connection.execute(statement, parameters).mappings().first()


def link_customer(connection: TenantConnection, deal_id: uuid.UUID, customer_id: uuid.UUID) -> bool:
    """Appends the customer to the deal's customers; False when it was linked already. The
    position is read in the INSERT's own SELECT, without a subquery: the form Citus routes whole
    to the tenant's worker (``rows.lookup`` says what it does with the others)."""
    given = deal_customers.c
    following = select(
        literal(deal_id, given.deal_id.type),
        literal(customer_id, given.customer_id.type),
        func.coalesce(func.max(given.position), 0) + 1,
    ).where(given.deal_id == deal_id)
    inserted = connection.execute(
        pg_insert(deal_customers)
        .from_select(["deal_id", "customer_id", "position"], following)
        .on_conflict_do_nothing()
        .returning(given.deal_id)
    ).first()
    return inserted is not None


def unlink_customer(
    connection: TenantConnection, deal_id: uuid.UUID, customer_id: uuid.UUID
) -> bool:
    removed = connection.execute(
        delete(deal_customers)
        .where(deal_customers.c.deal_id == deal_id, deal_customers.c.customer_id == customer_id)
        .returning(deal_customers.c.deal_id)
    ).first()
    return removed is not None


# A deal's employee's name, read with its row (``records.SyncedRecord.read_columns``).
EMPLOYEE_NAME = DEAL.derived["employee_name"](deals).label("employee_name")


def _with_employee_name() -> Select[tuple[object, ...]]:
    return select(*deals.c, employees.c.name.label("employee_name")).outerjoin(
        employees, employees.c.id == deals.c.employee_id
    )


def get_deal_row(
    connection: TenantConnection, department_id: uuid.UUID | None, deal_id: uuid.UUID
) -> Record | None:
    return connection.execute(_deal_row(department_id, deal_id)).mappings().first()


def defer_deal_row(
    connection: TenantConnection, department_id: uuid.UUID | None, deal_id: uuid.UUID
) -> Deferred:
    """``get_deal_row``'s statement, sent with the unit of work's next round trip."""
    return connection.defer(_deal_row(department_id, deal_id), {})


def _deal_row(department_id: uuid.UUID | None, deal_id: uuid.UUID) -> Select[Any]:
    return _with_employee_name().where(owned_by(deals, department_id, deal_id))


# Volume as the volume orders sort it: a deal without one sorts as the smallest.
def sorted_volume(row: FromClause) -> ColumnElement[int]:
    return func.coalesce(row.c.volume, -1)


DEAL_FILTERS = ListFilters(
    deals,
    (
        Rule("external_id", equal(deals.c.external_id)),
        Rule("step_id", equal(deals.c.step_id)),
        Rule("employee_id", equal(deals.c.employee_id)),
        Rule(
            "customer_id",
            lambda: exists().where(
                deal_customers.c.deal_id == deals.c.id,
                deal_customers.c.customer_id
                == bindparam("customer_id", type_=deal_customers.c.customer_id.type),
            ),
        ),
        Rule(
            "updated_since",
            lambda: deals.c.updated_at >= bindparam("updated_since", type_=deals.c.updated_at.type),
        ),
        Rule(
            "created_after",
            lambda: deals.c.created_at >= bindparam("created_after", type_=deals.c.created_at.type),
        ),
        Rule(
            "created_before",
            lambda: deals.c.created_at < bindparam("created_before", type_=deals.c.created_at.type),
        ),
        Rule("volume_min", lambda: deals.c.volume >= bindparam("volume_min", type_=BigInteger)),
        Rule("volume_max", lambda: deals.c.volume <= bindparam("volume_max", type_=BigInteger)),
    ),
)


def deal_order(order_by: str) -> KeysetOrder:
    """A ``DealFilter.order_by`` as a keyset: (id), or (volume, id) for the volume orders."""
    return _ORDERS[order_by]


_ORDERS = {
    "created_asc": KeysetOrder(),
    "created_desc": KeysetOrder(descending=True),
    "volume_asc": KeysetOrder(sorted_volume),
    "volume_desc": KeysetOrder(sorted_volume, descending=True),
}


@functools.lru_cache(maxsize=128)
def _page_query(shape: Shape, order_by: str, after: bool) -> Select[Any]:
    order = deal_order(order_by)
    query = _with_employee_name().where(*DEAL_FILTERS.conditions(shape))
    return built_once(order.paged(query, deals, after))


def list_deal_rows(
    connection: TenantConnection,
    department_id: uuid.UUID | None,
    filters: DealFilter,
    page: PageRequest,
    narrowed: Callable[[Select[Any], dict[str, Any]], Select[Any]] | None = None,
) -> list[Record]:
    """Up to ``page.limit + 1`` deals in the filter's order (the extra one tells there is more),
    paged by keyset, the statement run as ``narrowed`` makes it."""
    order = deal_order(filters.order_by)
    shape, values = DEAL_FILTERS.page_values(department_id, filters, order, page)
    query = _page_query(shape, filters.order_by, page.after is not None)
    if narrowed is not None:
        query = narrowed(query, values)
    return list(connection.execute(query, values).mappings().all())


@functools.lru_cache(maxsize=128)
def _json_page_query(shape: Shape, order_by: str, after: bool) -> Select[Any]:
    order = deal_order(order_by)
    keys = order.keys(deals)
    query = select(deals.c.id, keys[0], DEAL.text_of_row(deals)).where(
        *DEAL_FILTERS.conditions(shape)
    )
    return built_once(order.paged(query, deals, after))


def list_deals_as_json(
    connection: TenantConnection,
    tenant_id: uuid.UUID,
    department_id: uuid.UUID | None,
    filters: DealFilter,
    page: PageRequest,
    completed: Callable[[Select[Any], dict[str, Any]], Select[Any]],
) -> list[tuple[uuid.UUID, int | None, str]]:
    """``list_deal_rows``' deals as (id, sort value, JSON text made by PostgreSQL), customers
    included: one statement, run as ``completed`` makes it. The sort value is what the order
    sorts by (None by id)."""
    order = deal_order(filters.order_by)
    shape, values = DEAL_FILTERS.page_values(department_id, filters, order, page)
    values["tenant_id"] = str(tenant_id)
    query = completed(_json_page_query(shape, filters.order_by, page.after is not None), values)
    by_volume = order.sort is not None
    return [
        (row[0], row[1] if by_volume else None, row[2]) for row in connection.execute(query, values)
    ]


def to_deal(row: Record, customers: Sequence[Customer]) -> Deal:
    # A row read without its employee's name (a write's RETURNING) has none.
    return dataclass_of_row(
        Deal, row, employee_name=row.get("employee_name"), customers=tuple(customers)
    )


def touch_deals_of_customer(connection: TenantConnection, customer_id: uuid.UUID) -> None:
    """A new version for every deal the customer is linked to: its ``customers`` will change."""
    linked = select(deal_customers.c.deal_id).where(deal_customers.c.customer_id == customer_id)
    connection.execute(
        update(deals)
        .where(deals.c.id.in_(linked))
        .values(updated_at=func.now(), version=deals.c.version + 1)
    )


def _first_rows_per_parent(
    connection: TenantConnection,
    query: Select[Any],
    parent: ColumnElement[uuid.UUID],
    parent_ids: Sequence[uuid.UUID],
    department_id: uuid.UUID | None,
    per_parent: int,
) -> list[Record]:
    """The first ``per_parent`` deals of ``query`` (oldest first) of each of ``parent_ids``, in
    one statement, each row with its parent's id as ``parent_id``."""
    if not parent_ids:
        return []
    ranked = (
        query.add_columns(
            parent.label("parent_id"),
            func.row_number().over(partition_by=parent, order_by=deals.c.id).label("rank"),
        )
        .where(parent.in_(parent_ids), in_department(deals, department_id))
        .subquery()
    )
    return list(
        connection.execute(
            select(ranked)
            .where(ranked.c.rank <= per_parent)
            .order_by(ranked.c.parent_id, ranked.c.id)
        )
        .mappings()
        .all()
    )


def first_deal_rows_of_steps(
    connection: TenantConnection,
    department_id: uuid.UUID | None,
    step_ids: Sequence[uuid.UUID],
    per_step: int,
) -> list[Record]:
    """The first ``per_step`` deals (oldest first) of each step, for many steps in one statement."""
    return _first_rows_per_parent(
        connection, _with_employee_name(), deals.c.step_id, step_ids, department_id, per_step
    )


def deal_rows_by_ids(
    connection: TenantConnection, department_id: uuid.UUID | None, deal_ids: Sequence[uuid.UUID]
) -> list[Record]:
    if not deal_ids:
        return []
    return list(
        connection.execute(
            _with_employee_name().where(
                deals.c.id.in_(deal_ids), in_department(deals, department_id)
            )
        )
        .mappings()
        .all()
    )


def first_deal_rows_of_customers(
    connection: TenantConnection,
    department_id: uuid.UUID | None,
    customer_ids: Sequence[uuid.UUID],
    per_customer: int,
) -> list[Record]:
    """The first ``per_customer`` deals (oldest first) each customer is linked to."""
    linked = _with_employee_name().join(deal_customers, deal_customers.c.deal_id == deals.c.id)
    return _first_rows_per_parent(
        connection, linked, deal_customers.c.customer_id, customer_ids, department_id, per_customer
    )
