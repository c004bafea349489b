"""A GraphQL request's fields share one read transaction; a statement that fails it ends it, and
the fields read after it read in a new one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg
import pytest
from sqlalchemy import func, literal_column, select

from dealbase.graphql_api.context import GraphQLContext
from dealbase.tenancy.database.connections import Database, UnitOfWork
from tests.support import TenantWorld


def _divided_by_zero(uow: UnitOfWork) -> int:
    return int(uow.connection.execute(select(literal_column("1 / 0"))).scalar_one())


def _transaction_id(uow: UnitOfWork) -> int:
    return int(uow.connection.execute(select(func.txid_current())).scalar_one())


def test_a_read_after_one_whose_statement_failed_runs_in_a_new_transaction(
    database_url: str, make_tenant: Callable[..., TenantWorld]
) -> None:
    scope = make_tenant().tenant.scope

    async def reads() -> tuple[int, int, int]:
        database = Database(database_url, pool_size=1, max_overflow=0)
        await database.open()
        context = GraphQLContext(request_id="", caller=scope, database=database)
        try:
            first = await context.run(_transaction_id)
            shared = await context.run(_transaction_id)
            with pytest.raises(psycopg.errors.DivisionByZero):
                await context.run(_divided_by_zero)
            after = await context.run(_transaction_id)
        finally:
            await context.close()
            await database.close()
        return first, shared, after

    first, shared, after = asyncio.run(reads())

    assert shared == first
    assert after > first
