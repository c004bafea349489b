from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import Connection, RowMapping, func, insert, select

from dealbase.platform.customers.models import Customer
from dealbase.platform.deals.models import Deal
from dealbase.platform.ids import new_id
from dealbase.platform.tables import deal_customers, deals, employees, steps


def first_step_id(connection: Connection, department_id: uuid.UUID) -> uuid.UUID | None:
    return connection.execute(
        select(steps.c.id)
        .where(steps.c.department_id == department_id)
        .order_by(steps.c.position)
        .limit(1)
    ).scalar_one_or_none()


def insert_deal(
    connection: Connection,
    department_id: uuid.UUID,
    step_id: uuid.UUID,
    values: dict[str, object],
) -> RowMapping:
    return (
        connection.execute(
            insert(deals)
            .values(
                id=new_id(),
                department_id=department_id,
                step_id=step_id,
                created_at=func.now(),
                updated_at=func.now(),
                **values,
            )
            .returning(*deals.c)
        )
        .mappings()
        .one()
    )


def link_customers(
    connection: Connection,
    deal_id: uuid.UUID,
    customer_ids: Sequence[uuid.UUID],
    first_position: int = 1,
) -> None:
    if customer_ids:
        connection.execute(
            insert(deal_customers),
            [
                {"deal_id": deal_id, "customer_id": customer_id, "position": position}
                for position, customer_id in enumerate(customer_ids, start=first_position)
            ],
        )


def get_deal_row(
    connection: Connection, department_id: uuid.UUID, deal_id: uuid.UUID
) -> RowMapping | None:
    return (
        connection.execute(
            select(*deals.c, employees.c.name.label("employee_name"))
            .outerjoin(employees, employees.c.id == deals.c.employee_id)
            .where(deals.c.id == deal_id, deals.c.department_id == department_id)
        )
        .mappings()
        .first()
    )


def to_deal(row: RowMapping, employee_name: str | None, customers: Sequence[Customer]) -> Deal:
    return Deal(
        id=row["id"],
        department_id=row["department_id"],
        step_id=row["step_id"],
        employee_id=row["employee_id"],
        employee_name=employee_name,
        name=row["name"],
        volume=row["volume"],
        deal_origin=row["deal_origin"],
        note=row["note"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        version=row["version"],
        customers=tuple(customers),
    )
