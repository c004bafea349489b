"""The webhooks the worker sends, in the OpenAPI document (OpenAPI 3.1 ``webhooks``): one per
event type, its body the event as the feed shows it."""

from __future__ import annotations

import copy
from typing import Any

from fastapi.openapi.constants import REF_TEMPLATE
from pydantic import BaseModel

from dealbase.platform.event_types import EVENT_TYPES
from dealbase.platform.webhooks.delivery_models import TEST_EVENT_TYPE
from dealbase.rest_api.schemas import ActivityOut, CustomerOut, DealOut

# The REST schema of each event's ``data``, by the resource its type names.
_RESOURCE_SCHEMAS: dict[str, type[BaseModel]] = {
    "customer": CustomerOut,
    "deal": DealOut,
    "activity": ActivityOut,
}

# What happened, by the part of the type after the resource.
_WHAT_HAPPENED = {
    "created": "A {resource} was created. `data` is the {resource} as its GET returns it.",
    "updated": (
        "A {resource}'s values changed. `data` is the {resource} after the change;"
        " `changed_fields` names the fields that changed and `previous` holds their values before."
    ),
    "deleted": "A {resource} was deleted. `data` is the {resource} as it was just before.",
    "step_changed": (
        "A {resource} moved to another pipeline step (sent beside `deal.updated`). `data` is the"
        ' {resource} after the move; `changed_fields` is `["step_id"]` and `previous` holds the'
        " step before."
    ),
    "assigned": (
        "A {resource} was assigned to another employee or unassigned (sent beside"
        " `deal.updated`). `data` is the {resource} after the change; `changed_fields` is"
        ' `["employee_id"]` and `previous` holds the employee before (`null`: unassigned).'
    ),
}


def carries_changes(event_type: str) -> bool:
    """Whether events of this type have ``changed_fields`` and ``previous``: every change of an
    existing resource does (the updates, ``deal.step_changed``, ``deal.assigned``); a creation
    and a deletion do not."""
    return not event_type.endswith((".created", ".deleted"))


WEBHOOK_HEADERS: list[dict[str, Any]] = [
    {
        "name": "webhook-id",
        "in": "header",
        "required": True,
        "description": "The event's `id`: the same on every attempt and on a redelivery. Use it"
        " to ignore a delivery you have already processed.",
        "schema": {"type": "string", "format": "uuid"},
    },
    {
        "name": "webhook-timestamp",
        "in": "header",
        "required": True,
        "description": "When this attempt was sent, in Unix seconds. Reject a request more than"
        " 5 minutes from your clock.",
        "schema": {"type": "integer", "minimum": 0},
    },
    {
        "name": "webhook-signature",
        "in": "header",
        "required": True,
        "description": "Standard Webhooks signature: `v1,` and the base64 of the HMAC-SHA256 of"
        " `{webhook-id}.{webhook-timestamp}.{body}`, keyed with the base64-decoded part of the"
        " endpoint's secret after `whsec_`. For 24 hours after a secret rotation it holds two"
        " signatures separated by a space, the new secret's first.",
        "schema": {
            "type": "string",
            "pattern": r"^v1,[A-Za-z0-9+/]{43}=( v1,[A-Za-z0-9+/]{43}=)?$",
        },
    },
]

WEBHOOK_RESPONSES: dict[str, dict[str, str]] = {
    "2XX": {
        "description": "Delivered: any 2xx answer within 10 seconds. The body is ignored.",
    },
    "410": {
        "description": "Gone: the endpoint is disabled at once (`enabled: false`, with a"
        " `disabled_reason`). Its pending deliveries wait until it is enabled again.",
    },
    "default": {
        "description": "Any other status (a 3xx too: redirects are not followed), or no answer"
        " within 10 seconds: the attempt failed and the delivery is retried with exponential"
        " backoff for up to 3 days. A 429 or 503 with `Retry-After` is not retried before then.",
    },
}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF_TEMPLATE.format(model=model.__name__)}


def event_payload_schema(event_type: str) -> dict[str, Any]:
    """An event of one type as a webhook delivers it: the events feed's ``EventOut`` with its
    ``type`` fixed and its ``data`` the resource's REST schema."""
    # Imported here: rest_api.events imports rest_api.openapi, which imports this module.
    from dealbase.rest_api.events import EventOut

    resource, _, _ = event_type.partition(".")
    narrowed: dict[str, Any] = {
        "type": "object",
        "properties": {
            "type": {"const": event_type},
            "data": _ref(_RESOURCE_SCHEMAS[resource]),
        },
    }
    if carries_changes(event_type):
        narrowed["properties"]["changed_fields"] = {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
        }
        narrowed["properties"]["previous"] = {"type": "object"}
        narrowed["required"] = ["changed_fields", "previous"]
    return {"allOf": [_ref(EventOut), narrowed]}


def webhook_test_payload_schema(schemas: dict[str, Any]) -> dict[str, Any]:
    """The ``webhook.test`` event: ``EventOut``'s envelope (copied from it: its ``type`` admits
    only the feed's types) around ``{"webhook_endpoint_id": ...}``."""
    from dealbase.rest_api.events import EventOut

    envelope = schemas[EventOut.__name__]
    properties = {
        name: copy.deepcopy(schema)
        for name, schema in envelope["properties"].items()
        if name not in {"changed_fields", "previous"}
    }
    properties["type"] = {"const": TEST_EVENT_TYPE}
    properties["data"] = {
        "type": "object",
        "properties": {
            "webhook_endpoint_id": {
                "type": "string",
                "format": "uuid",
                "description": "The endpoint the test was sent to.",
            }
        },
        "required": ["webhook_endpoint_id"],
    }
    return {"type": "object", "properties": properties, "required": list(envelope["required"])}


def _webhook(event_type: str, description: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "post": {
            "tags": ["webhooks"],
            "summary": f"`{event_type}` event",
            "description": description,
            "operationId": "webhook_" + event_type.replace(".", "_"),
            # The worker's request carries no API key: the receiver checks its signature
            # (webhook-signature), which the parameters describe.
            "security": [],
            "parameters": copy.deepcopy(WEBHOOK_HEADERS),
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": payload}},
            },
            "responses": copy.deepcopy(WEBHOOK_RESPONSES),
        }
    }


def webhooks(schemas: dict[str, Any]) -> dict[str, Any]:
    """One webhook per event type: what the worker POSTs to a subscribed endpoint."""
    entries: dict[str, Any] = {}
    for event_type in EVENT_TYPES:
        resource, _, happened = event_type.partition(".")
        description = (
            _WHAT_HAPPENED[happened].format(resource=resource)
            + "\n\nThe body is the event exactly as one item of `GET /events` shows it."
        )
        entries[event_type] = _webhook(event_type, description, event_payload_schema(event_type))
    entries[TEST_EVENT_TYPE] = _webhook(
        TEST_EVENT_TYPE,
        "Sent by `POST /webhooks/{id}/test` to that endpoint only, whatever its `events`; it is"
        " not in the events feed. `data` names the endpoint.",
        webhook_test_payload_schema(schemas),
    )
    return entries
