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
from typing import Generic, TypeVar, overload

from pydantic import BaseModel

from dealbase.errors import Invalid

DEFAULT_PAGE_SIZE = 25
# 16 bytes of id and 6 of filter fingerprint, unpadded base64url; lists in another order than
# by id add the last row's 8-byte sort value (GraphQL's deals by volume).
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{30}([A-Za-z0-9_-]{10})?$"
MAX_PAGE_SIZE = 100

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """``cursors[i]`` is where a page after ``items[i]`` starts (GraphQL's edge cursors)."""

    items: list[T]
    next_cursor: str | None
    cursors: Sequence[str]


class _Cursors(Sequence[str], Generic[T]):
    """A page's cursors, each made when asked for: GraphQL's edges read them all, REST's lists
    none but the next page's (``Page.next_cursor``), and 50 of them were a fifth of a REST
    page's Python calls."""

    def __init__(
        self,
        items: Sequence[T],
        id_of: Callable[[T], uuid.UUID],
        filters: BaseModel,
        sort_of: Callable[[T], int] | None,
    ) -> None:
        self._items = items
        self._id_of = id_of
        self._filters = filters
        # One fingerprint for the page, made with its first cursor: each costs the filters'
        # JSON and a hash.
        self._made_under: bytes | None = None
        self._sort_of = sort_of

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        # Equal to any sequence of the same cursors, as the list it stands for would be.
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            return [self[each] for each in range(len(self))[index]]
        item = self._items[index]
        if self._made_under is None:
            self._made_under = fingerprint(self._filters)
        sort = None if self._sort_of is None else self._sort_of(item)
        return _cursor(self._id_of(item), self._made_under, sort)


@dataclass(frozen=True, slots=True)
class PageRequest:
    """What a list asks for: ``limit`` rows after the row ``after`` (None: from the start).

    A list ordered by something else than id (deals by volume) pages by (that value, id):
    ``after_sort`` is the last row's value.
    """

    limit: int
    after: uuid.UUID | None
    after_sort: int | None = None

    def page_of(
        self,
        rows: Sequence[T],
        id_of: Callable[[T], uuid.UUID],
        filters: BaseModel,
        sort_of: Callable[[T], int] | None = None,
    ) -> Page[T]:
        """``rows`` is what a query for ``limit + 1`` returned: an extra row means there is more."""
        items = list(rows[: self.limit])
        cursors = _Cursors(items, id_of, filters, sort_of)
        more = len(rows) > self.limit and bool(items)
        return Page(items, cursors[-1] if more else None, cursors)


def fingerprint(filters: BaseModel) -> bytes:
    """What a cursor carries of the filters it was made under."""
    return hashlib.sha256(filters.model_dump_json().encode()).digest()[:6]


def _cursor(last_id: uuid.UUID, made_under: bytes, sort: int | None) -> str:
    raw = last_id.bytes + made_under
    if sort is not None:
        raw += sort.to_bytes(8, "big", signed=True)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def page_size(limit: int | None) -> int:
    """The page size asked for (default 25); 1 to 100."""
    limit = DEFAULT_PAGE_SIZE if limit is None else limit
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise Invalid.of("limit", "out_of_range", f"limit is 1 to {MAX_PAGE_SIZE}.")
    return limit


def page_request(limit: int | None, cursor: str | None, filters: BaseModel) -> PageRequest:
    limit = page_size(limit)
    if cursor is None:
        return PageRequest(limit, None)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) not in (22, 30):
        raise Invalid.of("cursor", "invalid_cursor", "The cursor is not one this API returned.")
    if raw[16:22] != fingerprint(filters):
        raise Invalid.of(
            "cursor", "invalid_cursor", "The cursor belongs to a list with other filters."
        )
    sort = int.from_bytes(raw[22:], "big", signed=True) if len(raw) == 30 else None
    return PageRequest(limit, uuid.UUID(bytes=raw[:16]), sort)
