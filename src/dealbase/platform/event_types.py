"""The types of event the platform records for each change, named once: the events outbox
writes them, webhook endpoints subscribe to them."""

from __future__ import annotations

from typing import Literal, get_args

EventType = Literal[
    "customer.created",
    "customer.updated",
    "customer.deleted",
    "deal.created",
    "deal.updated",
    "deal.step_changed",
    "deal.assigned",
    "deal.deleted",
    "activity.created",
    "activity.updated",
    "activity.deleted",
]

EVENT_TYPES: tuple[EventType, ...] = get_args(EventType)

# A subscription to every type, present and future.
ALL_EVENTS = "*"
