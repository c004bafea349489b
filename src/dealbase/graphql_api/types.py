"""GraphQL object types: the platform's domain objects in GraphQL's conventions (camelCase,
connections), with nested fields resolved through the request's DataLoaders."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import date, datetime
from enum import Enum
from typing import Generic, NewType, TypeVar

import strawberry
from strawberry.types import Info

from dealbase.graphql_api import loaders
from dealbase.graphql_api.context import GraphQLContext
from dealbase.platform.activities.models import Activity as ActivityModel
from dealbase.platform.customers.models import Customer as CustomerModel
from dealbase.platform.deals.models import Deal as DealModel
from dealbase.platform.pagination import Page, page_size
from dealbase.platform.pipeline.models import Department as DepartmentModel
from dealbase.platform.pipeline.models import Employee as EmployeeModel
from dealbase.platform.pipeline.models import EmployeeSummary as EmployeeSummaryModel
from dealbase.platform.pipeline.models import PipelineSummary as PipelineSummaryModel
from dealbase.platform.pipeline.models import Step as StepModel
from dealbase.platform.pipeline.models import StepSummary as StepSummaryModel
from dealbase.platform.pipeline.models import StepTotals
from dealbase.platform.webhooks.delivery_models import Attempt as AttemptModel
from dealbase.platform.webhooks.delivery_models import Delivery as DeliveryModel
from dealbase.platform.webhooks.models import WebhookEndpoint as WebhookEndpointModel
from dealbase.platform.webhooks.models import WithSecret

GraphQLInfo = Info[GraphQLContext, None]


def _big_int(value: object) -> int:
    # A JSON number only, as REST reads volumes: no strings, no floats, no booleans.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("BigInt takes an integer")
    number = value
    if not -(2**63) <= number < 2**63:
        raise ValueError("BigInt is a 64-bit integer")
    return number


BigInt = NewType("BigInt", int)
# Registered in the schema's scalar_map (graphql_api.schema).
BIG_INT_SCALAR = strawberry.scalar(
    name="BigInt",
    description="A 64-bit integer (GraphQL's Int has 32 bits), as a JSON number.",
    serialize=int,
    parse_value=_big_int,
)

# Nested lists without their own pagination return at most this many items by default.
NESTED_DEFAULT = 25

Copy = TypeVar("Copy")


def _copied(cls: type[Copy], model: object, **converted: object) -> Copy:
    """An object of ``cls`` whose fields (its annotations) are ``model``'s attributes of the
    same names, but for the ``converted`` ones."""
    make: Callable[..., Copy] = cls
    copied = {name: getattr(model, name) for name in cls.__annotations__ if name not in converted}
    return make(**copied, **converted)


@strawberry.enum
class StepKind(Enum):
    OPEN = "open"
    WON = "won"
    LOST = "lost"


@strawberry.type
class Step:
    id: uuid.UUID
    department_id: uuid.UUID
    name: str
    position: int
    kind: StepKind

    @classmethod
    def of(cls, step: StepModel) -> Step:
        return _copied(cls, step, kind=StepKind(step.kind))


@strawberry.type
class Employee:
    id: uuid.UUID
    department_id: uuid.UUID
    name: str
    email: str | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, employee: EmployeeModel) -> Employee:
        return _copied(cls, employee)


Model = TypeVar("Model")
Converted = TypeVar("Converted")


def _now_or_later(
    found: asyncio.Future[Model], convert: Callable[[Model], Converted]
) -> Converted | Awaitable[Converted]:
    """A loader's answer converted now when its batch already ran (``loaders.prefetch``), so
    graphql-core has no awaitable to gather; later otherwise."""
    if found.done():
        return convert(found.result())

    async def later() -> Converted:
        return convert(await found)

    return later()


def _deals_of(found: list[DealModel] | None) -> list[Deal]:
    return [Deal.of(deal) for deal in found or []]


def _activities_of(found: list[ActivityModel] | None) -> list[Activity]:
    return [Activity.of(activity) for activity in found or []]


def _employee_of(employee: EmployeeModel | None) -> Employee | None:
    return None if employee is None else Employee.of(employee)


def _employee(
    info: GraphQLInfo, employee_id: uuid.UUID | None
) -> Employee | Awaitable[Employee | None] | None:
    """The employee a deal or an activity is assigned to, through the request's loader."""
    if employee_id is None:
        return None
    return _now_or_later(loaders.employee(info.context, employee_id), _employee_of)


def _step_of(step: StepModel | None) -> Step:
    assert step is not None, "a deal's step is in its department"
    return Step.of(step)


@strawberry.type
class Department:
    id: uuid.UUID
    name: str
    steps: list[Step]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, department: DepartmentModel) -> Department:
        return _copied(cls, department, steps=[Step.of(step) for step in department.steps])


# The object types list the platform's attributes again, unlike the inputs (graphql_api.inputs):
# resolvers read them (self.id, self.step_id, ...), so mypy must see them, and several differ from
# the platform's type (BigInt, enums, nested objects). tests/test_field_coverage.py fails when one
# is missing. Each is a plain field, read without a resolver call: a dashboard read resolves about
# 1,500 of them.
@strawberry.type
class Customer:
    id: uuid.UUID
    external_id: str | None
    tenant_id: uuid.UUID
    department_id: uuid.UUID
    last_name: str
    first_name: str | None
    company: str | None
    website: str | None
    title: str | None
    phone_1: str | None
    phone_2: str | None
    phone_3: str | None
    phone_1_label: str | None
    phone_2_label: str | None
    phone_3_label: str | None
    email: str | None
    postcode: str | None
    address: str | None
    address_addition: str | None
    city: str | None
    country: str | None
    state: str | None
    contact_origin: str | None
    birthday: date | None
    note: str | None
    created_at: datetime
    updated_at: datetime
    version: int

    @classmethod
    def of(cls, customer: CustomerModel) -> Customer:
        return _copied(cls, customer)

    @strawberry.field(
        description="The deals the customer is linked to, oldest first.", graphql_type=list["Deal"]
    )
    def deals(
        self, info: GraphQLInfo, first: int = NESTED_DEFAULT
    ) -> list[Deal] | Awaitable[list[Deal]]:
        found = loaders.deals_of_customer(info.context, self.id, page_size(first))
        return _now_or_later(found, _deals_of)

    @strawberry.field(
        description="The customer's activities, oldest first.", graphql_type=list["Activity"]
    )
    def activities(
        self, info: GraphQLInfo, first: int = NESTED_DEFAULT
    ) -> list[Activity] | Awaitable[list[Activity]]:
        found = loaders.activities_of(info.context, "customer_id", self.id, page_size(first))
        return _now_or_later(found, _activities_of)


@strawberry.type
class Deal:
    id: uuid.UUID
    external_id: str | None
    department_id: uuid.UUID
    step_id: uuid.UUID
    employee_id: uuid.UUID | None
    employee_name: str | None
    name: str
    volume: BigInt | None
    deal_origin: str | None
    note: str | None
    created_at: datetime
    updated_at: datetime
    version: int
    customers: list[Customer] = strawberry.field(
        description="The deal's customers, in the order they were linked."
    )

    @classmethod
    def of(cls, deal: DealModel) -> Deal:
        return _copied(cls, deal, customers=[Customer.of(customer) for customer in deal.customers])

    # Plain functions that may return an awaitable: graphql-core awaits what needs it.
    @strawberry.field(graphql_type=Step)
    def step(self, info: GraphQLInfo) -> Step | Awaitable[Step]:
        return _now_or_later(loaders.step(info.context, self.step_id), _step_of)

    @strawberry.field(graphql_type=Employee | None)
    def employee(self, info: GraphQLInfo) -> Employee | Awaitable[Employee | None] | None:
        return _employee(info, self.employee_id)

    @strawberry.field(
        description="The deal's activities, oldest first.", graphql_type=list["Activity"]
    )
    def activities(
        self, info: GraphQLInfo, first: int = NESTED_DEFAULT
    ) -> list[Activity] | Awaitable[list[Activity]]:
        found = loaders.activities_of(info.context, "deal_id", self.id, page_size(first))
        return _now_or_later(found, _activities_of)


@strawberry.enum
class ActivityType(Enum):
    CALL = "call"
    EMAIL = "email"
    MEETING = "meeting"
    TASK = "task"
    NOTE = "note"


@strawberry.type
class Activity:
    id: uuid.UUID
    external_id: str | None
    department_id: uuid.UUID
    type: ActivityType
    subject: str | None
    note: str | None
    due_at: datetime | None
    done_at: datetime | None
    customer_id: uuid.UUID
    deal_id: uuid.UUID | None
    employee_id: uuid.UUID | None
    created_at: datetime
    updated_at: datetime
    version: int

    @classmethod
    def of(cls, activity: ActivityModel) -> Activity:
        return _copied(cls, activity, type=ActivityType(activity.type))

    @strawberry.field
    async def customer(self, info: GraphQLInfo) -> Customer:
        customer = await loaders.customer(info.context, self.customer_id)
        assert customer is not None, "an activity's customer is in its department"
        return Customer.of(customer)

    @strawberry.field
    async def deal(self, info: GraphQLInfo) -> Deal | None:
        if self.deal_id is None:
            return None
        deal = await loaders.deal(info.context, self.deal_id)
        return None if deal is None else Deal.of(deal)

    @strawberry.field(graphql_type=Employee | None)
    def employee(self, info: GraphQLInfo) -> Employee | Awaitable[Employee | None] | None:
        return _employee(info, self.employee_id)


@strawberry.type(description="Where a department's events are sent; its secret is never shown.")
class WebhookEndpoint:
    id: uuid.UUID
    department_id: uuid.UUID
    url: str
    events: list[str] = strawberry.field(description='Event types, or ["*"] for every type.')
    enabled: bool
    disabled_reason: str | None = strawberry.field(
        description="Why delivery disabled the endpoint; null when enabled or disabled by hand."
    )
    description: str | None
    ordered: bool = strawberry.field(
        description="Events are sent one at a time in commit order; false: in parallel."
    )
    previous_secret_expires_at: datetime | None = strawberry.field(
        description="Until when the secret replaced by the last rotation still signs."
    )
    created_at: datetime
    updated_at: datetime
    version: int

    @classmethod
    def of(cls, endpoint: WebhookEndpointModel) -> WebhookEndpoint:
        return _copied(cls, endpoint)


@strawberry.type(description="An endpoint with its new signing secret, shown this once.")
class IssuedWebhookSecret:
    endpoint: WebhookEndpoint
    secret: str = strawberry.field(
        description="Standard Webhooks signing secret: whsec_ and the base64 of the key."
    )

    @classmethod
    def of(cls, issued: WithSecret) -> IssuedWebhookSecret:
        return cls(endpoint=WebhookEndpoint.of(issued), secret=issued.secret)


@strawberry.enum
class WebhookDeliveryState(Enum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


@strawberry.type(description="One attempt to send a webhook delivery.")
class WebhookDeliveryAttempt:
    attempted_at: datetime
    status_code: int | None = strawberry.field(
        description="The endpoint's HTTP status; null when no answer came (refused, timed out,"
        " an address not allowed)."
    )
    duration_ms: int
    error: str | None = strawberry.field(description="Why the attempt failed; null on success.")

    @classmethod
    def of(cls, attempt: AttemptModel) -> WebhookDeliveryAttempt:
        return _copied(cls, attempt)


@strawberry.type(
    description="An event (or a test event) on its way to one webhook endpoint, and every"
    " attempt to send it."
)
class WebhookDelivery:
    id: uuid.UUID
    webhook_endpoint_id: uuid.UUID
    event_id: uuid.UUID | None = strawberry.field(
        description="The event sent; null for a test event (eventType webhook.test)."
    )
    event_type: str
    state: WebhookDeliveryState = strawberry.field(
        description="PENDING until an attempt succeeds (DELIVERED) or the retries give up (FAILED)."
    )
    attempt_count: int
    next_attempt_at: datetime | None = strawberry.field(
        description="When a pending delivery is next tried; null once delivered or failed."
    )
    created_at: datetime
    delivered_at: datetime | None
    attempts: list[WebhookDeliveryAttempt] = strawberry.field(
        description="Every attempt, oldest first."
    )

    @classmethod
    def of(cls, delivery: DeliveryModel) -> WebhookDelivery:
        return _copied(
            cls,
            delivery,
            webhook_endpoint_id=delivery.endpoint_id,
            state=WebhookDeliveryState(delivery.state),
            attempts=[WebhookDeliveryAttempt.of(attempt) for attempt in delivery.attempts],
        )


Node = TypeVar("Node")


@strawberry.type
class PageInfo:
    has_next_page: bool
    end_cursor: str | None


@strawberry.type
class Edge(Generic[Node]):
    node: Node
    cursor: str


@strawberry.type
class Connection(Generic[Node]):
    edges: list[Edge[Node]]
    page_info: PageInfo
    count: strawberry.Private[Callable[[], Awaitable[int]]]

    @strawberry.field(description="How many items match the filters, over every page.")
    async def total_count(self) -> int:
        return await self.count()


Item = TypeVar("Item")


def connection(
    page: Page[Item], to_node: Callable[[Item], Node], count: Callable[[], Awaitable[int]]
) -> Connection[Node]:
    return Connection(
        edges=[
            Edge(node=to_node(item), cursor=cursor)
            for item, cursor in zip(page.items, page.cursors, strict=True)
        ],
        page_info=PageInfo(
            has_next_page=page.next_cursor is not None,
            end_cursor=page.cursors[-1] if page.cursors else None,
        ),
        count=count,
    )


@strawberry.type
class PipelineStep:
    step: Step
    deal_count: int
    total_volume: BigInt

    @classmethod
    def of(cls, totals: StepTotals) -> PipelineStep:
        return _copied(cls, totals, step=Step.of(totals.step))

    @strawberry.field(description="The step's first deals, oldest first.", graphql_type=list[Deal])
    def deals(
        self, info: GraphQLInfo, first: int = NESTED_DEFAULT
    ) -> list[Deal] | Awaitable[list[Deal]]:
        found = loaders.deals_of_step(info.context, self.step.id, page_size(first))
        return _now_or_later(found, _deals_of)


@strawberry.type
class StepSummary:
    step: Step
    deal_count: int
    volume: BigInt

    @classmethod
    def of(cls, summary: StepSummaryModel) -> StepSummary:
        return _copied(cls, summary, step=Step.of(summary.step))


@strawberry.type
class EmployeeSummary:
    employee: Employee | None = strawberry.field(description="null: the unassigned deals.")
    deal_count: int
    volume: BigInt
    won_volume: BigInt
    lost_volume: BigInt

    @classmethod
    def of(cls, summary: EmployeeSummaryModel) -> EmployeeSummary:
        employee = summary.employee
        return _copied(cls, summary, employee=None if employee is None else Employee.of(employee))


@strawberry.type(
    description="Deals created in [createdFrom, createdTo), by the step they are in now and by"
    " employee; won and lost count the deals now in a step of that kind."
)
class PipelineSummary:
    created_from: datetime
    created_to: datetime
    deal_count: int
    volume: BigInt
    won_volume: BigInt
    lost_volume: BigInt
    steps: list[StepSummary]
    employees: list[EmployeeSummary]

    @classmethod
    def of(cls, summary: PipelineSummaryModel) -> PipelineSummary:
        return _copied(
            cls,
            summary,
            steps=[StepSummary.of(step) for step in summary.steps],
            employees=[EmployeeSummary.of(employee) for employee in summary.employees],
        )
