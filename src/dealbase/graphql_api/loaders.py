"""DataLoaders: each batches one kind of lookup into one platform call (one or two statements)
per request, whatever the number of parents asking."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

from strawberry.dataloader import DataLoader

from dealbase.db.units import UnitOfWork
from dealbase.graphql_api.context import GraphQLContext
from dealbase.platform.activities import service as activities
from dealbase.platform.activities.models import Activity
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import Customer
from dealbase.platform.deals import service as deals
from dealbase.platform.deals.models import Deal
from dealbase.platform.pipeline import service as pipeline
from dealbase.platform.pipeline.models import Employee, Step
from dealbase.platform.records import SyncedRecord

V = TypeVar("V")


def _loader(
    context: GraphQLContext,
    name: str,
    per_parent: int,
    fetch: Callable[[UnitOfWork, Sequence[uuid.UUID]], dict[uuid.UUID, V]],
) -> DataLoader[uuid.UUID, V | None]:
    key = (name, per_parent)
    if key not in context.loaders:

        async def load(ids: list[uuid.UUID]) -> list[V | None]:
            found = await context.run(lambda uow: fetch(uow, ids))
            return [found.get(row_id) for row_id in ids]

        context.loaders[key] = DataLoader(load_fn=load)
    loader: DataLoader[uuid.UUID, V | None] = context.loaders[key]
    return loader


# A loader's load is a future: done once its batch ran, so a resolver can read it without
# awaiting (graphql_api.types).
def step(context: GraphQLContext, step_id: uuid.UUID) -> asyncio.Future[Step | None]:
    loader = _loader(context, "step", 0, pipeline.steps_by_ids)
    return cast("asyncio.Future[Step | None]", loader.load(step_id))


def employee(context: GraphQLContext, employee_id: uuid.UUID) -> asyncio.Future[Employee | None]:
    loader = _loader(context, "employee", 0, pipeline.employees_by_ids)
    return cast("asyncio.Future[Employee | None]", loader.load(employee_id))


def customer(context: GraphQLContext, customer_id: uuid.UUID) -> Awaitable[Customer | None]:
    return _loader(context, "customer", 0, customers.RECORD.by_ids).load(customer_id)


def deal(context: GraphQLContext, deal_id: uuid.UUID) -> Awaitable[Deal | None]:
    return _loader(context, "deal", 0, deals.RECORD.by_ids).load(deal_id)


def deals_of_step(
    context: GraphQLContext, step_id: uuid.UUID, first: int
) -> asyncio.Future[list[Deal] | None]:
    loader = _loader(
        context, "deals_of_step", first, lambda uow, ids: deals.first_of_steps(uow, ids, first)
    )
    return cast("asyncio.Future[list[Deal] | None]", loader.load(step_id))


def deals_of_customer(
    context: GraphQLContext, customer_id: uuid.UUID, first: int
) -> asyncio.Future[list[Deal] | None]:
    loader = _loader(
        context,
        "deals_of_customer",
        first,
        lambda uow, ids: deals.first_of_customers(uow, ids, first),
    )
    return cast("asyncio.Future[list[Deal] | None]", loader.load(customer_id))


def activities_of(
    context: GraphQLContext, parent: str, parent_id: uuid.UUID, first: int
) -> asyncio.Future[list[Activity] | None]:
    """``parent`` is ``deal_id`` or ``customer_id``."""
    loader = _loader(
        context,
        f"activities_of_{parent}",
        first,
        lambda uow, ids: activities.first_of(uow, parent, ids, first),
    )
    return cast("asyncio.Future[list[Activity] | None]", loader.load(parent_id))


def custom_values(
    context: GraphQLContext, record: SyncedRecord[Any, Any, Any], record_id: uuid.UUID
) -> Awaitable[dict[str, Any] | None]:
    """The custom values of a ``record`` read without them (a nested list's, which its
    service reads as the record's own columns), by field name: one statement for all of a
    request's records of its kind."""

    def values(uow: UnitOfWork, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
        custom = record.fitted(uow).custom
        return {} if custom is None else custom.values(uow, ids)

    return _loader(context, f"custom_values_of_{record.noun}", 0, values).load(record_id)


async def prefetch(loads: Iterable[asyncio.Future[Any]]) -> None:
    """Waits for loads a page's items will ask for, started before the page returns, so that
    each item's field finds its value done instead of awaiting it: graphql-core gathers the
    awaitables of a list's items in a task each (100 for a page of 50 deals with a step and an
    employee)."""
    await asyncio.gather(*loads)
