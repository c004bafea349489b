"""A GraphQL request's fields share one read transaction; a statement that fails it, or a field
cancelled mid-statement, ends it, and the fields read after it read in a new one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from sqlalchemy import func, literal_column, select

from dealbase.db.units import UnitOfWork
from dealbase.graphql_api.context import GraphQLContext
from tests.support import TenantWorld, opened_database


def _divided_by_zero(uow: UnitOfWork) -> int:
    return int(uow.connection.execute(select(literal_column("1 / 0"))).scalar_one())


def _asleep(uow: UnitOfWork) -> None:
    uow.connection.execute(select(func.pg_sleep(600)))


async def _statements_asleep(watching: psycopg.AsyncConnection[Any]) -> int:
    found = await watching.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE wait_event = 'PgSleep' AND datname = current_database()"
    )
    row = await found.fetchone()
    assert row is not None
    return int(row[0])


def _transaction_id(uow: UnitOfWork) -> int:
    return int(uow.connection.execute(select(func.txid_current())).scalar_one())


def test_a_read_after_one_whose_statement_failed_runs_in_a_new_transaction(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    scope = make_tenant().tenant.scope

    async def reads() -> tuple[int, int, int]:
        async with opened_database(database_url) as database:
            context = GraphQLContext(request_id="", caller=scope, database=database)
            try:
                first = await context.run(_transaction_id)
                shared = await context.run(_transaction_id)
                with pytest.raises(psycopg.errors.DivisionByZero):
                    await context.run(_divided_by_zero)
                after = await context.run(_transaction_id)
            finally:
                await context.close()
        return first, shared, after

    first, shared, after = asyncio.run(reads())

    assert shared == first
    assert after > first


def test_a_read_after_a_field_cancelled_mid_statement_runs_in_a_new_transaction(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    """graphql-core cancels a query's other root fields when a non-null one fails; psycopg then
    cancels the statement in flight, which fails the transaction. Strawberry, answering the
    request anew after ``graphql_api.direct`` gave it up, reads after that."""
    scope = make_tenant().tenant.scope

    async def reads() -> tuple[int, int]:
        async with opened_database(database_url) as database:
            context = GraphQLContext(request_id="", caller=scope, database=database)
            try:
                first = await context.run(_transaction_id)
                asleep = asyncio.ensure_future(context.run(_asleep))
                async with await psycopg.AsyncConnection.connect(database_url) as watching:
                    while await _statements_asleep(watching) == 0:
                        await asyncio.sleep(0.01)
                asleep.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await asleep
                after = await context.run(_transaction_id)
            finally:
                await context.close()
        return first, after

    first, after = asyncio.run(reads())

    assert after > first
