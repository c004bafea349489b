"""Activities: their type (the platform's read model, ``types.read_type``), queries and
mutations."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable

import strawberry

from dealbase.graphql_api import loaders
from dealbase.graphql_api.custom_fields import custom_fields_field
from dealbase.graphql_api.customers import Customer
from dealbase.graphql_api.deals import Deal
from dealbase.graphql_api.inputs import (
    ActivityChanges,
    ActivityFilter,
    ActivityInput,
    ActivityOperationInput,
    batch_of,
)
from dealbase.graphql_api.pipeline import Employee, employee_of
from dealbase.graphql_api.records import GraphQLRecord, RecordListing, record_mutations
from dealbase.graphql_api.sync import sync_answers
from dealbase.graphql_api.types import ActivityType, Connection, GraphQLInfo, read_type
from dealbase.platform.activities import service as activities
from dealbase.platform.activities.models import Activity as ActivityModel
from dealbase.platform.activities.models import ActivityFields, ActivityPatch
from dealbase.platform.activities.models import ActivityFilter as ActivityFilterModel
from dealbase.platform.customers.models import Customer as CustomerModel
from dealbase.platform.deals.models import Deal as DealModel
from dealbase.platform.pagination import DEFAULT_PAGE_SIZE
from dealbase.platform.pipeline.models import Employee as EmployeeModel


async def customer_of_activity(
    activity: strawberry.Parent[ActivityModel], info: GraphQLInfo
) -> CustomerModel:
    customer = await loaders.customer(info.context, activity.customer_id)
    assert customer is not None, "an activity's customer is in its department"
    return customer


async def deal_of_activity(
    activity: strawberry.Parent[ActivityModel], info: GraphQLInfo
) -> DealModel | None:
    if activity.deal_id is None:
        return None
    return await loaders.deal(info.context, activity.deal_id)


def employee_of_activity(
    activity: strawberry.Parent[ActivityModel], info: GraphQLInfo
) -> EmployeeModel | Awaitable[EmployeeModel | None] | None:
    return employee_of(info, activity.employee_id)


@read_type(ActivityModel)
class Activity:
    type = strawberry.field(graphql_type=ActivityType)
    customer = strawberry.field(resolver=customer_of_activity, graphql_type=Customer)
    deal = strawberry.field(resolver=deal_of_activity, graphql_type=Deal | None)
    employee = strawberry.field(resolver=employee_of_activity, graphql_type=Employee | None)
    custom_fields = custom_fields_field(activities.RECORD)


@strawberry.type
class ActivityQuery:
    @strawberry.field(graphql_type=Activity)
    async def activity(self, info: GraphQLInfo, id: uuid.UUID) -> ActivityModel:
        return await info.context.run(lambda uow: activities.RECORD.get(uow, id))

    @strawberry.field(graphql_type=Connection[Activity])
    async def activities(
        self,
        info: GraphQLInfo,
        filter: ActivityFilter | None = None,
        first: int = DEFAULT_PAGE_SIZE,
        after: str | None = None,
    ) -> Connection[ActivityModel]:
        found = RecordListing(activities.RECORD, ActivityFilterModel)
        return await found.page(info, filter, first, after)


ACTIVITY_MUTATIONS = record_mutations(
    GraphQLRecord(
        noun="activity",
        plural="activities",
        service=activities.RECORD,
        create=activities.create,
        graphql_type=Activity,
        answers=sync_answers("Activity", "Activities", Activity),
        create_input=ActivityInput,
        create_fields=ActivityFields,
        changes_input=ActivityChanges,
        patch=ActivityPatch,
        upsert_input=ActivityInput,
        upsert_fields=ActivityFields,
        operation_input=ActivityOperationInput,
        batch_of=batch_of,
    )
)


@strawberry.type
class ActivityMutation:
    create_activity = ACTIVITY_MUTATIONS.create
    upsert_activity = ACTIVITY_MUTATIONS.upsert
    batch_activities = ACTIVITY_MUTATIONS.batch
    update_activity = ACTIVITY_MUTATIONS.update
    delete_activity = ACTIVITY_MUTATIONS.delete
