from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TypeVar

from pydantic import BaseModel

from dealbase.errors import DomainError
from dealbase.ids import new_id
from dealbase.platform import records
from dealbase.platform.batches import service as batches
from dealbase.platform.batches import upserts
from dealbase.platform.batches.models import Batch, Result, Write, single_upsert
from dealbase.platform.batches.upserts import Judged
from dealbase.platform.customers import repository
from dealbase.platform.customers.models import Customer, CustomerFields, CustomerFilter
from dealbase.platform.deals import repository as deals_repository
from dealbase.platform.events import service as events
from dealbase.platform.pagination import Page, page_request
from dealbase.platform.resources import JsonObject, customer_json, json_value
from dealbase.platform.validation import department_of
from dealbase.platform.versioning import Expected
from dealbase.tenancy.database.connections import AfterCommit, UnitOfWork
from dealbase.tenancy.database.statements import Deferred

T = TypeVar("T")


RECORD: records.SyncedRecord[Customer] = records.SyncedRecord(
    rows=repository.rows,
    to_model=lambda uow, row: repository.to_customer(row, uow.scope.tenant_id),
    as_json=customer_json,
    # While its links still exist: the deals it is linked to change with it.
    before_delete=lambda uow, customer_id: deals_repository.touch_deals_of_customer(
        uow.connection, customer_id
    ),
)


def create(uow: UnitOfWork, fields: CustomerFields) -> Customer:
    return create_later(uow, fields).read()


def create_later(uow: UnitOfWork, fields: CustomerFields) -> AfterCommit[Customer]:
    """``create``, its INSERT and its event one statement sent with the unit of work's next
    round trip: a unit of work that commits next writes the customer in one round trip. An
    external id another customer of the department has is ExternalIdTaken when read (nothing
    was written)."""
    inserted = _insert_recorded(uow, fields)
    tenant_id = uow.scope.tenant_id
    return AfterCommit(lambda: _created(repository.recorded(inserted, tenant_id)))


def create_later_as_json(
    uow: UnitOfWork, fields: CustomerFields
) -> AfterCommit[tuple[uuid.UUID, int, str]]:
    """``create_later``'s customer as its id, its version and the JSON text
    ``resources.customer_json`` would make, made by PostgreSQL (REST's answer)."""
    inserted = _insert_recorded(uow, fields)
    return AfterCommit(lambda: _created(repository.recorded_as_json(inserted)))


def _insert_recorded(uow: UnitOfWork, fields: CustomerFields) -> Deferred:
    scope = uow.scope
    inserted = repository.defer_insert_recorded(
        uow.connection, scope.tenant_id, department_of(scope), fields
    )
    events.recorded_by_statement(uow, lambda: repository.recorded_wakes(inserted))
    return inserted


def _created(found: T | None) -> T:
    """What an insert of ``_insert_recorded`` returned; none: the external id was taken."""
    if found is None:
        raise repository.external_id_taken()
    return found


def get(uow: UnitOfWork, customer_id: uuid.UUID) -> Customer:
    scope = uow.scope
    customer = repository.get_customer(
        uow.connection, scope.tenant_id, scope.department_id, customer_id
    )
    if customer is None:
        raise repository.rows.not_found(customer_id)
    return customer


def get_as_json(uow: UnitOfWork, customer_id: uuid.UUID) -> tuple[int, str]:
    """``get``'s customer as its version and the JSON text ``resources.customer_json`` would
    make, made by PostgreSQL."""
    scope = uow.scope
    found = repository.get_customer_as_json(
        uow.connection, scope.tenant_id, scope.department_id, customer_id
    )
    if found is None:
        raise repository.rows.not_found(customer_id)
    return found


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
    """``list_page`` with each customer as the JSON text ``resources.customer_json`` would
    make, made by PostgreSQL (a page of REST's list, written without a read model)."""
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
) -> Result[Customer]:
    """Creates the customer with ``external_id``, or changes the fields the body gave of
    the one that has it. A change that changes nothing writes nothing (no version, no event).
    ``expected`` (If-Match) needs the customer to exist at one of its versions; ``unless``
    (If-None-Match) needs it not to exist at one of its versions (``*``: not to exist)."""
    write = single_upsert(external_id, fields, expected, unless)
    result = apply_writes(uow, [write])[0]
    if result.error is not None:
        raise result.error
    return result


def batch(uow: UnitOfWork, operations: Batch, *, atomic: bool) -> list[Result[Customer]]:
    """Creates and upserts up to a thousand customers, in a few statements whatever their
    number (``apply_writes``)."""
    return batches.run(
        uow, operations, apply_writes, create=CustomerFields, upsert=CustomerFields, atomic=atomic
    )


def apply_writes(
    uow: UnitOfWork, writes: Sequence[Write[CustomerFields]]
) -> dict[int, Result[Customer]]:
    """Applies creates and upserts together: the customers they name are locked and read in one
    statement, the new ones inserted in one, the changed ones written in one. Events are
    recorded in the order of the writes, as single writes would have made them.

    Two writers upserting the same new external id at once: the second one's insert waits for
    the first's transaction and then skips the row (ON CONFLICT DO NOTHING), which it reads
    again, locked, and updates."""
    scope, connection = uow.scope, uow.connection
    department_id = department_of(scope)
    results: dict[int, Result[Customer]] = {}
    changes: list[tuple[Write[CustomerFields], Customer]] = []

    def judged(write: Write[CustomerFields], current: Customer | None) -> bool:
        """True when ``write`` is to be inserted; else its result or its change is noted."""
        verdict = upserts.judge("customer", write, current)
        if isinstance(verdict, DomainError):
            results[write.index] = Result.failed(verdict)
        elif verdict is Judged.CHANGE:
            assert current is not None, "a change has the record it changes"
            changes.append((write, current))
        return verdict is Judged.INSERT

    keyed = [write.external_id for write in writes if write.external_id is not None]
    current = repository.lock_by_external_ids(connection, scope.tenant_id, department_id, keyed)
    new = [
        (new_id(), write)
        for write in writes
        if judged(write, current.get(write.external_id) if write.external_id else None)
    ]
    # In external id order: two batches inserting the same new ids wait for each other in the
    # same order, never each for the other.
    new.sort(key=lambda pair: pair[1].external_id or "")
    inserted = repository.insert_new(
        connection, scope.tenant_id, department_id, [(id_, write.fields) for id_, write in new]
    )
    raced: list[Write[CustomerFields]] = []
    for customer_id, write in new:
        customer = inserted.get(customer_id)
        if customer is not None:
            results[write.index] = Result("created", customer)
        elif write.upsert:
            raced.append(write)
        else:
            results[write.index] = Result.failed(upserts.taken("customer", write))
    if raced:
        now_there = repository.lock_by_external_ids(
            connection, scope.tenant_id, department_id, [w.external_id or "" for w in raced]
        )
        for write in raced:
            found = now_there.get(write.external_id or "")
            if found is None:
                results[write.index] = Result.failed(upserts.raced_away("customer", write))
            else:
                judged(write, found)

    rows: list[dict[str, object]] = []
    changed_by_id: dict[uuid.UUID, tuple[Write[CustomerFields], Customer, dict[str, object]]] = {}
    for write, before in changes:
        changed = batches.changed_fields(write, before)
        if not changed:
            results[write.index] = Result("unchanged", before)
            continue
        row: dict[str, object] = {name: getattr(before, name) for name in repository.FIELD_COLUMNS}
        row.update(changed, id=before.id)
        rows.append(row)
        changed_by_id[before.id] = (write, before, changed)
    for customer_id, customer in repository.update_many(connection, scope.tenant_id, rows).items():
        write, _, _ = changed_by_id[customer_id]
        results[write.index] = Result("updated", customer)

    for write in sorted(writes, key=lambda write: write.index):
        result = results[write.index]
        if result.record is None:
            continue
        if result.outcome == "created":
            events.record(uow, "customer.created", department_id, customer_json(result.record))
        elif result.outcome == "updated":
            _, before, changed = changed_by_id[result.record.id]
            previous: JsonObject = {name: json_value(getattr(before, name)) for name in changed}
            events.record(
                uow,
                "customer.updated",
                department_id,
                customer_json(result.record),
                tuple(changed),
                previous,
            )
    return results
