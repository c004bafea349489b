from __future__ import annotations

import uuid
from collections.abc import Mapping

from sqlalchemy import ColumnElement, func, insert, select, update

from dealbase.ids import new_id
from dealbase.platform.activities.models import Activity, ActivityFilter
from dealbase.platform.pagination import PageRequest
from dealbase.platform.rows import in_department, owned_by
from dealbase.platform.tables import activities
from dealbase.tenancy.statements import Record, TenantConnection

_COLUMNS = tuple(column.name for column in activities.c)  # named once: see customers


def to_activity(row: Record) -> Activity:
    return Activity(**{name: row[name] for name in _COLUMNS})


def insert_activity(
    connection: TenantConnection, department_id: uuid.UUID, values: Mapping[str, object]
) -> Activity:
    row = (
        connection.execute(
            insert(activities)
            .values(
                **values,
                id=new_id(),
                department_id=department_id,
                created_at=func.now(),
                updated_at=func.now(),
            )
            .returning(*activities.c)
        )
        .mappings()
        .one()
    )
    return to_activity(row)


def get_activity(
    connection: TenantConnection, department_id: uuid.UUID | None, activity_id: uuid.UUID
) -> Activity | None:
    row = (
        connection.execute(
            select(activities).where(owned_by(activities, department_id, activity_id))
        )
        .mappings()
        .first()
    )
    return None if row is None else to_activity(row)


def _matching(
    department_id: uuid.UUID | None, filters: ActivityFilter
) -> list[ColumnElement[bool]]:
    conditions = [in_department(activities, department_id)]
    if filters.external_id is not None:
        conditions.append(activities.c.external_id == filters.external_id)
    if filters.customer_id is not None:
        conditions.append(activities.c.customer_id == filters.customer_id)
    if filters.deal_id is not None:
        conditions.append(activities.c.deal_id == filters.deal_id)
    return conditions


def list_activities(
    connection: TenantConnection,
    department_id: uuid.UUID | None,
    filters: ActivityFilter,
    page: PageRequest,
) -> list[Activity]:
    query = select(activities).where(*_matching(department_id, filters))
    if page.after is not None:
        query = query.where(activities.c.id > page.after)
    rows = connection.execute(query.order_by(activities.c.id).limit(page.limit + 1)).mappings()
    return [to_activity(row) for row in rows]


def count_activities(
    connection: TenantConnection, department_id: uuid.UUID | None, filters: ActivityFilter
) -> int:
    query = select(func.count()).select_from(activities).where(*_matching(department_id, filters))
    return int(connection.execute(query).scalar_one())


def detach_from_deal(connection: TenantConnection, deal_id: uuid.UUID) -> None:
    """Activities outlive their deal: they lose it, as a change (new version) of their own."""
    connection.execute(
        update(activities)
        .where(activities.c.deal_id == deal_id)
        .values(deal_id=None, updated_at=func.now(), version=activities.c.version + 1)
    )
