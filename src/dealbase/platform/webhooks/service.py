from __future__ import annotations

import base64
import secrets
import uuid
from typing import TypeVar

from pydantic import BaseModel

from dealbase.db.units import UnitOfWork
from dealbase.errors import NotFound
from dealbase.platform.events import service as events
from dealbase.platform.pagination import Page, page_request
from dealbase.platform.validation import department_of
from dealbase.platform.versioning import Expected
from dealbase.platform.webhooks import repository
from dealbase.platform.webhooks.addresses import AddressPolicy, check_url
from dealbase.platform.webhooks.models import (
    Checked,
    WebhookEndpoint,
    WebhookEndpointFields,
    WebhookEndpointFilter,
    WithSecret,
)
from dealbase.tenancy.coordination.wakeups import WakeWorker

Model = TypeVar("Model", bound=BaseModel)

# Standard Webhooks: "whsec_" and the base64 of 24 to 64 random bytes.
SECRET_PREFIX = "whsec_"  # noqa: S105 -- the format's prefix, not a secret
SECRET_BYTES = 32
_NO_FILTERS = WebhookEndpointFilter()


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


async def checked(fields: Model, policy: AddressPolicy) -> Checked[Model]:
    """``fields`` once the URL they carry (if any) is one webhooks may be sent to. Call it
    before the unit of work: a name is resolved, which must not hold a transaction open."""
    url = getattr(fields, "url", None)
    if isinstance(url, str):
        await check_url(url, policy)
    return Checked(fields)


def create(uow: UnitOfWork, fields: Checked[WebhookEndpointFields]) -> WithSecret:
    """The endpoint receives the department's events that commit after it: those committed
    before are numbered first, so that its start, the last position, is past them."""
    secret = new_secret()
    department_id = department_of(uow.scope)
    events.number_all_committed(uow, [department_id])
    endpoint = repository.insert_endpoint(
        uow.connection, department_id, fields.value.model_dump(), secret
    )
    return WithSecret.of(endpoint, secret)


def get(uow: UnitOfWork, endpoint_id: uuid.UUID) -> WebhookEndpoint:
    endpoint = repository.get_endpoint(uow.connection, uow.scope.department_id, endpoint_id)
    if endpoint is None:
        raise NotFound(f"No webhook endpoint has the id {endpoint_id}.")
    return endpoint


def list_page(uow: UnitOfWork, limit: int | None, cursor: str | None) -> Page[WebhookEndpoint]:
    page = page_request(limit, cursor, _NO_FILTERS)
    rows = repository.list_endpoints(uow.connection, uow.scope.department_id, page)
    return page.page_of(rows, lambda endpoint: endpoint.id, _NO_FILTERS)


def count(uow: UnitOfWork) -> int:
    return repository.count_endpoints(uow.connection, uow.scope.department_id)


def update(
    uow: UnitOfWork,
    endpoint_id: uuid.UUID,
    patch: Checked[BaseModel],
    expected: Expected | None = None,
) -> WebhookEndpoint:
    """Applies the fields the patch carries. Enabling or disabling the endpoint clears why
    delivery disabled it: its owner has decided now. Enabling it wakes the worker, for the
    deliveries that waited meanwhile, and starts its count of failing days afresh."""
    changes = patch.value.model_dump(exclude_unset=True)
    if "enabled" in changes:
        changes["disabled_reason"] = None
    if changes.get("enabled") is True:
        # Three days of failures count again from the next failure.
        changes["failing_since"] = None
        uow.finisher(WakeWorker)
    return repository.update_endpoint(
        uow.connection,
        uow.scope.department_id,
        endpoint_id,
        repository.columns_of(changes),
        expected,
    )


def delete(uow: UnitOfWork, endpoint_id: uuid.UUID, expected: Expected | None = None) -> None:
    repository.delete_endpoint(uow.connection, uow.scope.department_id, endpoint_id, expected)


def rotate_secret(
    uow: UnitOfWork, endpoint_id: uuid.UUID, expected: Expected | None = None
) -> WithSecret:
    """A new secret; the one it replaces keeps signing for ``repository.ROTATION_OVERLAP``."""
    secret = new_secret()
    endpoint = repository.update_endpoint(
        uow.connection, uow.scope.department_id, endpoint_id, repository.rotation(secret), expected
    )
    return WithSecret.of(endpoint, secret)
