from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Select, Table, func, select, update
from sqlalchemy.dialects.postgresql import insert

from dealbase.db.statements import Record, built_once
from dealbase.db.transactions import TenantConnection
from dealbase.ids import new_id
from dealbase.platform.activities.models import Activity, ActivityFilter
from dealbase.platform.listing import BY_ID, ListFilters, Rule, Shape, equal
from dealbase.platform.pagination import PageRequest
from dealbase.platform.resources import ACTIVITY
from dealbase.platform.rows import OwnedRows, first_as, owned_by, unique_values_taken
from dealbase.platform.tables import activities, customers, deals, employees

# Its rows as every department-owned, versioned record's are read and written.
rows = OwnedRows(activities, "activity")

# The fields that name a row of another table, which must be of the activity's department.
REFERENCES = {"customer_id": customers, "deal_id": deals, "employee_id": employees}

_COLUMNS = tuple(column.name for column in activities.c)  # named once: see customers


def to_activity(row: Record) -> Activity:
    return Activity(**{name: row[name] for name in _COLUMNS})


def insert_activity(
    connection: TenantConnection,
    department_id: uuid.UUID,
    values: Mapping[str, object],
    table: Table = activities,
    to_model: Callable[[Record], Activity] | None = None,
) -> Activity | None:
    """The new activity; None when another activity of the department has its external id (ON
    CONFLICT DO NOTHING: the transaction stays usable, and a concurrent insert of the same
    external id is waited for; a unique custom field's value taken is ValueTaken). ``table``: the activities' with the tenant's custom fields'
    columns, which ``values`` may name, and whose row ``to_model`` reads."""
    inserted = (
        insert(table)
        .values(
            **values,
            id=new_id(),
            department_id=department_id,
            created_at=func.now(),
            updated_at=func.now(),
        )
        .on_conflict_do_nothing(index_elements=[table.c.department_id, table.c.external_id])
        .returning(*table.c)
    )
    # A unique custom field's value another activity has: 409 value_taken.
    with unique_values_taken(rows.noun):
        return first_as(connection, inserted, to_model or to_activity)


def get_activity(
    connection: TenantConnection, department_id: uuid.UUID | None, activity_id: uuid.UUID
) -> Activity | None:
    query = select(activities).where(owned_by(activities, department_id, activity_id))
    return first_as(connection, query, to_activity)


ACTIVITY_FILTERS = ListFilters(
    activities,
    (
        Rule("external_id", equal(activities.c.external_id)),
        Rule("customer_id", equal(activities.c.customer_id)),
        Rule("deal_id", equal(activities.c.deal_id)),
    ),
)


@functools.lru_cache(maxsize=64)
def _page_query(shape: Shape, after: bool, as_json: bool) -> Select[Any]:
    """Up to ``limit`` activities of a list in id order: the rows, or each one's id and JSON
    text."""
    columns: tuple[Any, ...] = (
        (activities.c.id, ACTIVITY.text_of_row(activities)) if as_json else tuple(activities.c)
    )
    query = select(*columns).where(*ACTIVITY_FILTERS.conditions(shape))
    return built_once(BY_ID.paged(query, activities, after))


def _page(
    connection: TenantConnection,
    department_id: uuid.UUID | None,
    filters: ActivityFilter,
    page: PageRequest,
    as_json: bool,
    completed: Callable[[Select[Any], dict[str, Any]], Select[Any]] | None = None,
) -> Any:
    shape, values = ACTIVITY_FILTERS.page_values(department_id, filters, BY_ID, page)
    query = _page_query(shape, page.after is not None, as_json)
    return connection.execute(query if completed is None else completed(query, values), values)


def list_activities(
    connection: TenantConnection,
    department_id: uuid.UUID | None,
    filters: ActivityFilter,
    page: PageRequest,
    narrowed: Callable[[Select[Any], dict[str, Any]], Select[Any]] | None = None,
) -> list[Activity]:
    """Up to ``page.limit + 1`` activities in id order (the extra one tells there is more), its
    statement run as ``narrowed`` makes it."""
    rows = _page(connection, department_id, filters, page, as_json=False, completed=narrowed)
    return [to_activity(row) for row in rows.mappings()]


def list_activities_as_json(
    connection: TenantConnection,
    department_id: uuid.UUID | None,
    filters: ActivityFilter,
    page: PageRequest,
    completed: Callable[[Select[Any], dict[str, Any]], Select[Any]],
) -> list[tuple[uuid.UUID, None, str]]:
    """``list_activities``, each activity as its JSON text made by PostgreSQL (its id beside
    it, for the cursor; no other sort value), its statement run as ``completed`` makes it."""
    rows = _page(connection, department_id, filters, page, as_json=True, completed=completed)
    return [(activity_id, None, text) for activity_id, text in rows]


def detach_from_deal(connection: TenantConnection, deal_id: uuid.UUID) -> None:
    """Activities outlive their deal: they lose it, as a change (new version) of their own."""
    connection.execute(
        update(activities)
        .where(activities.c.deal_id == deal_id)
        .values(deal_id=None, updated_at=func.now(), version=activities.c.version + 1)
    )


def first_of(
    connection: TenantConnection,
    parent: str,
    parent_ids: Sequence[uuid.UUID],
    department_id: uuid.UUID | None,
    per_parent: int,
) -> dict[uuid.UUID, list[Activity]]:
    """The first ``per_parent`` activities (oldest first) of each deal (``parent="deal_id"``)
    or customer (``"customer_id"``), in one statement for all of them."""
    found = rows.first_per_parent(
        connection, activities.c[parent], parent_ids, department_id, per_parent
    )
    return {key: [to_activity(row) for row in each] for key, each in found.items()}
