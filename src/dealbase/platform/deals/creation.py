"""A deal's create with its new customers, their links and their events: one statement on a
single server; on a distributed schema, statements Citus routes whole to the tenant's worker."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import (
    CTE,
    BindParameter,
    ColumnElement,
    Integer,
    Select,
    Text,
    bindparam,
    cast,
    column,
    func,
    insert,
    literal,
    literal_column,
    null,
    select,
    true,
    union_all,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSON, UUID, aggregate_order_by
from sqlalchemy.sql.dml import Insert, ReturningInsert

from dealbase.db.faults import ErrorMeaning
from dealbase.db.statements import built_once
from dealbase.db.transactions import Deferred, TenantConnection
from dealbase.ids import new_ids
from dealbase.platform.customers.repository import to_customer
from dealbase.platform.deals.models import Deal, DealCreate
from dealbase.platform.deals.repository import first_step, first_step_query, to_deal
from dealbase.platform.events.repository import (
    WAKES_IN_DEPARTMENT,
    recorded_rows,
    recorded_together,
)
from dealbase.platform.resources import CUSTOMER, DEAL
from dealbase.platform.rows import insert_reading, lookup
from dealbase.platform.tables import customers, deal_customers, deals, events

# A new deal's own fields (``DealCreate``'s but its customers), and a new customer's (every
# column but the server's own), as their tables name them.
_NEW_DEAL_FIELDS = ("name", "external_id", "volume", "deal_origin", "note")
_NEW_CUSTOMER_COLUMNS = tuple(
    column_.name
    for column_ in customers.c
    if column_.name not in ("department_id", "created_at", "updated_at", "version")
)
_DEAL_COLUMNS = tuple(column_.name for column_ in deals.c)
_CUSTOMER_COLUMNS = tuple(column_.name for column_ in customers.c)
# The columns of each customer row of ``_create_statement(as_json=False)``.
_CUSTOMER_LABELS = tuple(f"customer_{name}" for name in _CUSTOMER_COLUMNS)


@functools.lru_cache(maxsize=2)
def _create_statement(as_json: bool) -> Select[Any]:
    """A new deal in its department's first step, its new customers, their links in request
    order, and their events (each ``customer.created``, then ``deal.created``, their data made
    by PostgreSQL from the rows), in one statement. The customers come as one JSON parameter
    (``customers``: each with its id, its position and its event's id). Its rows: the deal's
    id, version and JSON text (``as_json``, REST's answer), else the deal's columns beside each
    customer's (``customer_<column>``, in link order; one row without customers); then whether
    the worker is to be woken (read last).

    No ``ON CONFLICT``: an external id already taken fails the statement (a unique violation,
    the deal's first, as its insert runs first), which fails the whole of it, so the rows it
    wrote before go with it; ``create_failure`` says what such a failure means."""
    department_id = bindparam("department_id", type_=deals.c.department_id.type)
    deal_id = bindparam("id", type_=deals.c.id.type)
    new_deal = _new_deal(department_id, deal_id)
    given = _given_customers()
    shown_customers = _shown_customers(_new_customers(given, new_deal), given)
    # Read from the inserted customers (inserted after the deal, whose department they read),
    # not from the request: Citus runs each of a statement's data-modifying CTEs as a statement
    # of its own, in the order they depend on each other, and the links' foreign keys look for
    # rows that went in before. From ``shown_customers``, which joined them to their positions
    # already: one join fewer for PostgreSQL to make.
    new_links = (
        insert(deal_customers)
        .from_select(
            ["deal_id", "customer_id", "position"],
            select(deal_id, shown_customers.c.id, shown_customers.c.position),
        )
        .cte("new_links")
    )
    shown_deal = _shown_deal(new_deal, shown_customers)
    recorded, wakes = _recorded_events(shown_customers, shown_deal, department_id)
    answer = _answer(shown_deal, shown_customers, wakes, as_json=as_json)
    return built_once(answer.add_cte(new_links, recorded))


def _answer(
    shown_deal: CTE, shown_customers: CTE, wakes: ColumnElement[bool], *, as_json: bool
) -> Select[Any]:
    """The create's rows (``_create_statement``), whether the worker is to be woken last."""
    if as_json:
        return select(
            shown_deal.c.id,
            shown_deal.c.version,
            cast(shown_deal.c.shown, Text).label("shown"),
            wakes.label("wakes"),
        )
    return (
        select(
            *(shown_deal.c[name] for name in _DEAL_COLUMNS),
            *(
                shown_customers.c[name].label(label)
                for name, label in zip(_CUSTOMER_COLUMNS, _CUSTOMER_LABELS, strict=True)
            ),
            wakes.label("wakes"),
        )
        .select_from(shown_deal.outerjoin(shown_customers, true()))
        .order_by(shown_customers.c.position)
    )


def _new_deal(department_id: BindParameter[Any], deal_id: BindParameter[Any]) -> CTE:
    """The deal's insert, in its department's first step, returning its row."""
    # Looked up as Citus plans it (``rows.lookup``).
    first_step = lookup(first_step_query(), "first_step")
    return (
        insert_reading(
            deals,
            {
                "id": deal_id,
                "department_id": department_id,
                "step_id": select(first_step.c.id).scalar_subquery(),
                "created_at": func.now(),
                "updated_at": func.now(),
                **{name: bindparam(name, type_=deals.c[name].type) for name in _NEW_DEAL_FIELDS},
            },
            first_step,
        )
        .returning(*deals.c)
        .cte("new_deal")
    )


def _given_customers() -> CTE:
    """The customers as the JSON parameter ``customers`` gives them: their columns, each one's
    position and its event's id."""
    given_rows = (
        func.json_to_recordset(cast(bindparam("customers", type_=Text), JSON))
        .table_valued(
            *(column(name, customers.c[name].type) for name in _NEW_CUSTOMER_COLUMNS),
            column("position", Integer),
            column("event_id", UUID(as_uuid=True)),
        )
        .render_derived(name="given_rows", with_types=True)
    )
    return select(given_rows).cte("given")


def _new_customers(given: CTE, new_deal: CTE) -> CTE:
    """The customers' insert, their department read from the deal's row: the customers go in
    after the deal."""
    return (
        insert(customers)
        .from_select(
            [*_NEW_CUSTOMER_COLUMNS, "department_id", "created_at", "updated_at"],
            select(
                *(given.c[name] for name in _NEW_CUSTOMER_COLUMNS),
                new_deal.c.department_id,
                func.now(),
                func.now(),
            ).select_from(given.join(new_deal, true())),
        )
        .returning(*customers.c)
        .cte("new_customers")
    )


def _shown_customers(new_customers: CTE, given: CTE) -> CTE:
    """The inserted customers with their positions, their events' ids and their JSON, made
    once."""
    return (
        select(
            new_customers,
            given.c.position,
            given.c.event_id,
            CUSTOMER.json_of_row(new_customers).label("shown"),
        )
        .join_from(new_customers, given, given.c.id == new_customers.c.id)
        .cte("shown_customers")
    )


def _shown_deal(new_deal: CTE, shown_customers: CTE) -> CTE:
    """The inserted deal with its JSON (``shown``), its customers' in link order within."""
    listed = select(
        func.coalesce(
            func.json_agg(aggregate_order_by(shown_customers.c.shown, shown_customers.c.position)),
            literal_column("'[]'::json"),
        )
    ).scalar_subquery()
    columns = {column_.name: column_ for column_ in new_deal.c}
    return select(new_deal, _new_deal_json(columns, listed).label("shown")).cte("shown_deal")


def _recorded_events(
    shown_customers: CTE, shown_deal: CTE, department_id: BindParameter[Any]
) -> tuple[CTE, ColumnElement[bool]]:
    """Each customer's ``customer.created``, then the deal's ``deal.created``, their data the
    JSON shown; and whether the worker is to be woken (``recorded_rows``)."""
    no_fields = cast(null(), ARRAY(Text)).label("changed_fields")
    no_previous = cast(null(), JSON).label("previous")
    return recorded_rows(
        union_all(
            select(
                shown_customers.c.event_id.label("id"),
                shown_customers.c.department_id,
                literal("customer.created", Text).label("type"),
                shown_customers.c.shown.label("data"),
                no_fields,
                no_previous,
            ),
            select(
                bindparam("event_id", type_=UUID(as_uuid=True)).label("id"),
                shown_deal.c.department_id,
                literal("deal.created", Text).label("type"),
                shown_deal.c.shown.label("data"),
                no_fields,
                no_previous,
            ),
        ),
        department_id,
    )


def _new_deal_json(
    values: Mapping[str, ColumnElement[Any]], customers_json: ColumnElement[Any]
) -> ColumnElement[Any]:
    """The JSON of a new deal given by its values (by name: a row's columns, or parameters and
    ``now()``) and its customers' JSON array (in link order). A new deal is unassigned: no
    employee, so no employee's name."""
    return DEAL.built_object_of(
        {**values, "employee_name": cast(null(), Text), "customers": customers_json}
    )


# On a distributed schema: the deal given its step, its customers, their links and their
# events, each an ``INSERT ... VALUES`` (of a row per customer, per event), their data made by
# PostgreSQL from the same values (``Shape.json_of_values``, ``_new_deal_json``) where the single
# server's statement makes them of the rows it inserted. The deal's values are parameters
# named after its columns, each customer's ``customer_<index>_<column>``. The deal's insert
# returns its columns (``as_json``: its id and version).
_DEAL_VALUES = {
    name: bindparam(name, type_=deals.c[name].type)
    for name in ("id", "department_id", "step_id", *_NEW_DEAL_FIELDS)
}
_ROUTED_DEAL = {
    as_json: built_once(
        insert(deals)
        .values(created_at=func.now(), updated_at=func.now(), **_DEAL_VALUES)
        .returning(*((deals.c.id, deals.c.version) if as_json else deals.c))
    )
    for as_json in (False, True)
}


def _customer_parameter(index: int, name: str) -> str:
    """The name of the parameter of customer ``index``'s ``name`` (a column, or ``event_id``)."""
    return f"customer_{index}_{name}"


@dataclass(frozen=True, slots=True)
class _Routed:
    """The statements of a create with a number of customers, but the deal's insert: its
    customers' (returning their columns but with ``as_json``) and their links' (None without
    customers), and its events' (each customer's customer.created, then deal.created; with
    ``as_json`` returning their data as JSON text, the deal's last: REST's answer)."""

    customers: ReturningInsert[Any] | Insert | None
    links: Insert | None
    events: ReturningInsert[Any] | Insert


@functools.lru_cache(maxsize=32)
def _routed(count: int, as_json: bool) -> _Routed:
    """Built once per number of customers: a statement of a row per customer."""
    given = [
        {
            name: bindparam(_customer_parameter(index, name), type_=customers.c[name].type)
            for name in _NEW_CUSTOMER_COLUMNS
        }
        for index in range(count)
    ]
    events_inserted = _routed_events(given, as_json=as_json)
    if not given:
        return _Routed(None, None, built_once(events_inserted))
    customers_inserted: ReturningInsert[Any] | Insert = insert(customers).values(
        [
            {
                **values,
                "department_id": _DEAL_VALUES["department_id"],
                "created_at": func.now(),
                "updated_at": func.now(),
            }
            for values in given
        ]
    )
    if not as_json:
        customers_inserted = customers_inserted.returning(*customers.c)
    links = insert(deal_customers).values(
        [
            {
                "deal_id": _DEAL_VALUES["id"],
                "customer_id": values["id"],
                "position": literal(place, deal_customers.c.position.type),
            }
            for place, values in enumerate(given, start=1)
        ]
    )
    return _Routed(built_once(customers_inserted), built_once(links), built_once(events_inserted))


def _routed_events(
    given: list[dict[str, BindParameter[Any]]], *, as_json: bool
) -> ReturningInsert[Any] | Insert:
    """The events' insert of ``_routed``: each customer's ``customer.created``, then the
    deal's ``deal.created``, their data made of the values given (with ``as_json`` returning
    it as JSON text)."""
    shown = [
        CUSTOMER.json_of_values({**values, "created_at": func.now(), "updated_at": func.now()})
        for values in given
    ]
    deal_shown = _new_deal_json(
        {
            **_DEAL_VALUES,
            "employee_id": cast(null(), deals.c.employee_id.type),
            "created_at": func.now(),
            "updated_at": func.now(),
        },
        func.json_build_array(*shown) if shown else literal_column("'[]'::json"),
    )
    inserted = recorded_together(
        [
            *(
                (
                    "customer.created",
                    bindparam(_customer_parameter(index, "event_id"), type_=UUID(as_uuid=True)),
                    data,
                )
                for index, data in enumerate(shown)
            ),
            ("deal.created", bindparam("event_id", type_=UUID(as_uuid=True)), deal_shown),
        ]
    )
    if as_json:
        return inserted.returning(cast(events.c.data, Text))
    return inserted


@dataclass(frozen=True, slots=True)
class Created:
    """What ``defer_create`` sent: on one server its one statement (``deal``); on a distributed
    schema the deal's insert, its customers' (None without customers), its events' (with
    ``as_json``: their data, the deal's last, REST's answer) and whether the worker is to be
    woken."""

    deal: Deferred
    customers: Deferred | None = None
    shown: Deferred | None = None
    wakes: Deferred | None = None


def defer_create(
    connection: TenantConnection,
    tenant_id: uuid.UUID,
    department_id: uuid.UUID,
    fields: DealCreate,
    meaning: ErrorMeaning,
    *,
    as_json: bool,
) -> Created:
    """``_create_statement``, sent with the unit of work's next round trip; ``meaning`` says
    what its failure means (``create_failure``). On a distributed schema, ``_defer_routed``'s
    statements."""
    count = len(fields.customers)
    # In increasing order: the customers' ids, the deal's, then the events' (their ids order
    # them within the transaction: the customers', then the deal's).
    ids = new_ids(2 * count + 2)
    values: dict[str, object] = {name: getattr(fields, name) for name in _NEW_DEAL_FIELDS}
    values.update(
        id=ids[count], department_id=department_id, event_id=ids[-1], tenant_id=str(tenant_id)
    )
    if connection.distributed:
        given = [
            {**customer.model_dump(), "id": ids[index], "event_id": ids[count + 1 + index]}
            for index, customer in enumerate(fields.customers)
        ]
        return _defer_routed(connection, values, given, meaning, as_json=as_json)
    given = [
        {
            **customer.model_dump(exclude_none=True),
            "id": ids[index],
            "position": index + 1,
            "event_id": ids[count + 1 + index],
        }
        for index, customer in enumerate(fields.customers)
    ]
    values["customers"] = orjson.dumps(given).decode()
    return Created(connection.defer(_create_statement(as_json), values, meaning=meaning))


def _defer_routed(
    connection: TenantConnection,
    deal: dict[str, object],
    given: list[dict[str, object]],
    meaning: ErrorMeaning,
    *,
    as_json: bool,
) -> Created:
    """The create on a distributed schema, in two round trips: the department's first step
    read now (the deal's event shows it, and Citus routes no statement whole that both reads
    it and stamps ``now()``), then the deal, its customers, their links and their events sent
    with the next round trip (the COMMIT, when nothing else runs). No first step: the deal's
    insert fails on its NOT NULL ``step_id``, as the single server's statement does."""
    department_id = deal["department_id"]
    assert isinstance(department_id, uuid.UUID)
    deal = {**deal, "step_id": first_step(connection, department_id)}
    inserted = connection.defer(_ROUTED_DEAL[as_json], deal, meaning=meaning)
    routed = _routed(len(given), as_json)
    # The deal's values and its customers': each insert sets every column it is given a value
    # of, and none is named as a column one of them leaves out (a deal's employee_id and
    # version, a customer's version, an event's position).
    values = {
        **deal,
        **{
            _customer_parameter(index, name): value
            for index, customer in enumerate(given)
            for name, value in customer.items()
        },
    }
    customers_inserted = None
    if routed.customers is not None and routed.links is not None:
        customers_inserted = connection.defer(routed.customers, values)
        connection.defer(routed.links, values)
    recorded = connection.defer(routed.events, values)
    wakes = connection.defer(WAKES_IN_DEPARTMENT, {"department_id": department_id})
    return Created(inserted, customers_inserted, recorded if as_json else None, wakes)


def created(inserted: Created, tenant_id: uuid.UUID) -> Deal:
    """The deal ``defer_create(as_json=False)`` inserted, with its customers."""
    if inserted.wakes is not None:
        added = () if inserted.customers is None else inserted.customers.rows().mappings()
        found = [to_customer(row, tenant_id) for row in added]
        return to_deal(inserted.deal.rows().mappings().one(), found)
    rows = inserted.deal.rows().mappings().all()
    found = [
        to_customer(
            {
                name: row[label]
                for name, label in zip(_CUSTOMER_COLUMNS, _CUSTOMER_LABELS, strict=True)
            },
            tenant_id,
        )
        for row in rows
        if row["customer_id"] is not None
    ]
    return to_deal(rows[0], found)


def created_as_json(inserted: Created) -> tuple[uuid.UUID, int, str]:
    """The deal ``defer_create(as_json=True)`` inserted: its id, version and JSON text."""
    row = inserted.deal.rows().one()
    if inserted.shown is not None:
        return row[0], row[1], inserted.shown.rows().all()[-1][0]
    return row[0], row[1], row[2]


def created_wakes(inserted: Created) -> bool:
    """Whether the worker is to be woken for the events ``defer_create`` recorded."""
    if inserted.wakes is not None:
        return bool(inserted.wakes.rows().scalar())
    row = inserted.deal.rows().first()
    return row is not None and bool(row[-1])
