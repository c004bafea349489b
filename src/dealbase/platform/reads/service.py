"""Reads answered whole by PostgreSQL: each reader runs its tree as one statement and returns
the JSON text PostgreSQL built.

A reader keeps its statements, one for each shape of request (which filters apply, whether it
pages on, the order): the tree is built once per document by its caller, the statement once
per shape here. A tree that shows records' custom fields (``CustomFields``) has a statement for
each set of them too: each tenant's are columns of its own tables (``custom_fields``), so the
statement reads the columns of the caller's tenant's fields, by their names and types.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from sqlalchemy import ColumnElement, Select

from dealbase.db.sessions import StatementSettings
from dealbase.db.units import UnitOfWork
from dealbase.platform.activities import service as activities
from dealbase.platform.customers import service as customers
from dealbase.platform.deals import service as deals
from dealbase.platform.pagination import fingerprint, page_request
from dealbase.platform.reads.models import (
    CustomFields,
    Edges,
    Fields,
    Node,
    OneRead,
    PageRead,
    Related,
    RelatedList,
)
from dealbase.platform.reads.repository import (
    CustomShapes,
    list_filters,
    list_order,
    listed_kind,
    one_statement,
    page_statement,
    relation,
)
from dealbase.platform.records import SyncedRecord
from dealbase.platform.shapes import CUSTOM_FIELDS, Nested, Shape

# Shapes a page reader keeps statements for (filters given, paging on, order, custom fields);
# past that the least recently used goes.
_SHAPES_KEPT = 64
# Sets of custom fields a reader of one row keeps statements for.
_FIELDS_KEPT = 64
# The record of each kind that has custom fields, fitted to a caller's tenant for its own.
_RECORDS: Mapping[str, SyncedRecord[Any, Any, Any]] = {
    "customer": customers.RECORD,
    "deal": deals.RECORD,
    "activity": activities.RECORD,
}

# A read's statement runs prepared (``EXECUTE``) once it has run a few times on a connection;
# PostgreSQL then plans it once, generically, only where that plan does not look dearer than
# one made for the values. A page's does (its size, ``row_limit`` and ``page_limit``, is a
# value: the generic plan guesses a third of a list's rows where the values say 50), so it was
# planned again on every run, a large part of what the read cost PostgreSQL. So the read asks
# for the generic plan.
#
# The generic plan cannot know which department it reads either: it guesses that a department
# holds rows / departments of a table, and where one department is large (a tenant's other
# department holding 12,000 deals beside this one's 60) it scans the whole table for the
# department's count (``totalCount``) and reads its steps and employees by scans too, where the
# department's index reaches its own, which costs the dashboard's statement far more. Every
# list a read builds is reached by
# an index that begins with its department (or its parent's id), so the plan is made without
# sequential scans (``enable_seqscan`` off: a table without such an index is still scanned).
#
# And without JIT compilation: the generic plan's guesses (a tenth of a table's rows for a page,
# each row's nested lists in turn) put its estimated cost past ``jit_above_cost`` once a tenant
# has tens of thousands of customers, and PostgreSQL then compiled the page's expressions at
# every execution, which took hundreds of times as long as reading the page.
#
# The settings hold for the reads' statements only: a connection that ran one keeps them until
# a statement without them runs on it, which puts the server's back first (``db.sessions``).
GENERIC_PLANS = StatementSettings(
    (("plan_cache_mode", "force_generic_plan"), ("enable_seqscan", "off"), ("jit", "off"))
)


def custom_kinds(read: PageRead | OneRead) -> frozenset[str]:
    """The kinds of record whose custom fields ``read`` shows, anywhere in its tree."""
    found: set[str] = set()

    def visit(kind: str, fields: Fields) -> None:
        for _, entry in fields:
            if isinstance(entry, CustomFields):
                found.add(kind)
            elif isinstance(entry, Related | RelatedList):
                related = relation(kind, entry.relation)
                assert related is not None, "the tree names the relations there are"
                visit(related[0], entry.fields)

    if isinstance(read, OneRead):
        visit(read.resource, read.fields)
        return frozenset(found)
    kind = listed_kind(read.resource)
    assert kind is not None, "the tree names a list there is"
    for _, part in read.fields:
        for _, edge in part.fields if isinstance(part, Edges) else ():
            if isinstance(edge, Node):
                visit(kind, edge.fields)
    return frozenset(found)


def _custom_shape(record: SyncedRecord[Any, Any, Any]) -> Shape | None:
    """A fitted record's custom fields alone, as its JSON's ``custom_fields`` shows them (that
    object's fields), over its table with their columns; None when it has none."""
    if record.custom is None or not record.custom.fields:
        return None
    (shown,) = (each for each in record.shape.fields if each.name == CUSTOM_FIELDS)
    assert isinstance(shown.source, Nested)
    return Shape(record.shape.table, shown.source.fields)


class _CustomFields:
    """The custom fields a tree shows, of the caller's tenant: how its statement reads them,
    and what tells one such statement from another (their names and types)."""

    def __init__(self, read: PageRead | OneRead) -> None:
        self.kinds = sorted(custom_kinds(read))

    def of(self, uow: UnitOfWork | None) -> tuple[Hashable, CustomShapes]:
        """The key and shapes of the caller's tenant's fields (None: of a tenant without)."""
        if not self.kinds:
            return (), {}
        shapes = {
            kind: None if uow is None else _custom_shape(_RECORDS[kind].fitted(uow))
            for kind in self.kinds
        }
        key = tuple(
            None if shape is None else tuple((each.name, each.kind) for each in shape.fields)
            for shape in shapes.values()
        )
        return key, shapes


@dataclass(frozen=True)
class _Narrowing:
    """A page's custom filters (``CustomFilters``): their conditions, what tells those from
    others (``kinds``) and their values by attribute."""

    conditions: tuple[ColumnElement[bool], ...] = ()
    kinds: Hashable = ()
    values: Mapping[str, Any] = field(default_factory=dict)


def _custom_filtered(
    uow: UnitOfWork,
    resource: str,
    filters: BaseModel,
    custom_filters: Mapping[str, object] | None,
) -> tuple[BaseModel, _Narrowing]:
    """``filters`` with ``custom_filters`` judged by the caller's tenant's fields, as
    ``SyncedRecord.list_page`` judges them (the same model, so the same cursors), and their
    narrowing of the page."""
    if not custom_filters:
        return filters, _Narrowing()
    kind = listed_kind(resource)
    assert kind is not None, "the tree names a list there is"
    custom = _RECORDS[kind].fitted(uow).custom
    assert custom is not None, "a fitted record has its custom fields"
    judged = custom.filters.judged(filters, custom_filters)
    values = custom.filters.values(judged)
    given = frozenset(values)
    return judged, _Narrowing(custom.filters.conditions(given), custom.filters.kinds(given), values)


class PageReader:
    """A page of a list as its connection's JSON text, with the rules of ``list_page``: the
    same page size and cursor checks (``Invalid``), the same filters in the scope's department,
    the same keyset order and cursors."""

    def __init__(self, read: PageRead) -> None:
        self.read = read
        self._custom = _CustomFields(read)
        self._statements: OrderedDict[Any, Select[Any]] = OrderedDict()

    def run(
        self,
        uow: UnitOfWork,
        filters: BaseModel,
        first: int | None,
        after: str | None,
        given: Mapping[str, Any],
        caller_department_id: uuid.UUID | None,
        custom_filters: Mapping[str, object] | None = None,
        *,
        last: bool = False,
    ) -> str:
        """``given``: the nested lists' lengths, by the names the tree gives them.
        ``custom_filters``: filters on the tenant's custom fields, as ``list_page`` takes them.
        ``last``: the unit of work reads nothing after the page, whose statement then carries
        its COMMIT (once the request passed every check: a refusal sends nothing)."""
        resource = self.read.resource
        filters, narrowing = _custom_filtered(uow, resource, filters, custom_filters)
        page = page_request(first, after, filters)
        shape, values = list_filters(resource).shape_and_values(uow.scope.department_id, filters)
        order = list_order(resource, filters)
        fields, custom = self._custom.of(uow)
        key = (shape, order, page.after is not None, fields, narrowing.kinds)
        statement = self._statements.get(key)
        if statement is None:
            if len(self._statements) >= _SHAPES_KEPT:
                self._statements.popitem(last=False)
            statement = self._statements[key] = page_statement(
                self.read, shape, order, page.after is not None, custom, narrowing.conditions
            )
        else:
            self._statements.move_to_end(key)
        values.update(narrowing.values)
        values.update(given)
        values.update(
            order.values(page),
            row_limit=page.limit + 1,
            page_limit=page.limit,
            fingerprint=fingerprint(filters),
            caller_department_id=caller_department_id,
            tenant_id=str(uow.scope.tenant_id),
        )
        if last:
            uow.connection.commit_with_next()
        found: str = uow.connection.execute(
            statement, values, settings=GENERIC_PLANS
        ).scalar_one_or_none()
        return found


class OneReader:
    """One row by id as its object's JSON text, or None when the scope cannot see it."""

    def __init__(self, read: OneRead) -> None:
        self.read = read
        self._custom = _CustomFields(read)
        # Built now, for a tenant without custom fields: a tree it cannot build fails here.
        fields, custom = self._custom.of(None)
        self._statements: OrderedDict[Hashable, Select[Any]] = OrderedDict(
            [(fields, one_statement(read, custom))]
        )

    def run(
        self, uow: UnitOfWork, row_id: uuid.UUID | None, given: Mapping[str, Any]
    ) -> str | None:
        """``row_id``: None for a summary, which has no row (its period is ``given``)."""
        values = {
            **given,
            "caller_department_id": uow.scope.department_id,
            "tenant_id": str(uow.scope.tenant_id),
        }
        if row_id is not None:
            values["row_id"] = row_id
        found: str | None = uow.connection.execute(
            self._statement(uow), values, settings=GENERIC_PLANS
        ).scalar_one_or_none()
        return found

    def _statement(self, uow: UnitOfWork) -> Select[Any]:
        fields, custom = self._custom.of(uow)
        statement = self._statements.get(fields)
        if statement is None:
            if len(self._statements) >= _FIELDS_KEPT:
                self._statements.popitem(last=False)
            statement = self._statements[fields] = one_statement(self.read, custom)
        else:
            self._statements.move_to_end(fields)
        return statement
