"""A list's SQL, shared by every way of reading it (the REST lists, GraphQL's resolvers and its
compiled reads): its filters' conditions and its keyset order, each value bound by name.

A list's conditions depend on which filters a request gives (its shape), not on their values,
so they are built once per shape, and so is every statement that holds them (``built_once``):
building a statement costs more CPU than running it.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from sqlalchemy import (
    BigInteger,
    ColumnElement,
    FromClause,
    Select,
    Table,
    bindparam,
    func,
    select,
    tuple_,
)
from sqlalchemy.dialects.postgresql import UUID

from dealbase.db.statements import built_once
from dealbase.db.transactions import TenantConnection
from dealbase.platform.pagination import PageRequest
from dealbase.platform.rows import in_bound_department

# Which of a list's conditions apply: its department, then each of its rules.
Shape = tuple[bool, ...]


@dataclass(frozen=True)
class Rule:
    """A filter field of a platform filter model and the condition it adds when given, its value
    bound by the field's name (``prepare`` makes the bound value of the given one)."""

    name: str
    condition: Callable[[], ColumnElement[bool]]
    prepare: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class ListFilters:
    table: Table
    rules: tuple[Rule, ...]

    def shape_and_values(
        self, department_id: uuid.UUID | None, filters: BaseModel
    ) -> tuple[Shape, dict[str, Any]]:
        """Which conditions apply to this request, and their values by name."""
        values: dict[str, Any] = {}
        if department_id is not None:
            values["department_id"] = department_id
        for rule in self.rules:
            value = getattr(filters, rule.name)
            if value is not None:
                values[rule.name] = value if rule.prepare is None else rule.prepare(value)
        shape = (department_id is not None, *(rule.name in values for rule in self.rules))
        return shape, values

    def conditions(self, shape: Shape) -> tuple[ColumnElement[bool], ...]:
        return _conditions(self, shape)

    def page_values(
        self,
        department_id: uuid.UUID | None,
        filters: BaseModel,
        order: KeysetOrder,
        page: PageRequest,
    ) -> tuple[Shape, dict[str, Any]]:
        """``shape_and_values`` of a page in ``order`` (``KeysetOrder.paged``): with the keys
        it starts after, and its ``limit``, one row more than it shows (which tells there is
        more)."""
        shape, values = self.shape_and_values(department_id, filters)
        values.update(order.values(page), limit=page.limit + 1)
        return shape, values

    def count(
        self,
        connection: TenantConnection,
        department_id: uuid.UUID | None,
        filters: BaseModel,
        narrowed: Callable[[Select[Any], dict[str, Any]], Select[Any]] | None = None,
    ) -> int:
        """How many rows of the table the caller may see and the filters admit, the statement
        run as ``narrowed`` makes it, given its values (by a tenant's custom filters)."""
        shape, values = self.shape_and_values(department_id, filters)
        query = _count_query(self, shape)
        if narrowed is not None:
            query = narrowed(query, values)
        return int(connection.execute(query, values).scalar_one())


@functools.lru_cache(maxsize=256)
def _conditions(filters: ListFilters, shape: Shape) -> tuple[ColumnElement[bool], ...]:
    one_department, *given = shape
    return (
        in_bound_department(filters.table, one_department),
        *(rule.condition() for rule, applies in zip(filters.rules, given, strict=True) if applies),
    )


@functools.lru_cache(maxsize=256)
def _count_query(filters: ListFilters, shape: Shape) -> Select[Any]:
    return built_once(
        select(func.count()).select_from(filters.table).where(*filters.conditions(shape))
    )


def equal(column: ColumnElement[Any]) -> Callable[[], ColumnElement[bool]]:
    """The rule's condition ``column = :name``, named as the column."""
    name = getattr(column, "name", None)
    assert isinstance(name, str), "a rule compares a table's column"
    return lambda: column == bindparam(name, type_=column.type)


@dataclass(frozen=True)
class KeysetOrder:
    """A list's order: by id, or by a sort value then id (deals by volume), ascending or not. A
    page after a row starts strictly after its keys (``after`` and ``after_sort``)."""

    sort: Callable[[FromClause], ColumnElement[int]] | None = None
    descending: bool = False

    def keys(self, row: FromClause) -> tuple[ColumnElement[Any], ...]:
        return (row.c.id,) if self.sort is None else (self.sort(row), row.c.id)

    def order_by(self, row: FromClause) -> tuple[ColumnElement[Any], ...]:
        return tuple(key.desc() if self.descending else key.asc() for key in self.keys(row))

    def after(self, row: FromClause) -> ColumnElement[bool]:
        last: tuple[ColumnElement[Any], ...] = (bindparam("after", type_=UUID(as_uuid=True)),)
        if self.sort is not None:
            last = (bindparam("after_sort", type_=BigInteger), *last)
        position, bound = tuple_(*self.keys(row)), tuple_(*last)
        return position < bound if self.descending else position > bound

    def paged(self, query: Select[Any], row: FromClause, after: bool) -> Select[Any]:
        """``query`` in this order, up to ``limit`` rows, after the keys ``after`` and
        ``after_sort`` when ``after`` (a page after the first)."""
        if after:
            query = query.where(self.after(row))
        return query.order_by(*self.order_by(row)).limit(bindparam("limit"))

    def values(self, page: PageRequest) -> dict[str, Any]:
        """The bound values of ``after`` for ``page`` (none from the start)."""
        if page.after is None:
            return {}
        if self.sort is None:
            return {"after": page.after}
        # A cursor without a sort value (no list in this order makes one) sorts as a missing value.
        return {
            "after": page.after,
            "after_sort": -1 if page.after_sort is None else page.after_sort,
        }


BY_ID = KeysetOrder()
