from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import Connection, RowMapping, func, insert, select

from dealbase.platform.customers.models import Customer, CustomerFields
from dealbase.platform.ids import new_id
from dealbase.platform.tables import customers, deal_customers


def to_customer(row: RowMapping, tenant_id: uuid.UUID) -> Customer:
    return Customer(
        tenant_id=tenant_id, **{column.name: row[column.name] for column in customers.c}
    )


def insert_customers(
    connection: Connection,
    tenant_id: uuid.UUID,
    department_id: uuid.UUID,
    fields: Sequence[CustomerFields],
) -> list[Customer]:
    """Inserts in one statement; the result keeps the order of ``fields``."""
    if not fields:
        return []
    rows = (
        connection.execute(
            insert(customers)
            .values(created_at=func.now(), updated_at=func.now())
            .returning(*customers.c, sort_by_parameter_order=True),
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
    connection: Connection, tenant_id: uuid.UUID, department_id: uuid.UUID, customer_id: uuid.UUID
) -> Customer | None:
    row = (
        connection.execute(
            select(customers).where(
                customers.c.id == customer_id, customers.c.department_id == department_id
            )
        )
        .mappings()
        .first()
    )
    return None if row is None else to_customer(row, tenant_id)


def customers_of_deal(
    connection: Connection, tenant_id: uuid.UUID, deal_id: uuid.UUID
) -> list[Customer]:
    rows = connection.execute(
        select(customers)
        .join(deal_customers, deal_customers.c.customer_id == customers.c.id)
        .where(deal_customers.c.deal_id == deal_id)
        .order_by(deal_customers.c.position)
    ).mappings()
    return [to_customer(row, tenant_id) for row in rows]
