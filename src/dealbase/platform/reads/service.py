"""Reads answered whole by PostgreSQL: each reader runs its tree as one statement and returns
the JSON text PostgreSQL built.

A reader keeps its statements, one for each shape of request (which filters apply, whether it
pages on, the order): the tree is built once per document by its caller, the statement once
per shape here.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from sqlalchemy import Select

from dealbase.db.sessions import StatementSettings
from dealbase.db.units import UnitOfWork
from dealbase.platform.pagination import fingerprint, page_request
from dealbase.platform.reads.models import OneRead, PageRead
from dealbase.platform.reads.repository import (
    list_filters,
    list_order,
    one_statement,
    page_statement,
)

# Shapes a page reader keeps statements for (filters given, paging on, order); past that the
# least recently built goes.
_SHAPES_KEPT = 64

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


class PageReader:
    """A page of a list as its connection's JSON text, with the rules of ``list_page``: the
    same page size and cursor checks (``Invalid``), the same filters in the scope's department,
    the same keyset order and cursors."""

    def __init__(self, read: PageRead) -> None:
        self.read = read
        self._statements: dict[Any, Select[Any]] = {}

    def run(
        self,
        uow: UnitOfWork,
        filters: BaseModel,
        first: int | None,
        after: str | None,
        given: Mapping[str, Any],
        caller_department_id: uuid.UUID | None,
        *,
        last: bool = False,
    ) -> str:
        """``given``: the nested lists' lengths, by the names the tree gives them. ``last``:
        the unit of work reads nothing after the page, whose statement then carries its
        COMMIT (once the request passed every check: a refusal sends nothing)."""
        page = page_request(first, after, filters)
        resource = self.read.resource
        shape, values = list_filters(resource).shape_and_values(uow.scope.department_id, filters)
        order = list_order(resource, filters)
        key = (shape, order, page.after is not None)
        statement = self._statements.get(key)
        if statement is None:
            if len(self._statements) >= _SHAPES_KEPT:
                del self._statements[next(iter(self._statements))]
            statement = self._statements[key] = page_statement(
                self.read, shape, order, page.after is not None
            )
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
        self._statement = one_statement(read)

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
            self._statement, values, settings=GENERIC_PLANS
        ).scalar_one_or_none()
        return found
