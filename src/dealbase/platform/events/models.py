"""Events: what changed in a department, recorded in the transaction that changed it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from dealbase.platform.event_types import EventType
from dealbase.platform.resources import JsonObject, format_timestamp

# How long events stay in the feed; older ones are purged.
RETENTION_DAYS = 30


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event of the running transaction, written just before it commits."""

    id: uuid.UUID
    department_id: uuid.UUID
    type: EventType
    # The resource in its REST shape (for a deletion, as it was).
    data: JsonObject
    # For an update: the fields whose values it changed, and their values before.
    changed_fields: tuple[str, ...] | None = None
    previous: JsonObject | None = None


@dataclass(frozen=True, slots=True)
class Event:
    id: uuid.UUID
    tenant_id: uuid.UUID
    department_id: uuid.UUID
    # 1, 2, 3... per department, in commit order.
    position: int
    type: EventType
    data: JsonObject
    changed_fields: list[str] | None
    previous: JsonObject | None
    created_at: datetime


def event_json(event: Event) -> JsonObject:
    """The event as the feed shows it and webhooks deliver it; ``changed_fields`` and
    ``previous`` only where they apply."""
    shown: dict[str, Any] = {
        "id": str(event.id),
        "type": event.type,
        "created_at": format_timestamp(event.created_at),
        "tenant_id": str(event.tenant_id),
        "department_id": str(event.department_id),
        "data": event.data,
    }
    if event.changed_fields is not None:
        shown["changed_fields"] = event.changed_fields
        shown["previous"] = event.previous
    return shown


class EventFilter(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    # None: every type.
    types: tuple[EventType, ...] | None = None


@dataclass(frozen=True, slots=True)
class EventPage:
    """Events in commit order and where to poll from next (also when there were none)."""

    items: list[Event]
    next_cursor: str
