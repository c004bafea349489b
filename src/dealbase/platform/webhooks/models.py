"""Webhook endpoints: a department's URL, the events it subscribes to, and its signing secret."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Annotated, Generic, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from dealbase.platform.event_types import EVENT_TYPES, EventType
from dealbase.platform.validation import ClientInput, ShortText, UrlText, partial
from dealbase.platform.webhooks.addresses import url_shape

EventChoice = Literal[EventType, "*"]


def _one_selection(events: list[str]) -> list[str]:
    if len(set(events)) != len(events):
        raise PydanticCustomError("duplicate_item", "must not name an event type twice")
    if "*" in events and len(events) > 1:
        raise PydanticCustomError(
            "invalid_choice", 'must be either "*" alone or a list of event types'
        )
    return events


WebhookUrl = Annotated[UrlText, AfterValidator(url_shape)]
EventSelection = Annotated[
    list[EventChoice],
    Field(min_length=1, max_length=len(EVENT_TYPES)),
    AfterValidator(_one_selection),
    # The rule as the OpenAPI document states it: distinct event types, or "*" alone.
    WithJsonSchema(
        {
            "anyOf": [
                {
                    "type": "array",
                    "items": {"enum": list(EVENT_TYPES)},
                    "minItems": 1,
                    "uniqueItems": True,
                },
                {"type": "array", "items": {"const": "*"}, "minItems": 1, "maxItems": 1},
            ]
        }
    ),
]


class WebhookEndpointFields(ClientInput):
    """Where a department's events are sent: ``events`` names their types, or is ``["*"]`` for
    every type; ``ordered`` sends them one at a time in commit order."""

    url: WebhookUrl
    events: EventSelection
    enabled: bool = True
    description: ShortText | None = None
    ordered: bool = True


# PATCH /webhooks/{id}: absent fields stay; only description may be cleared.
WebhookEndpointPatch = partial(WebhookEndpointFields, "WebhookEndpointPatch")

Model = TypeVar("Model", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Checked(Generic[Model]):
    """An endpoint's fields (or changes) whose URL has passed the address check, which needs the
    network and so runs before the unit of work (``service.checked``): the service writes only
    these, so no caller can skip it."""

    value: Model


@dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    """An endpoint as it is read back; the secret is never part of it (see ``WithSecret``)."""

    id: uuid.UUID
    department_id: uuid.UUID
    url: str
    events: list[str]
    enabled: bool
    disabled_reason: str | None
    description: str | None
    ordered: bool
    previous_secret_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    version: int


@dataclass(frozen=True, slots=True)
class WithSecret(WebhookEndpoint):
    """An endpoint and its signing secret, as creating it or rotating the secret answers, once."""

    secret: str

    @classmethod
    def of(cls, endpoint: WebhookEndpoint, secret: str) -> WithSecret:
        return cls(
            **{field.name: getattr(endpoint, field.name) for field in fields(endpoint)},
            secret=secret,
        )


class WebhookEndpointFilter(ClientInput):
    """No filters: what a list's cursor is made under."""
