"""Customers: their type (the platform's read model, ``types.read_type``), queries and
mutations."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from typing import Any

import strawberry

from dealbase.graphql_api import loaders
from dealbase.graphql_api.custom_fields import custom_fields_field
from dealbase.graphql_api.inputs import (
    CustomerChanges,
    CustomerFilter,
    CustomerInput,
    CustomerOperationInput,
    batch_of,
)
from dealbase.graphql_api.records import GraphQLRecord, RecordListing, record_mutations
from dealbase.graphql_api.selections import nested_page_size, within
from dealbase.graphql_api.sync import sync_answers
from dealbase.graphql_api.types import (
    NESTED_DEFAULT,
    Connection,
    GraphQLInfo,
    LazyActivity,
    LazyDeal,
    listed,
    now_or_later,
    read_type,
)
from dealbase.platform.activities.models import Activity as ActivityModel
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import Customer as CustomerModel
from dealbase.platform.customers.models import CustomerFields, CustomerPatch
from dealbase.platform.customers.models import CustomerFilter as CustomerFilterModel
from dealbase.platform.deals.models import Deal as DealModel
from dealbase.platform.pagination import DEFAULT_PAGE_SIZE, page_size


def deals_of_customer(
    customer: strawberry.Parent[CustomerModel], info: GraphQLInfo, first: int = NESTED_DEFAULT
) -> list[DealModel] | Awaitable[list[DealModel]]:
    found = loaders.deals_of_customer(info.context, customer.id, page_size(first))
    return now_or_later(found, listed)


def activities_of_customer(
    customer: strawberry.Parent[CustomerModel], info: GraphQLInfo, first: int = NESTED_DEFAULT
) -> list[ActivityModel] | Awaitable[list[ActivityModel]]:
    found = loaders.activities_of(info.context, "customer_id", customer.id, page_size(first))
    return now_or_later(found, listed)


@read_type(CustomerModel)
class Customer:
    deals = strawberry.field(
        resolver=deals_of_customer,
        description="The deals the customer is linked to, oldest first.",
        graphql_type=list[LazyDeal],
    )
    activities = strawberry.field(
        resolver=activities_of_customer,
        description="The customer's activities, oldest first.",
        graphql_type=list[LazyActivity],
    )
    custom_fields = custom_fields_field(customers.RECORD)


@strawberry.type
class CustomerQuery:
    @strawberry.field(graphql_type=Customer)
    async def customer(self, info: GraphQLInfo, id: uuid.UUID) -> CustomerModel:
        return await info.context.run(lambda uow: customers.RECORD.get(uow, id))

    @strawberry.field(graphql_type=Connection[Customer])
    async def customers(
        self,
        info: GraphQLInfo,
        filter: CustomerFilter | None = None,
        first: int = DEFAULT_PAGE_SIZE,
        after: str | None = None,
    ) -> Connection[CustomerModel]:
        found = RecordListing(customers.RECORD, CustomerFilterModel)
        page = await found.page(info, filter, first, after)
        ids = [edge.node.id for edge in page.edges]
        selected = within(info)
        loads: list[asyncio.Future[Any]] = []
        deals_first = nested_page_size(selected, "edges.node.deals")
        if deals_first is not None:
            loads += [loaders.deals_of_customer(info.context, id, deals_first) for id in ids]
        activities_first = nested_page_size(selected, "edges.node.activities")
        if activities_first is not None:
            loads += [
                loaders.activities_of(info.context, "customer_id", id, activities_first)
                for id in ids
            ]
        await loaders.prefetch(loads)
        return page


CUSTOMER_MUTATIONS = record_mutations(
    GraphQLRecord(
        noun="customer",
        plural="customers",
        service=customers.RECORD,
        create=customers.create,
        graphql_type=Customer,
        answers=sync_answers("Customer", "Customers", Customer),
        create_input=CustomerInput,
        create_fields=CustomerFields,
        changes_input=CustomerChanges,
        patch=CustomerPatch,
        upsert_input=CustomerInput,
        upsert_fields=CustomerFields,
        operation_input=CustomerOperationInput,
        batch_of=batch_of,
    )
)


@strawberry.type
class CustomerMutation:
    create_customer = CUSTOMER_MUTATIONS.create
    update_customer = CUSTOMER_MUTATIONS.update
    delete_customer = CUSTOMER_MUTATIONS.delete
    upsert_customer = CUSTOMER_MUTATIONS.upsert
    batch_customers = CUSTOMER_MUTATIONS.batch
