from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TypeVar

from pydantic import BaseModel

from dealbase.db.units import AfterCommit, UnitOfWork
from dealbase.platform import records
from dealbase.platform.batches.models import Batch, Result, single_upsert
from dealbase.platform.customers import repository
from dealbase.platform.customers.models import Customer, CustomerFields, CustomerFilter
from dealbase.platform.deals import repository as deals_repository
from dealbase.platform.events import service as events
from dealbase.platform.pagination import Page, page_request
from dealbase.platform.resources import CUSTOMER
from dealbase.platform.validation import department_of
from dealbase.platform.versioning import Expected

T = TypeVar("T")


RECORD: records.SyncedRecord[Customer, CustomerFields] = records.SyncedRecord(
    rows=repository.rows,
    to_model=lambda uow, row: repository.to_customer(row, uow.scope.tenant_id),
    shape=CUSTOMER,
    upsert_model=CustomerFields,
    writes=records.IN_BULK,
    # While its links still exist: the deals it is linked to change with it.
    before_delete=lambda uow, customer_id: deals_repository.touch_deals_of_customer(
        uow.connection, customer_id
    ),
)


def create(uow: UnitOfWork, fields: CustomerFields) -> Customer:
    return create_later(uow, fields).read()


def create_later(uow: UnitOfWork, fields: CustomerFields) -> AfterCommit[Customer]:
    """``create``, its INSERT and its event sent with the unit of work's next round trip: a
    unit of work that commits next writes the customer in one round trip. An external id
    another customer of the department has is ExternalIdTaken, raised by that round trip
    (nothing was written)."""
    inserted = _insert_recorded(uow, fields, as_json=False)
    tenant_id = uow.scope.tenant_id
    return AfterCommit(lambda: repository.recorded(inserted, tenant_id))


def create_later_as_json(
    uow: UnitOfWork, fields: CustomerFields
) -> AfterCommit[tuple[uuid.UUID, int, str]]:
    """``create_later``'s customer as its id, its version and its JSON text made by PostgreSQL
    (REST's answer)."""
    inserted = _insert_recorded(uow, fields, as_json=True)
    return AfterCommit(lambda: repository.recorded_as_json(inserted))


def _insert_recorded(
    uow: UnitOfWork, fields: CustomerFields, *, as_json: bool
) -> repository.Inserted:
    scope = uow.scope
    inserted = repository.defer_insert_recorded(
        uow.connection, scope.tenant_id, department_of(scope), fields, as_json=as_json
    )
    events.recorded_by_statement(uow, lambda: repository.recorded_wakes(inserted))
    return inserted


def get(uow: UnitOfWork, customer_id: uuid.UUID) -> Customer:
    scope = uow.scope
    customer = repository.get_customer(
        uow.connection, scope.tenant_id, scope.department_id, customer_id
    )
    if customer is None:
        raise repository.rows.not_found(customer_id)
    return customer


def get_as_json(uow: UnitOfWork, customer_id: uuid.UUID) -> tuple[int, str]:
    """``get``'s customer as its version and its JSON text made by PostgreSQL."""
    return records.get_as_json(RECORD, uow, customer_id)


def list_page(
    uow: UnitOfWork, filters: CustomerFilter, limit: int | None, cursor: str | None
) -> Page[Customer]:
    page = page_request(limit, cursor, filters)
    scope = uow.scope
    rows = repository.list_customers(
        uow.connection, scope.tenant_id, scope.department_id, filters, page
    )
    return page.page_of(rows, lambda customer: customer.id, filters)


def list_page_as_json(
    uow: UnitOfWork, filters: CustomerFilter, limit: int | None, cursor: str | None
) -> Page[str]:
    """``list_page`` with each customer as its JSON text made by PostgreSQL (a page of REST's
    list, written without a read model)."""
    page = page_request(limit, cursor, filters)
    scope = uow.scope
    rows = repository.list_customers_as_json(
        uow.connection, scope.tenant_id, scope.department_id, filters, page
    )
    found = page.page_of(rows, lambda row: row[0], filters)
    return Page([text for _, text in found.items], found.next_cursor, found.cursors)


def count(uow: UnitOfWork, filters: CustomerFilter) -> int:
    return repository.count_customers(uow.connection, uow.scope.department_id, filters)


def update(
    uow: UnitOfWork, customer_id: uuid.UUID, patch: BaseModel, expected: Expected | None = None
) -> Customer:
    """Applies the fields ``patch`` carries (``null`` clears); ``expected`` guards lost updates.

    Every accepted PATCH, even an empty one, is a new version; only one that changes a value
    is an event (``customer.updated``).
    """
    return records.update(RECORD, uow, customer_id, patch.model_dump(exclude_unset=True), expected)


def update_as_json(
    uow: UnitOfWork, customer_id: uuid.UUID, patch: BaseModel, expected: Expected | None = None
) -> AfterCommit[tuple[int, str]]:
    """``update``'s customer as its version and its JSON text made by PostgreSQL, from one
    statement sent with the unit of work's next round trip (REST's answer)."""
    return records.update_as_json(
        RECORD, uow, customer_id, patch.model_dump(exclude_unset=True), expected
    )


def delete(uow: UnitOfWork, customer_id: uuid.UUID, expected: Expected | None = None) -> None:
    """Deletes the customer, its links to deals (a change of those deals) and its activities."""
    records.delete(RECORD, uow, customer_id, expected)


def by_ids(uow: UnitOfWork, customer_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Customer]:
    """Many customers the caller may see, by id, in one statement; unknown ids are left out."""
    return records.by_ids(RECORD, uow, customer_ids)


def upsert(
    uow: UnitOfWork,
    external_id: str,
    fields: CustomerFields,
    *,
    expected: Expected | None = None,
    unless: Expected | None = None,
) -> AfterCommit[Result[Customer]]:
    """Creates the customer with ``external_id``, or changes the fields the body gave of
    the one that has it. A change that changes nothing writes nothing (no version, no event).
    ``expected`` (If-Match) needs the customer to exist at one of its versions; ``unless``
    (If-None-Match) needs it not to exist at one of its versions (``*``: not to exist)."""
    return records.upsert(RECORD, uow, single_upsert(external_id, fields, expected, unless))


def batch(
    uow: UnitOfWork, operations: Batch, *, atomic: bool
) -> AfterCommit[list[Result[Customer]]]:
    """Creates and upserts up to a thousand customers, in a few statements whatever their
    number (``records.apply_writes``: in bulk)."""
    return records.batch(RECORD, uow, operations, create=CustomerFields, atomic=atomic)
