"""Deals: their type (the platform's read model, ``types.read_type``), queries and mutations
(a record's own, and its moves and links to customers)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from typing import Any

import strawberry

from dealbase.graphql_api import loaders
from dealbase.graphql_api.custom_fields import custom_fields_field
from dealbase.graphql_api.customers import Customer
from dealbase.graphql_api.inputs import (
    DealChanges,
    DealFilter,
    DealInput,
    DealOperationInput,
    DealOrder,
    DealUpsertInput,
    deal_batch_of,
    deal_fields_of,
)
from dealbase.graphql_api.pipeline import Employee, Step, employee_of
from dealbase.graphql_api.records import GraphQLRecord, RecordListing, record_mutations
from dealbase.graphql_api.selections import selected, within
from dealbase.graphql_api.sync import sync_answers
from dealbase.graphql_api.types import (
    NESTED_DEFAULT,
    BigInt,
    Connection,
    GraphQLInfo,
    LazyActivity,
    listed,
    now_or_later,
    read_type,
)
from dealbase.platform.activities.models import Activity as ActivityModel
from dealbase.platform.deals import service as deals
from dealbase.platform.deals.models import CustomerLink, DealCreate, DealPatch
from dealbase.platform.deals.models import Deal as DealModel
from dealbase.platform.deals.models import DealFilter as DealFilterModel
from dealbase.platform.deals.models import DealUpsert as DealUpsertModel
from dealbase.platform.pagination import DEFAULT_PAGE_SIZE, page_size
from dealbase.platform.pipeline.models import Employee as EmployeeModel
from dealbase.platform.pipeline.models import Step as StepModel
from dealbase.platform.validation import validated


def _in_department(step: StepModel | None) -> StepModel:
    assert step is not None, "a deal's step is in its department"
    return step


# Plain functions that may return an awaitable: graphql-core awaits what needs it.
def step_of_deal(
    deal: strawberry.Parent[DealModel], info: GraphQLInfo
) -> StepModel | Awaitable[StepModel]:
    return now_or_later(loaders.step(info.context, deal.step_id), _in_department)


def employee_of_deal(
    deal: strawberry.Parent[DealModel], info: GraphQLInfo
) -> EmployeeModel | Awaitable[EmployeeModel | None] | None:
    return employee_of(info, deal.employee_id)


def activities_of_deal(
    deal: strawberry.Parent[DealModel], info: GraphQLInfo, first: int = NESTED_DEFAULT
) -> list[ActivityModel] | Awaitable[list[ActivityModel]]:
    found = loaders.activities_of(info.context, "deal_id", deal.id, page_size(first))
    return now_or_later(found, listed)


# The SDL's order, older than the read model's (the REST document's).
_SDL_ORDER = ("id", "external_id", "department_id", "step_id", "employee_id", "employee_name")


@read_type(DealModel, leading=_SDL_ORDER)
class Deal:
    volume = strawberry.field(graphql_type=BigInt | None)
    customers = strawberry.field(
        graphql_type=list[Customer],
        description="The deal's customers, in the order they were linked.",
    )
    step = strawberry.field(resolver=step_of_deal, graphql_type=Step)
    employee = strawberry.field(resolver=employee_of_deal, graphql_type=Employee | None)
    activities = strawberry.field(
        resolver=activities_of_deal,
        description="The deal's activities, oldest first.",
        graphql_type=list[LazyActivity],
    )
    custom_fields = custom_fields_field(deals.RECORD)


@strawberry.type
class DealQuery:
    @strawberry.field(graphql_type=Deal)
    async def deal(self, info: GraphQLInfo, id: uuid.UUID) -> DealModel:
        return await info.context.run(lambda uow: deals.RECORD.get(uow, id))

    @strawberry.field(graphql_type=Connection[Deal])
    async def deals(
        self,
        info: GraphQLInfo,
        filter: DealFilter | None = None,
        order_by: DealOrder = DealOrder.CREATED_ASC,
        first: int = DEFAULT_PAGE_SIZE,
        after: str | None = None,
    ) -> Connection[DealModel]:
        found = RecordListing(deals.RECORD, DealFilterModel)
        page = await found.page(info, filter, first, after, order_by={"order_by": order_by.value})
        nodes = [edge.node for edge in page.edges]
        selections = within(info)
        loads: list[asyncio.Future[Any]] = []
        if selected(selections, "edges.node.step"):
            loads += [loaders.step(info.context, step_id) for step_id in {n.step_id for n in nodes}]
        if selected(selections, "edges.node.employee"):
            employee_ids = {n.employee_id for n in nodes if n.employee_id is not None}
            loads += [loaders.employee(info.context, employee_id) for employee_id in employee_ids]
        await loaders.prefetch(loads)
        return page


DEAL_MUTATIONS = record_mutations(
    GraphQLRecord(
        noun="deal",
        plural="deals",
        service=deals.RECORD,
        create=deals.create,
        graphql_type=Deal,
        answers=sync_answers("Deal", "Deals", Deal),
        create_input=DealInput,
        create_fields=DealCreate,
        changes_input=DealChanges,
        patch=DealPatch,
        upsert_input=DealUpsertInput,
        upsert_fields=DealUpsertModel,
        operation_input=DealOperationInput,
        batch_of=deal_batch_of,
        create_fields_of=deal_fields_of,
        data_named_by_op=True,
        batch_description=" Each operation gives its deal in the field its op names: create (a"
        " DealInput, customers included) or upsert (a DealUpsertInput); its errors name that"
        " field.",
    )
)


@strawberry.type
class DealMutation:
    create_deal = DEAL_MUTATIONS.create
    upsert_deal = DEAL_MUTATIONS.upsert
    batch_deals = DEAL_MUTATIONS.batch
    update_deal = DEAL_MUTATIONS.update

    @strawberry.mutation(graphql_type=Deal)
    async def move_deal(self, info: GraphQLInfo, id: uuid.UUID, step_id: uuid.UUID) -> DealModel:
        patch = validated(DealPatch, {"step_id": step_id})
        return await info.context.write(lambda uow: deals.RECORD.update(uow, id, patch))

    @strawberry.mutation(description="employeeId null unassigns the deal.", graphql_type=Deal)
    async def assign_deal(
        self, info: GraphQLInfo, id: uuid.UUID, employee_id: uuid.UUID | None
    ) -> DealModel:
        patch = validated(DealPatch, {"employee_id": employee_id})
        return await info.context.write(lambda uow: deals.RECORD.update(uow, id, patch))

    delete_deal = DEAL_MUTATIONS.delete

    @strawberry.mutation(graphql_type=Deal)
    async def link_customer(
        self, info: GraphQLInfo, deal_id: uuid.UUID, customer_id: uuid.UUID
    ) -> DealModel:
        link = validated(CustomerLink, {"customer_id": customer_id})
        return await info.context.write(lambda uow: deals.link_customer(uow, deal_id, link))

    @strawberry.mutation(graphql_type=Deal)
    async def unlink_customer(
        self, info: GraphQLInfo, deal_id: uuid.UUID, customer_id: uuid.UUID
    ) -> DealModel:
        def unlink(uow: Any) -> Any:
            deals.unlink_customer(uow, deal_id, customer_id)
            return deals.RECORD.get(uow, deal_id)

        return await info.context.write(unlink)
