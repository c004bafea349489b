from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import ColumnElement, func, insert, or_, select

from dealbase.ids import new_id
from dealbase.platform.customers.models import Customer, CustomerFields, CustomerFilter
from dealbase.platform.pagination import PageRequest
from dealbase.platform.rows import in_department, owned_by
from dealbase.platform.tables import customers, deal_customers
from dealbase.tenancy.statements import Record, TenantConnection

# Named once: iterating a Table's columns is slow, and a page of deals maps 150 customer rows.
_COLUMNS = tuple(column.name for column in customers.c)


def to_customer(row: Record, tenant_id: uuid.UUID) -> Customer:
    return Customer(tenant_id=tenant_id, **{name: row[name] for name in _COLUMNS})


# Built once: building a statement costs more CPU than running it (coercing every column).
_INSERT = (
    insert(customers).values(created_at=func.now(), updated_at=func.now()).returning(*customers.c)
)


def insert_customers(
    connection: TenantConnection,
    tenant_id: uuid.UUID,
    department_id: uuid.UUID,
    fields: Sequence[CustomerFields],
) -> list[Customer]:
    """Inserts in one round trip; the result keeps the order of ``fields``."""
    if not fields:
        return []
    rows = (
        connection.execute(
            _INSERT,
            [
                {**item.model_dump(), "id": new_id(), "department_id": department_id}
                for item in fields
            ],
        )
        .mappings()
        .all()
    )
    return [to_customer(row, tenant_id) for row in rows]


def get_customer(
    connection: TenantConnection,
    tenant_id: uuid.UUID,
    department_id: uuid.UUID | None,
    customer_id: uuid.UUID,
) -> Customer | None:
    row = (
        connection.execute(select(customers).where(owned_by(customers, department_id, customer_id)))
        .mappings()
        .first()
    )
    return None if row is None else to_customer(row, tenant_id)


def _contains(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _matching(
    department_id: uuid.UUID | None, filters: CustomerFilter
) -> list[ColumnElement[bool]]:
    conditions = [in_department(customers, department_id)]
    if filters.email is not None:
        conditions.append(func.lower(customers.c.email) == filters.email.lower())
    if filters.q is not None:
        pattern = _contains(filters.q)
        conditions.append(
            or_(
                *(
                    column.ilike(pattern, escape="\\")
                    for column in (
                        customers.c.last_name,
                        customers.c.first_name,
                        customers.c.company,
                    )
                )
            )
        )
    if filters.updated_since is not None:
        conditions.append(customers.c.updated_at >= filters.updated_since)
    return conditions


def list_customers(
    connection: TenantConnection,
    tenant_id: uuid.UUID,
    department_id: uuid.UUID | None,
    filters: CustomerFilter,
    page: PageRequest,
) -> list[Customer]:
    """Up to ``page.limit + 1`` customers in id order (the extra one tells there is more)."""
    query = select(customers).where(*_matching(department_id, filters))
    if page.after is not None:
        query = query.where(customers.c.id > page.after)
    rows = connection.execute(query.order_by(customers.c.id).limit(page.limit + 1)).mappings()
    return [to_customer(row, tenant_id) for row in rows]


def count_customers(
    connection: TenantConnection, department_id: uuid.UUID | None, filters: CustomerFilter
) -> int:
    query = select(func.count()).select_from(customers).where(*_matching(department_id, filters))
    return int(connection.execute(query).scalar_one())


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
