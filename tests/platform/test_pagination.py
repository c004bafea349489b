"""A page's cursors: the next page's made at once, each row's only when read."""

from __future__ import annotations

import uuid

from pydantic import BaseModel

from dealbase.platform.pagination import Page, PageRequest


class _Filters(BaseModel):
    city: str | None = None


def _first_page(ids: list[uuid.UUID]) -> tuple[Page[uuid.UUID], list[uuid.UUID]]:
    """The first page of three of ``ids``, and the rows whose id it has read so far (a list it
    goes on filling as its cursors are read)."""
    read: list[uuid.UUID] = []

    def id_of(row: uuid.UUID) -> uuid.UUID:
        read.append(row)
        return row

    return PageRequest(limit=3, after=None).page_of(ids, id_of, _Filters()), read


def test_a_pages_row_cursors_are_made_only_when_read_and_equal_the_next_pages() -> None:
    ids = [uuid.uuid4() for _ in range(4)]
    page, read = _first_page(ids)

    assert page.items == ids[:3]
    assert read == [ids[2]]  # the next page's cursor alone, of the last row shown
    cursors = list(page.cursors)
    assert read == [ids[2], *ids[:3]]
    assert cursors[-1] == page.next_cursor
    assert len(set(cursors)) == 3
    assert page.cursors == cursors


def test_the_last_page_has_no_next_cursor_and_makes_none() -> None:
    ids = [uuid.uuid4() for _ in range(2)]
    page, read = _first_page(ids)

    assert page.next_cursor is None
    assert read == []
    assert len(page.cursors) == 2
