"""GET /events: the department's events in commit order, for integrations that poll."""

from __future__ import annotations

import re
import uuid
from typing import Any, cast

import orjson
from fastapi import APIRouter, Query, Request
from pydantic import ConfigDict, Field
from starlette.responses import Response

from dealbase.db.units import AfterCommit, UnitOfWork
from dealbase.edge.callers import AdmittedRoute, caller_of
from dealbase.edge.database import database_of
from dealbase.platform.event_types import EVENT_TYPES, EventType
from dealbase.platform.events import service
from dealbase.platform.events.models import EventFilter
from dealbase.rest_api.openapi import LIST_LIMIT, problem_responses
from dealbase.rest_api.schemas import Timestamp, WireModel

router = APIRouter(prefix="/events", tags=["events"], route_class=AdmittedRoute)


class EventOut(WireModel):
    """A change in the department: ``data`` is the resource as its GET returns it (for a
    deletion, as it was)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "01a2008c-1a00-7000-8f00-3b3b2532467b",
                    "type": "deal.step_changed",
                    "created_at": "2026-11-21T09:40:00.000000Z",
                    "tenant_id": "01a2008a-5757-7000-8f59-f1c22b8851ad",
                    "department_id": "01a2008a-5794-7000-99be-dd0cfa5754b5",
                    "data": {"id": "01a2008a-8a11-7000-9d35-e2bf8eeee32e", "name": "Engine"},
                    "changed_fields": ["step_id"],
                    "previous": {"step_id": "01a2008a-5794-7000-99be-dd0cfa5754b6"},
                }
            ]
        }
    )

    id: uuid.UUID
    type: EventType
    created_at: Timestamp
    tenant_id: uuid.UUID
    department_id: uuid.UUID
    data: dict[str, Any]
    changed_fields: list[str] | None = Field(
        default=None,
        description="Updates only (*.updated, deal.step_changed, deal.assigned): the fields "
        "whose values changed.",
    )
    previous: dict[str, Any] | None = Field(
        default=None, description="Updates only: the changed fields' values before."
    )


class EventList(WireModel):
    data: list[EventOut]
    next_cursor: str = Field(
        description="Pass as `after` to read on: after this page's last event, or where an "
        "empty page started. Never null: poll with it for events committed later."
    )


# Comma-separated known types: the OpenAPI document then admits only lists the route accepts.
_ONE_TYPE = "|".join(re.escape(name) for name in EVENT_TYPES)
TYPES_PATTERN = f"^(?:{_ONE_TYPE})(?:,(?:{_ONE_TYPE}))*$"


def _event_types(types: str | None) -> tuple[EventType, ...] | None:
    """The types ``TYPES_PATTERN`` admitted, each once."""
    if types is None:
        return None
    return tuple(cast(EventType, name) for name in dict.fromkeys(types.split(",")))


@router.get(
    "",
    summary="Read the events feed",
    description=(
        "The department's events of the last 30 days in commit order, a page at a time: each "
        "event once across pages. Start without `after`; then pass the `next_cursor` of the "
        "previous page, also to poll for new events."
    ),
    response_model=None,
    responses={
        200: {"model": EventList, "description": "A page of events."},
        **problem_responses(401, 403, 422),
    },
)
async def list_events(
    request: Request,
    after: str | None = Query(
        None,
        pattern=service.CURSOR_PATTERN,
        description="The `next_cursor` of the previous page, with the same `types`.",
    ),
    types: str | None = Query(
        None,
        max_length=400,
        pattern=TYPES_PATTERN,
        description="Comma-separated event types to show (default: all).",
    ),
    limit: int | None = LIST_LIMIT,
) -> Response:
    scope = caller_of(request)
    filters = EventFilter(types=_event_types(types))

    def page(uow: UnitOfWork) -> AfterCommit[tuple[list[str], str]]:
        return service.feed_as_json(uow, filters, limit, after)

    found: tuple[list[str], str] = await database_of(request).run(scope, page)
    texts, next_cursor = found
    # PostgreSQL's JSON of each event, joined rather than parsed (``json_text_page``).
    body = b"".join(
        (
            b'{"data":[',
            ",".join(texts).encode(),
            b'],"next_cursor":',
            orjson.dumps(next_cursor),
            b"}",
        )
    )
    return Response(body, media_type="application/json")
