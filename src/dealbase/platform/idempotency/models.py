from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from dealbase.errors import Conflict, Invalid

REPLAY_WINDOW = timedelta(hours=24)
MAX_KEY_LENGTH = 255


@dataclass(frozen=True, slots=True)
class StoredResponse:
    status: int
    body: bytes
    location: str | None


class IdempotencyKeyInUse(
    Conflict, code="idempotency_key_in_use", title="Idempotency key in use"
): ...


class IdempotencyKeyReused(
    Invalid, code="idempotency_key_reused", title="Idempotency key reused"
): ...
