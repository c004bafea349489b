from __future__ import annotations

import uuid

from sqlalchemy import ColumnElement, delete, func, insert, select

from dealbase.db.transactions import TenantConnection
from dealbase.platform.idempotency.models import REPLAY_WINDOW, StoredResponse
from dealbase.platform.tables import idempotency_records


def try_lock(connection: TenantConnection, schema: str, api_key_id: uuid.UUID, key: str) -> bool:
    """A transaction-scoped lock on the key: False while another transaction holds it."""
    lock_id = func.hashtextextended(f"{schema}:{api_key_id}:{key}", 0)
    return bool(connection.execute(select(func.pg_try_advisory_xact_lock(lock_id))).scalar_one())


def _record(api_key_id: uuid.UUID, key: str) -> ColumnElement[bool]:
    return (idempotency_records.c.api_key_id == api_key_id) & (
        idempotency_records.c.idempotency_key == key
    )


def find(
    connection: TenantConnection, api_key_id: uuid.UUID, key: str
) -> tuple[bytes, StoredResponse] | None:
    """The fingerprint and response stored for the key within the replay window."""
    row = connection.execute(
        select(
            idempotency_records.c.fingerprint,
            idempotency_records.c.status,
            idempotency_records.c.body,
            idempotency_records.c.location,
        ).where(
            _record(api_key_id, key),
            idempotency_records.c.created_at > func.now() - REPLAY_WINDOW,
        )
    ).first()
    if row is None:
        return None
    fingerprint, status, body, location = row
    return bytes(fingerprint), StoredResponse(status, bytes(body), location)


def forget_expired(connection: TenantConnection, api_key_id: uuid.UUID, key: str) -> None:
    """Deletes the key's expired record, with the COMMIT (before ``store``'s insert)."""
    connection.defer(delete(idempotency_records).where(*_record(api_key_id, key)), {})


def store(
    connection: TenantConnection,
    api_key_id: uuid.UUID,
    key: str,
    fingerprint: bytes,
    response: StoredResponse,
) -> None:
    """Stores the response with the COMMIT: nothing in the transaction reads it back."""
    connection.defer(
        insert(idempotency_records).values(
            api_key_id=api_key_id,
            idempotency_key=key,
            fingerprint=fingerprint,
            status=response.status,
            body=response.body,
            location=response.location,
            created_at=func.now(),
        ),
        {},
    )
