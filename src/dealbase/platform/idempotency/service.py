from __future__ import annotations

from dealbase.db.units import UnitOfWork
from dealbase.errors import FieldError, Invalid
from dealbase.platform.idempotency import repository
from dealbase.platform.idempotency.models import (
    MAX_KEY_LENGTH,
    IdempotencyKeyInUse,
    IdempotencyKeyReused,
    StoredResponse,
)

FIELD = "Idempotency-Key"


def begin(uow: UnitOfWork, key: str, fingerprint: bytes) -> StoredResponse | None:
    """Called first in the unit of work of a request carrying ``key``.

    Returns the stored first response to replay, or None when this request is the first and
    must run; raises while another request with the key runs (409), or when the key came with
    another request before (422). Keys are scoped to the API key that sent them.
    """
    if not 1 <= len(key) <= MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
        raise Invalid.of(
            FIELD,
            "invalid_format",
            f"An idempotency key is 1 to {MAX_KEY_LENGTH} printable ASCII characters.",
        )
    scope, connection = uow.scope, uow.connection
    api_key_id = scope.key_id
    if api_key_id is None:
        raise Invalid.of(FIELD, "unsupported", "Idempotency keys need an API key caller.")
    if not repository.try_lock(connection, scope.schema, api_key_id, key):
        raise IdempotencyKeyInUse(
            "A request with this Idempotency-Key is still being processed; retry later."
        )
    found = repository.find(connection, api_key_id, key)
    if found is None:
        repository.forget_expired(connection, api_key_id, key)
        return None
    stored_fingerprint, response = found
    if stored_fingerprint != fingerprint:
        message = "This Idempotency-Key was used with a different request; use a new key."
        raise IdempotencyKeyReused(message, [FieldError(FIELD, "reused", message)])
    return response


def finish(uow: UnitOfWork, key: str, fingerprint: bytes, response: StoredResponse) -> None:
    """Stores the first response, in the transaction of the write it reports."""
    api_key_id = uow.scope.key_id
    assert api_key_id is not None, "begin() accepted the key, so the caller has an API key"
    repository.store(uow.connection, api_key_id, key, fingerprint, response)
