"""Customers: their descriptor (``RECORD``, whose verbs are those of every synced record), and
their create, the customer and its event written by one statement."""

from __future__ import annotations

import uuid

from dealbase.db.units import AfterCommit, UnitOfWork
from dealbase.platform import records
from dealbase.platform.customers import repository
from dealbase.platform.customers.models import (
    Customer,
    CustomerFields,
    CustomerFilter,
    CustomerPatch,
)
from dealbase.platform.deals import repository as deals_repository
from dealbase.platform.events import service as events
from dealbase.platform.record_writes import IN_BULK
from dealbase.platform.resources import CUSTOMER
from dealbase.platform.validation import department_of

RECORD: records.SyncedRecord[Customer, CustomerFields, CustomerFilter] = records.SyncedRecord(
    noun="customer",
    to_model=lambda uow, row: repository.to_customer(row, uow.scope.tenant_id),
    read=lambda uow, customer_id: repository.get_customer(
        uow.connection, uow.scope.tenant_id, uow.scope.department_id, customer_id
    ),
    lists=records.Listing(
        models=lambda uow, filters, page, narrowed: repository.list_customers(
            uow.connection, uow.scope.tenant_id, uow.scope.department_id, filters, page, narrowed
        ),
        texts=lambda uow, filters, page, completed: repository.list_customers_as_json(
            uow.connection, uow.scope.tenant_id, uow.scope.department_id, filters, page, completed
        ),
        filtering=repository.CUSTOMER_FILTERS,
    ),
    shape=CUSTOMER,
    create_model=CustomerFields,
    upsert_model=CustomerFields,
    patch_model=CustomerPatch,
    writes=IN_BULK,
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
    record = RECORD.fitted(uow)
    inserted = _insert_recorded(uow, record, fields, as_json=False)
    if record.custom is None or not record.custom.fields:
        tenant_id = uow.scope.tenant_id
        return AfterCommit(lambda: repository.recorded(inserted, tenant_id))
    return AfterCommit(lambda: record.to_model(uow, inserted.row.rows().mappings().one()))


def create_later_as_json(
    uow: UnitOfWork, fields: CustomerFields
) -> AfterCommit[tuple[uuid.UUID, int, str]]:
    """``create_later``'s customer as its id, its version and its JSON text made by PostgreSQL
    (REST's answer)."""
    inserted = _insert_recorded(uow, RECORD.fitted(uow), fields, as_json=True)
    return AfterCommit(lambda: repository.recorded_as_json(inserted))


def _insert_recorded(
    uow: UnitOfWork,
    record: records.SyncedRecord[Customer, CustomerFields, CustomerFilter],
    fields: CustomerFields,
    *,
    as_json: bool,
) -> repository.Inserted:
    """The customer's insert and event, of the tenant's custom fields (``record``, fitted)."""
    scope = uow.scope
    inserted = repository.defer_insert_recorded(
        uow.connection,
        scope.tenant_id,
        department_of(scope),
        fields,
        as_json=as_json,
        shape=record.shape,
        custom=record.created_columns(fields),
    )
    events.recorded_by_statement(uow, lambda: repository.recorded_wakes(inserted))
    return inserted
