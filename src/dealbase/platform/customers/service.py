from __future__ import annotations

import uuid

from dealbase.platform.customers import repository
from dealbase.platform.customers.models import Customer, CustomerFields
from dealbase.platform.errors import NotFound
from dealbase.platform.validation import department_of
from dealbase.tenancy.database import UnitOfWork


def create(uow: UnitOfWork, fields: CustomerFields) -> Customer:
    scope = uow.scope
    (customer,) = repository.insert_customers(
        uow.connection, scope.tenant_id, department_of(scope), [fields]
    )
    return customer


def get(uow: UnitOfWork, customer_id: uuid.UUID) -> Customer:
    scope = uow.scope
    customer = repository.get_customer(
        uow.connection, scope.tenant_id, department_of(scope), customer_id
    )
    if customer is None:
        raise NotFound(f"No customer has the id {customer_id}.")
    return customer
