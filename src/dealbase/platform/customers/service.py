from __future__ import annotations

import uuid
from collections.abc import Sequence

from pydantic import BaseModel

from dealbase.errors import NotFound
from dealbase.platform.customers import repository
from dealbase.platform.customers.models import Customer, CustomerFields, CustomerFilter
from dealbase.platform.deals import repository as deals_repository
from dealbase.platform.events import service as events
from dealbase.platform.pagination import Page, page_request
from dealbase.platform.resources import customer_json
from dealbase.platform.rows import by_ids as by_row_ids
from dealbase.platform.rows import delete_versioned, update_versioned
from dealbase.platform.tables import customers
from dealbase.platform.validation import department_of
from dealbase.platform.versioning import Expected
from dealbase.tenancy.database import UnitOfWork


def create(uow: UnitOfWork, fields: CustomerFields) -> Customer:
    scope = uow.scope
    (customer,) = repository.insert_customers(
        uow.connection, scope.tenant_id, department_of(scope), [fields]
    )
    events.record(uow, "customer.created", customer.department_id, customer_json(customer))
    return customer


def get(uow: UnitOfWork, customer_id: uuid.UUID) -> Customer:
    scope = uow.scope
    customer = repository.get_customer(
        uow.connection, scope.tenant_id, scope.department_id, customer_id
    )
    if customer is None:
        raise NotFound(f"No customer has the id {customer_id}.")
    return customer


def list_page(
    uow: UnitOfWork, filters: CustomerFilter, limit: int | None, cursor: str | None
) -> Page[Customer]:
    page = page_request(limit, cursor, filters)
    scope = uow.scope
    rows = repository.list_customers(
        uow.connection, scope.tenant_id, scope.department_id, filters, page
    )
    return page.page_of(rows, lambda customer: customer.id, filters)


def count(uow: UnitOfWork, filters: CustomerFilter) -> int:
    return repository.count_customers(uow.connection, uow.scope.department_id, filters)


def update(
    uow: UnitOfWork, customer_id: uuid.UUID, patch: BaseModel, expected: Expected | None = None
) -> Customer:
    """Applies the fields ``patch`` carries (``null`` clears); ``expected`` guards lost updates.

    Every accepted PATCH, even an empty one, is a new version; only one that changes a value
    is an event (``customer.updated``).
    """
    changes = patch.model_dump(exclude_unset=True)
    before, after = update_versioned(
        uow.connection,
        customers,
        uow.scope.department_id,
        customer_id,
        changes,
        expected,
        "customer",
    )
    customer = repository.to_customer(after, uow.scope.tenant_id)
    changed, previous = events.changes(before, after, changes)
    if changed:
        events.record(
            uow,
            "customer.updated",
            customer.department_id,
            customer_json(customer),
            changed,
            previous,
        )
    return customer


def delete(uow: UnitOfWork, customer_id: uuid.UUID, expected: Expected | None = None) -> None:
    """Deletes the customer, its links to deals (a change of those deals) and its activities."""
    # While the links still exist; a refused delete rolls this back with it.
    deals_repository.touch_deals_of_customer(uow.connection, customer_id)
    row = delete_versioned(
        uow.connection, customers, uow.scope.department_id, customer_id, expected, "customer"
    )
    customer = repository.to_customer(row, uow.scope.tenant_id)
    events.record(uow, "customer.deleted", customer.department_id, customer_json(customer))


def by_ids(uow: UnitOfWork, customer_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Customer]:
    """Many customers the caller may see, by id, in one statement; unknown ids are left out."""
    rows = by_row_ids(uow.connection, customers, uow.scope.department_id, customer_ids)
    return {
        row_id: repository.to_customer(row, uow.scope.tenant_id) for row_id, row in rows.items()
    }
