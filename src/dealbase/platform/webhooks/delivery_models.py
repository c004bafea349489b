"""Deliveries: one event (or test event) on its way to one endpoint, and each attempt to send it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

DeliveryState = Literal["pending", "delivered", "failed"]
# The event POST /webhooks/{id}/test sends: to that endpoint only, whatever its ``events``,
# and never in the events feed.
TEST_EVENT_TYPE = "webhook.test"


@dataclass(frozen=True, slots=True)
class Attempt:
    attempted_at: datetime
    # None when no answer came (refused, timed out, an address not allowed).
    status_code: int | None
    duration_ms: int
    # None on success.
    error: str | None


@dataclass(frozen=True, slots=True)
class Delivery:
    id: uuid.UUID
    endpoint_id: uuid.UUID
    # None for a test event.
    event_id: uuid.UUID | None
    event_type: str
    state: DeliveryState
    attempt_count: int
    next_attempt_at: datetime | None
    created_at: datetime
    delivered_at: datetime | None
    attempts: list[Attempt]


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A delivery a worker has leased: what to send, where, and signed with what."""

    delivery_id: uuid.UUID
    endpoint_id: uuid.UUID
    url: str
    # The secrets that sign it, the newest first.
    secrets: tuple[str, ...]
    # webhook-id: the event's id, the same on every attempt and redelivery.
    message_id: str
    body: bytes
    attempt_count: int
    started_at: datetime
    leased_until: datetime
    # Since when the endpoint's every attempt has failed, if it has.
    failing_since: datetime | None


@dataclass(frozen=True, slots=True)
class Response:
    """What came of one attempt to send."""

    # None: no answer (refused, timed out, an address not allowed).
    status_code: int | None
    duration_ms: int
    # Why it failed, in a sentence; None on success.
    error: str | None = None
    # The receiver's Retry-After, on 429 and 503.
    retry_after: timedelta | None = None

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300

    @property
    def gone(self) -> bool:
        return self.status_code == 410


@dataclass(frozen=True, slots=True)
class Sent:
    delivery: Outgoing
    response: Response
    attempted_at: datetime
