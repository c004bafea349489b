from __future__ import annotations

import uuid

from dealbase.platform.customers import repository as customers_repository
from dealbase.platform.deals import repository
from dealbase.platform.deals.models import Deal, DealCreate
from dealbase.platform.errors import Conflict, NotFound
from dealbase.platform.validation import department_of
from dealbase.tenancy.database import UnitOfWork


def create(uow: UnitOfWork, fields: DealCreate) -> Deal:
    """The deal starts unassigned in its department's first step, with one new customer per
    element of ``customers``, linked in request order."""
    scope, connection = uow.scope, uow.connection
    department_id = department_of(scope)
    step_id = repository.first_step_id(connection, department_id)
    if step_id is None:
        raise Conflict("The department has no pipeline steps, so a deal has nowhere to start.")
    row = repository.insert_deal(
        connection, department_id, step_id, fields.model_dump(exclude={"customers"})
    )
    customers = customers_repository.insert_customers(
        connection, scope.tenant_id, department_id, fields.customers
    )
    repository.link_customers(connection, row["id"], [customer.id for customer in customers])
    return repository.to_deal(row, None, customers)


def get(uow: UnitOfWork, deal_id: uuid.UUID) -> Deal:
    scope, connection = uow.scope, uow.connection
    row = repository.get_deal_row(connection, department_of(scope), deal_id)
    if row is None:
        raise NotFound(f"No deal has the id {deal_id}.")
    customers = customers_repository.customers_of_deal(connection, scope.tenant_id, deal_id)
    return repository.to_deal(row, row["employee_name"], customers)
