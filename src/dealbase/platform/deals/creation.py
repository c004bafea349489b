"""A deal's create with its new customers, their links and their events (moved from the
repository, which it outgrew)."""

from __future__ import annotations

import functools
import uuid
from typing import Any

import orjson
from sqlalchemy import (
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

from dealbase.db.faults import ErrorMeaning
from dealbase.db.statements import built_once
from dealbase.db.transactions import Deferred, TenantConnection
from dealbase.ids import new_ids
from dealbase.platform.customers.repository import to_customer
from dealbase.platform.deals.models import Deal, DealCreate
from dealbase.platform.deals.repository import to_deal
from dealbase.platform.events.repository import recorded_rows
from dealbase.platform.resources import CUSTOMER_JSON_COLUMN, new_deal_json_sql
from dealbase.platform.rows import insert_reading, lookup
from dealbase.platform.tables import customers, deal_customers, deals, steps

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
    # Looked up as Citus plans it (``rows.lookup``).
    first_step = lookup(
        select(steps.c.id)
        .where(steps.c.department_id == department_id)
        .order_by(steps.c.position)
        .limit(1),
        "first_step",
    )
    new_deal = (
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
    given_rows = (
        func.json_to_recordset(cast(bindparam("customers", type_=Text), JSON))
        .table_valued(
            *(column(name, customers.c[name].type) for name in _NEW_CUSTOMER_COLUMNS),
            column("position", Integer),
            column("event_id", UUID(as_uuid=True)),
        )
        .render_derived(name="given_rows", with_types=True)
    )
    given = select(given_rows).cte("given")
    # Their department read from the deal's row: the customers go in after the deal.
    new_customers = (
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
        # With each one's JSON, which PostgreSQL computed for its row (migration t0010).
        .returning(*customers.c, literal_column(CUSTOMER_JSON_COLUMN))
        .cte("new_customers")
    )
    shown_customers = (
        select(
            new_customers,
            given.c.position,
            given.c.event_id,
            new_customers.c[CUSTOMER_JSON_COLUMN].label("shown"),
        )
        .join_from(new_customers, given, given.c.id == new_customers.c.id)
        .cte("shown_customers")
    )
    # Read from the inserted customers (inserted after the deal, whose department they read),
    # not from the request: Citus runs each of a statement's data-modifying CTEs as a statement
    # of its own, in the order they depend on each other, and the links' foreign keys look for
    # rows that went in before. From ``shown_customers``, which joined them to their positions
    # already: one join fewer to start (89,000 instructions of PostgreSQL a deal).
    new_links = (
        insert(deal_customers)
        .from_select(
            ["deal_id", "customer_id", "position"],
            select(deal_id, shown_customers.c.id, shown_customers.c.position),
        )
        .cte("new_links")
    )
    listed = select(
        func.coalesce(
            func.json_agg(aggregate_order_by(shown_customers.c.shown, shown_customers.c.position)),
            literal_column("'[]'::json"),
        )
    ).scalar_subquery()
    shown_deal = select(new_deal, new_deal_json_sql(new_deal, listed).label("shown")).cte(
        "shown_deal"
    )
    no_fields = cast(null(), ARRAY(Text)).label("changed_fields")
    no_previous = cast(null(), JSON).label("previous")
    recorded, wakes = recorded_rows(
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
    statement: Select[Any]
    if as_json:
        statement = select(
            shown_deal.c.id,
            shown_deal.c.version,
            cast(shown_deal.c.shown, Text).label("shown"),
            wakes.label("wakes"),
        )
    else:
        statement = (
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
    return built_once(statement.add_cte(new_links, recorded))


def defer_create(
    connection: TenantConnection,
    tenant_id: uuid.UUID,
    department_id: uuid.UUID,
    fields: DealCreate,
    meaning: ErrorMeaning,
    *,
    as_json: bool,
) -> Deferred:
    """``_create_statement``, sent with the unit of work's next round trip; ``meaning`` says
    what its failure means (``create_failure``)."""
    count = len(fields.customers)
    # In increasing order: the customers' ids, the deal's, then the events' (their ids order
    # them within the transaction: the customers', then the deal's).
    ids = new_ids(2 * count + 2)
    given = [
        {
            **customer.model_dump(exclude_none=True),
            "id": ids[index],
            "position": index + 1,
            "event_id": ids[count + 1 + index],
        }
        for index, customer in enumerate(fields.customers)
    ]
    values: dict[str, object] = {name: getattr(fields, name) for name in _NEW_DEAL_FIELDS}
    values.update(
        id=ids[count],
        department_id=department_id,
        customers=orjson.dumps(given).decode(),
        event_id=ids[-1],
        tenant_id=str(tenant_id),
    )
    return connection.defer(_create_statement(as_json), values, meaning=meaning)


def created(inserted: Deferred, tenant_id: uuid.UUID) -> Deal:
    """The deal ``defer_create(as_json=False)`` inserted, with its customers."""
    rows = inserted.rows().mappings().all()
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


def created_as_json(inserted: Deferred) -> tuple[uuid.UUID, int, str]:
    """The deal ``defer_create(as_json=True)`` inserted: its id, version and JSON text."""
    row = inserted.rows().one()
    return row[0], row[1], row[2]


def created_wakes(inserted: Deferred) -> bool:
    """Whether the worker is to be woken for the events ``defer_create`` recorded."""
    row = inserted.rows().first()
    return row is not None and bool(row[-1])
