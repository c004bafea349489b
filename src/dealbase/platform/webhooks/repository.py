from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import timedelta

from sqlalchemy import bindparam, func, insert, select, update

from dealbase.db.statements import Record, built_once, dataclass_of_row
from dealbase.db.transactions import TenantConnection
from dealbase.ids import new_id
from dealbase.platform.pagination import PageRequest
from dealbase.platform.rows import (
    OwnedRows,
    first_as,
    in_department,
    insert_reading,
    lookup,
    owned_by,
)
from dealbase.platform.tables import event_positions, webhook_endpoints
from dealbase.platform.versioning import Expected
from dealbase.platform.webhooks.models import WebhookEndpoint

# Its rows as every department-owned, versioned record's are read and written.
rows = OwnedRows(webhook_endpoints, "webhook endpoint")

# How long the secret a rotation replaced still signs, so receivers can switch without a gap.
ROTATION_OVERLAP = timedelta(hours=24)

# What is read back: every column but the secrets, which leave the service only when issued,
# and the worker's bookkeeping.
_READ = [
    column
    for column in webhook_endpoints.c
    if column.name not in ("secret", "previous_secret", "scanned_position", "failing_since")
]


def to_endpoint(row: Record) -> WebhookEndpoint:
    return dataclass_of_row(WebhookEndpoint, row, events=list(row["event_types"]))


def columns_of(fields: Mapping[str, object]) -> dict[str, object]:
    """The input's field names as the table's columns."""
    return {("event_types" if name == "events" else name): value for name, value in fields.items()}


def update_endpoint(
    connection: TenantConnection,
    department_id: uuid.UUID | None,
    endpoint_id: uuid.UUID,
    changes: Mapping[str, object],
    expected: Expected | None,
) -> WebhookEndpoint:
    """The endpoint with ``changes`` (its columns' values) as a new version, if the caller owns
    it (else NotFound) and it is at a version ``expected`` admits (else PreconditionFailed)."""
    _, row = rows.update(connection, department_id, endpoint_id, changes, expected)
    return to_endpoint(row)


def delete_endpoint(
    connection: TenantConnection,
    department_id: uuid.UUID | None,
    endpoint_id: uuid.UUID,
    expected: Expected | None,
) -> None:
    """Deletes the endpoint on the terms ``update_endpoint`` changes it."""
    rows.delete(connection, department_id, endpoint_id, expected)


# On a distributed schema, a new endpoint's start (``insert_endpoint``): the department's last
# position, as the endpoint's INSERT reads it on a single server. Nothing when the department
# has no position yet: the INSERT's 0 stays.
_START_AT_LAST_POSITION = built_once(
    update(webhook_endpoints)
    .where(
        webhook_endpoints.c.id == bindparam("endpoint_id"),
        event_positions.c.department_id == webhook_endpoints.c.department_id,
    )
    .values(scanned_position=event_positions.c.last_position)
)


def insert_endpoint(
    connection: TenantConnection,
    department_id: uuid.UUID,
    fields: Mapping[str, object],
    secret: str,
) -> WebhookEndpoint:
    """The new endpoint, whose delivery starts with the department's next event: its start is
    the department's last position, read by the statement that writes it.

    On a single server one statement, the INSERT reading the position. On a distributed schema
    Citus would pull that INSERT ... SELECT through the coordinator (its target list has
    ``now()``), so two statements in one round trip, each routed whole: the INSERT ... VALUES
    of the endpoint at 0, then the UPDATE that moves it to the last position."""
    endpoint_id = new_id()
    given = {**columns_of(fields), "id": endpoint_id, "department_id": department_id}
    stamps = {"created_at": func.now(), "updated_at": func.now()}
    if connection.distributed:
        values = {**given, "secret": secret, "scanned_position": 0, **stamps}
        inserted = connection.defer(insert(webhook_endpoints).values(values).returning(*_READ), {})
        connection.execute(_START_AT_LAST_POSITION, {"endpoint_id": endpoint_id})
        return to_endpoint(inserted.rows().mappings().one())
    last_position = lookup(
        select(event_positions.c.last_position).where(
            event_positions.c.department_id == department_id
        ),
        "last_position",
    )
    values = {
        **given,
        "secret": secret,
        "scanned_position": func.coalesce(
            select(last_position.c.last_position).scalar_subquery(), 0
        ),
        **stamps,
    }
    row = (
        connection.execute(
            insert_reading(webhook_endpoints, values, last_position).returning(*_READ)
        )
        .mappings()
        .one()
    )
    return to_endpoint(row)


def get_endpoint(
    connection: TenantConnection, department_id: uuid.UUID | None, endpoint_id: uuid.UUID
) -> WebhookEndpoint | None:
    query = select(*_READ).where(owned_by(webhook_endpoints, department_id, endpoint_id))
    return first_as(connection, query, to_endpoint)


def list_endpoints(
    connection: TenantConnection, department_id: uuid.UUID | None, page: PageRequest
) -> list[WebhookEndpoint]:
    query = select(*_READ).where(in_department(webhook_endpoints, department_id))
    if page.after is not None:
        query = query.where(webhook_endpoints.c.id > page.after)
    rows = connection.execute(
        query.order_by(webhook_endpoints.c.id).limit(page.limit + 1)
    ).mappings()
    return [to_endpoint(row) for row in rows]


def count_endpoints(connection: TenantConnection, department_id: uuid.UUID | None) -> int:
    query = (
        select(func.count())
        .select_from(webhook_endpoints)
        .where(in_department(webhook_endpoints, department_id))
    )
    return int(connection.execute(query).scalar_one())


def rotation(new_secret: str) -> dict[str, object]:
    """The changes of a rotation: the new secret signs from now on, the one it replaces until
    the overlap ends (a secret replaced earlier stops at once)."""
    return {
        "secret": new_secret,
        "previous_secret": webhook_endpoints.c.secret,
        "previous_secret_expires_at": func.now() + ROTATION_OVERLAP,
    }
