"""Keyset pagination with opaque cursors.

Rows are paged in id order. Ids are UUIDv7, so that is creation order; a cursor holds the last id
seen, and the next page starts strictly after it. Rows inserted while a client pages never shift
what it has not yet seen, so every row that existed when paging began is returned exactly once.
A cursor also carries a fingerprint of the filters it was made under: reusing it with other
filters would silently skip rows, so that is refused.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel

from dealbase.platform.errors import Invalid

DEFAULT_PAGE_SIZE = 25
# 16 bytes of id and 6 of filter fingerprint, unpadded base64url.
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{30}$"
MAX_PAGE_SIZE = 100

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class PageRequest:
    """What a list asks for: ``limit`` rows after ``after`` (None: from the start)."""

    limit: int
    after: uuid.UUID | None

    def page_of(
        self, rows: Sequence[T], id_of: Callable[[T], uuid.UUID], filters: BaseModel
    ) -> Page[T]:
        """``rows`` is what a query for ``limit + 1`` returned: an extra row means there is more."""
        items = list(rows[: self.limit])
        more = len(rows) > self.limit
        return Page(items, encode_cursor(id_of(items[-1]), filters) if more and items else None)


def _fingerprint(filters: BaseModel) -> bytes:
    return hashlib.sha256(filters.model_dump_json().encode()).digest()[:6]


def encode_cursor(last_id: uuid.UUID, filters: BaseModel) -> str:
    return base64.urlsafe_b64encode(last_id.bytes + _fingerprint(filters)).decode().rstrip("=")


def page_request(limit: int | None, cursor: str | None, filters: BaseModel) -> PageRequest:
    limit = DEFAULT_PAGE_SIZE if limit is None else limit
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise Invalid.of("limit", "out_of_range", f"limit is 1 to {MAX_PAGE_SIZE}.")
    if cursor is None:
        return PageRequest(limit, None)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 22:
        raise Invalid.of("cursor", "invalid_cursor", "The cursor is not one this API returned.")
    if raw[16:] != _fingerprint(filters):
        raise Invalid.of(
            "cursor", "invalid_cursor", "The cursor belongs to a list with other filters."
        )
    return PageRequest(limit, uuid.UUID(bytes=raw[:16]))
