"""Deliveries: what the worker sends to webhook endpoints, and what their owners see of it.

A worker visits a tenant in steps, each one unit of work (``step``): it records what it sent
in the previous step, makes deliveries of the events endpoints have not seen yet (on the first
step, once it has numbered the committed events), and leases what is due next. The HTTP
requests happen between steps, outside any transaction. Nothing is sent before the transaction
that recorded its event has committed: the deliveries are made from committed events only.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from dealbase.db.units import UnitOfWork
from dealbase.errors import NotFound
from dealbase.ids import new_id
from dealbase.platform.events import service as events
from dealbase.platform.events.models import RETENTION_DAYS
from dealbase.platform.pagination import Page, page_request
from dealbase.platform.resources import JsonObject, format_timestamp
from dealbase.platform.webhooks import delivery_repository as repository
from dealbase.platform.webhooks import service as endpoints
from dealbase.platform.webhooks.delivery_models import (
    TEST_EVENT_TYPE,
    Delivery,
    Outgoing,
    Response,
    Sent,
)
from dealbase.platform.webhooks.models import WebhookEndpointFilter
from dealbase.platform.webhooks.retries import GIVE_UP_AFTER, Jitter, wait_after
from dealbase.tenancy.coordination.wakeups import WakeWorker

_NO_FILTERS = WebhookEndpointFilter()


@dataclass(frozen=True, slots=True)
class Step:
    """What a step leased, to send before the next; when nothing was, when the tenant next has
    something due (None: nothing pending)."""

    leased: list[Outgoing]
    next_due: datetime | None


def step(
    uow: UnitOfWork,
    *,
    now: datetime,
    sent: Sequence[Sent],
    jitter: Jitter,
    lease_for: timedelta,
    limit: int,
    scan: bool,
) -> Step:
    if sent:
        _record(uow, sent, jitter)
    if scan:
        events.number_all_committed(uow, repository.subscribing_departments(uow.connection))
        repository.scan(uow.connection, now)
    leased = repository.lease(uow.connection, uow.scope.tenant_id, now, now + lease_for, limit)
    return Step(leased, None if leased else repository.next_due(uow.connection))


def _gone_reason(at: datetime) -> str:
    return f"The endpoint answered 410 Gone at {format_timestamp(at)}."


def _failing_reason(since: datetime, error: str | None) -> str:
    return (
        f"No delivery succeeded for three days: every attempt since {format_timestamp(since)}"
        f" failed, the last with: {error}"
    )


@dataclass
class _EndpointOutcome:
    """What one step's attempts say of their endpoint."""

    endpoint_id: uuid.UUID
    # As the lease read it: since when every attempt had failed.
    failing_since: datetime | None
    succeeded: bool = False
    first_failure: datetime | None = None
    gone_at: datetime | None = None
    failing_reason: str | None = None

    def saw(self, response: Response, at: datetime) -> None:
        if response.succeeded:
            self.succeeded = True
            return
        self.first_failure = self.first_failure or at
        if response.gone:
            self.gone_at = self.gone_at or at
        since = self.failing_since or self.first_failure
        if at - since >= GIVE_UP_AFTER:
            self.failing_reason = _failing_reason(since, response.error)

    def changes(self) -> dict[str, object] | None:
        """The endpoint's new state, or None when it stays as it is: healthy and still
        healthy, or failing and still failing (most steps write nothing to it)."""
        reason = _gone_reason(self.gone_at) if self.gone_at else None
        if reason is None and not self.succeeded:
            reason = self.failing_reason
        turns = self.succeeded == (self.failing_since is not None)
        if reason is None and not turns:
            return None
        return {
            "endpoint_id": self.endpoint_id,
            "succeeded": self.succeeded,
            "failed_at": self.first_failure,
            "disable": reason is not None,
            "reason": reason,
        }


def _record(uow: UnitOfWork, sent: Sequence[Sent], jitter: Jitter) -> None:
    """Logs each attempt and settles its delivery: delivered; failed (a 410, or a failure three
    days or more after the delivery began); or pending, retried later. An endpoint that
    answered 410 is disabled, and so is one none of whose attempts succeeded for three days."""
    attempts, settled = [], []
    outcomes: dict[uuid.UUID, _EndpointOutcome] = {}
    for item in sent:
        delivery, response, at = item.delivery, item.response, item.attempted_at
        attempts.append(
            {
                "attempt_id": new_id(),
                "delivery_id": delivery.delivery_id,
                "attempted_at": at,
                "status_code": response.status_code,
                "duration_ms": response.duration_ms,
                "error": response.error,
            }
        )
        state, retry_at = "delivered", None
        if not response.succeeded:
            state = "failed"
            if not response.gone and at < delivery.started_at + GIVE_UP_AFTER:
                wait = wait_after(delivery.attempt_count + 1, response.retry_after, jitter())
                state, retry_at = "pending", at + wait
        settled.append(
            {
                "delivery_id": delivery.delivery_id,
                "held_until": delivery.leased_until,
                "new_state": state,
                "retry_at": retry_at,
                "succeeded_at": at if response.succeeded else None,
            }
        )
        outcome = outcomes.setdefault(
            delivery.endpoint_id, _EndpointOutcome(delivery.endpoint_id, delivery.failing_since)
        )
        outcome.saw(response, at)
    changes = [c for c in (outcome.changes() for outcome in outcomes.values()) if c is not None]
    repository.record(uow.connection, attempts, settled, changes)


def list_page(
    uow: UnitOfWork, endpoint_id: uuid.UUID, limit: int | None, cursor: str | None
) -> Page[Delivery]:
    """The endpoint's deliveries, newest first."""
    endpoints.get(uow, endpoint_id)
    page = page_request(limit, cursor, _NO_FILTERS)
    rows = repository.list_deliveries(uow.connection, endpoint_id, page)
    return page.page_of(rows, lambda delivery: delivery.id, _NO_FILTERS)


def count(uow: UnitOfWork, endpoint_id: uuid.UUID) -> int:
    """How many deliveries the endpoint's log holds."""
    endpoints.get(uow, endpoint_id)
    return repository.count_deliveries(uow.connection, endpoint_id)


def get(uow: UnitOfWork, endpoint_id: uuid.UUID, delivery_id: uuid.UUID) -> Delivery:
    endpoints.get(uow, endpoint_id)
    found = repository.get_delivery(uow.connection, endpoint_id, delivery_id)
    if found is None:
        raise NotFound(f"The webhook endpoint has no delivery with the id {delivery_id}.")
    return found


def redeliver(uow: UnitOfWork, endpoint_id: uuid.UUID, delivery_id: uuid.UUID) -> Delivery:
    """Sends the delivery again as soon as a worker can, with the same ``webhook-id``; its three
    days of retries start again."""
    endpoints.get(uow, endpoint_id)
    if not repository.redeliver(uow.connection, endpoint_id, delivery_id):
        raise NotFound(f"The webhook endpoint has no delivery with the id {delivery_id}.")
    uow.finisher(WakeWorker)
    return get(uow, endpoint_id, delivery_id)


def send_test(uow: UnitOfWork, endpoint_id: uuid.UUID) -> Delivery:
    """A ``webhook.test`` event for the endpoint alone, whatever it subscribes to, sent as soon
    as a worker can (if the endpoint is enabled); it is not in the events feed."""
    endpoint = endpoints.get(uow, endpoint_id)
    payload: JsonObject = {
        "id": str(new_id()),
        "type": TEST_EVENT_TYPE,
        "created_at": format_timestamp(datetime.now(UTC)),
        "tenant_id": str(uow.scope.tenant_id),
        "department_id": str(endpoint.department_id),
        "data": {"webhook_endpoint_id": str(endpoint.id)},
    }
    delivery_id = repository.insert_test(uow.connection, endpoint.id, payload)
    uow.finisher(WakeWorker)
    return get(uow, endpoint_id, delivery_id)


def purge(uow: UnitOfWork) -> int:
    """Deletes the tenant's test deliveries older than the events feed keeps events (the
    others go with their events); returns how many."""
    return repository.purge_tests_older_than(uow.connection, timedelta(days=RETENTION_DAYS))
