"""Queries and mutations: each calls the platform service REST calls, in a unit of work."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

import strawberry
from graphql import GraphQLError, get_operation_ast
from strawberry.extensions import SchemaExtension
from strawberry.schema.config import StrawberryConfig
from strawberry.types import ExecutionContext, ExecutionResult
from strawberry.types.graphql import OperationType
from strawberry.types.nodes import SelectedField, Selection

from dealbase.config import Settings
from dealbase.errors import Invalid
from dealbase.graphql_api import loaders
from dealbase.graphql_api.documents import DocumentCache, DocumentGuard
from dealbase.graphql_api.errors import DomainErrors
from dealbase.graphql_api.execution import (
    CompilingExecutionContext,
    FieldDefinitions,
    RootFieldObserver,
)
from dealbase.graphql_api.guards import Guards
from dealbase.graphql_api.inputs import (
    ActivityChanges,
    ActivityFilter,
    ActivityInput,
    ActivityOperationInput,
    CustomerChanges,
    CustomerFilter,
    CustomerInput,
    CustomerOperationInput,
    DealChanges,
    DealFilter,
    DealInput,
    DealOperationInput,
    DealOrder,
    DealUpsertInput,
    WebhookEndpointChanges,
    WebhookEndpointInput,
    batch_of,
    deal_batch_of,
    deal_fields_of,
    fields_of,
)
from dealbase.graphql_api.records import GraphQLRecord, RecordListing, record_mutations
from dealbase.graphql_api.subscriptions import Subscription
from dealbase.graphql_api.sync import ACTIVITY_ANSWERS, CUSTOMER_ANSWERS, DEAL_ANSWERS
from dealbase.graphql_api.types import (
    BIG_INT_SCALAR,
    NESTED_DEFAULT,
    Activity,
    BigInt,
    Connection,
    Customer,
    Deal,
    Department,
    Employee,
    GraphQLInfo,
    IssuedWebhookSecret,
    PipelineStep,
    PipelineSummary,
    Step,
    WebhookDelivery,
    WebhookEndpoint,
    connection,
)
from dealbase.platform.activities import service as activities
from dealbase.platform.activities.models import ActivityFields, ActivityPatch
from dealbase.platform.activities.models import ActivityFilter as ActivityFilterModel
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields, CustomerPatch
from dealbase.platform.customers.models import CustomerFilter as CustomerFilterModel
from dealbase.platform.deals import service as deals
from dealbase.platform.deals.models import CustomerLink, DealCreate, DealPatch
from dealbase.platform.deals.models import DealFilter as DealFilterModel
from dealbase.platform.deals.models import DealUpsert as DealUpsertModel
from dealbase.platform.pagination import DEFAULT_PAGE_SIZE, page_size
from dealbase.platform.pipeline import service as pipeline
from dealbase.platform.pipeline.models import SummaryRange
from dealbase.platform.validation import validated
from dealbase.platform.webhooks import deliveries
from dealbase.platform.webhooks import service as webhooks
from dealbase.platform.webhooks.models import WebhookEndpointFields, WebhookEndpointPatch


def _without(values: dict[str, Any], *names: str) -> dict[str, Any]:
    return {name: value for name, value in values.items() if name not in names}


def _selected(selections: Sequence[Selection], path: str) -> SelectedField | None:
    """The document's first selection of the field at ``path`` (dotted field names, not
    aliases), through fragments. ``@skip`` and ``@include`` are not read: at worst a prefetch
    loads what no field asks for."""
    name, _, rest = path.partition(".")
    for selection in selections:
        if not isinstance(selection, SelectedField):
            found = _selected(selection.selections, path)
        elif selection.name != name:
            continue
        else:
            found = _selected(selection.selections, rest) if rest else selection
        if found is not None:
            return found
    return None


def _within(info: GraphQLInfo) -> list[Selection]:
    """What the document selects inside the field being resolved (each of its nodes)."""
    return [inner for field in info.selected_fields for inner in field.selections]


def _nested_page_size(selections: Sequence[Selection], path: str) -> int | None:
    """The page size of the nested list at ``path`` as its field will ask for it, or None when
    it is not selected or its ``first`` is one the field will refuse (it reports that)."""
    field = _selected(selections, path)
    if field is None:
        return None
    # A literal comes as its text (Strawberry does not coerce it), a variable as its value;
    # validation has made either a valid Int.
    try:
        return page_size(int(field.arguments.get("first", NESTED_DEFAULT)))
    except Invalid:
        return None


@strawberry.type
class Pipeline:
    department: Department
    steps: list[PipelineStep]


@strawberry.type
class Query:
    @strawberry.field
    async def customer(self, info: GraphQLInfo, id: uuid.UUID) -> Customer:
        found = await info.context.run(lambda uow: customers.RECORD.get(uow, id))
        return Customer.of(found)

    @strawberry.field
    async def customers(
        self,
        info: GraphQLInfo,
        filter: CustomerFilter | None = None,
        first: int = DEFAULT_PAGE_SIZE,
        after: str | None = None,
    ) -> Connection[Customer]:
        found = RecordListing(customers.RECORD, CustomerFilterModel)
        page = await found.page(info, filter, first, after, Customer.of)
        ids = [edge.node.id for edge in page.edges]
        selected = _within(info)
        loads: list[asyncio.Future[Any]] = []
        deals_first = _nested_page_size(selected, "edges.node.deals")
        if deals_first is not None:
            loads += [loaders.deals_of_customer(info.context, id, deals_first) for id in ids]
        activities_first = _nested_page_size(selected, "edges.node.activities")
        if activities_first is not None:
            loads += [
                loaders.activities_of(info.context, "customer_id", id, activities_first)
                for id in ids
            ]
        await loaders.prefetch(loads)
        return page

    @strawberry.field
    async def deal(self, info: GraphQLInfo, id: uuid.UUID) -> Deal:
        return Deal.of(await info.context.run(lambda uow: deals.RECORD.get(uow, id)))

    @strawberry.field
    async def deals(
        self,
        info: GraphQLInfo,
        filter: DealFilter | None = None,
        order_by: DealOrder = DealOrder.CREATED_ASC,
        first: int = DEFAULT_PAGE_SIZE,
        after: str | None = None,
    ) -> Connection[Deal]:
        found = RecordListing(deals.RECORD, DealFilterModel)
        page = await found.page(
            info, filter, first, after, Deal.of, order_by={"order_by": order_by.value}
        )
        nodes = [edge.node for edge in page.edges]
        selected = _within(info)
        loads: list[asyncio.Future[Any]] = []
        if _selected(selected, "edges.node.step"):
            loads += [loaders.step(info.context, step_id) for step_id in {n.step_id for n in nodes}]
        if _selected(selected, "edges.node.employee"):
            employee_ids = {n.employee_id for n in nodes if n.employee_id is not None}
            loads += [loaders.employee(info.context, employee_id) for employee_id in employee_ids]
        await loaders.prefetch(loads)
        return page

    @strawberry.field
    async def activity(self, info: GraphQLInfo, id: uuid.UUID) -> Activity:
        return Activity.of(await info.context.run(lambda uow: activities.RECORD.get(uow, id)))

    @strawberry.field
    async def activities(
        self,
        info: GraphQLInfo,
        filter: ActivityFilter | None = None,
        first: int = DEFAULT_PAGE_SIZE,
        after: str | None = None,
    ) -> Connection[Activity]:
        found = RecordListing(activities.RECORD, ActivityFilterModel)
        return await found.page(info, filter, first, after, Activity.of)

    @strawberry.field(description="The caller's department, or every one for a tenant-wide key.")
    async def departments(self, info: GraphQLInfo) -> list[Department]:
        found = await info.context.run(pipeline.departments_in_scope)
        return [Department.of(department) for department in found]

    @strawberry.field
    async def employees(
        self,
        info: GraphQLInfo,
        department_id: uuid.UUID | None = None,
        first: int = DEFAULT_PAGE_SIZE,
        after: str | None = None,
    ) -> Connection[Employee]:
        scope = await info.context.scope_in(department_id)
        page = await info.context.run(lambda uow: pipeline.employees_page(uow, first, after), scope)

        async def count() -> int:
            return await info.context.run(pipeline.employee_count, scope)

        return connection(page, Employee.of, count)

    @strawberry.field(description="A department's steps in order (a tenant-wide key names one).")
    async def steps(self, info: GraphQLInfo, department_id: uuid.UUID | None = None) -> list[Step]:
        scope = await info.context.scope_in(department_id)
        return [Step.of(step) for step in await info.context.run(pipeline.steps_in_order, scope)]

    @strawberry.field(
        description="A department's board: each step with its deals' count and volume."
    )
    async def pipeline(self, info: GraphQLInfo, department_id: uuid.UUID | None = None) -> Pipeline:
        scope = await info.context.scope_in(department_id)

        def board(uow: Any) -> tuple[Any, Any]:
            return pipeline.own_department(uow), pipeline.board(uow)

        department, totals = await info.context.run(board, scope)
        return Pipeline(
            department=Department.of(department), steps=[PipelineStep.of(step) for step in totals]
        )

    @strawberry.field
    async def pipeline_summary(
        self,
        info: GraphQLInfo,
        created_from: datetime,
        created_to: datetime,
        department_id: uuid.UUID | None = None,
    ) -> PipelineSummary:
        scope = await info.context.scope_in(department_id)
        period = validated(SummaryRange, {"created_from": created_from, "created_to": created_to})
        found = await info.context.run(lambda uow: pipeline.summary(uow, period), scope)
        return PipelineSummary.of(found)

    @strawberry.field
    async def webhook_endpoint(self, info: GraphQLInfo, id: uuid.UUID) -> WebhookEndpoint:
        return WebhookEndpoint.of(await info.context.run(lambda uow: webhooks.get(uow, id)))

    @strawberry.field(description="Webhook endpoints, oldest first (a department's, if named).")
    async def webhook_endpoints(
        self,
        info: GraphQLInfo,
        department_id: uuid.UUID | None = None,
        first: int = DEFAULT_PAGE_SIZE,
        after: str | None = None,
    ) -> Connection[WebhookEndpoint]:
        scope = await info.context.scope_in(department_id)
        page = await info.context.run(lambda uow: webhooks.list_page(uow, first, after), scope)

        async def count() -> int:
            return await info.context.run(webhooks.count, scope)

        return connection(page, WebhookEndpoint.of, count)

    @strawberry.field(
        description="A webhook endpoint's delivery log, newest first, each delivery with its"
        " attempts."
    )
    async def webhook_deliveries(
        self,
        info: GraphQLInfo,
        endpoint_id: uuid.UUID,
        first: int = DEFAULT_PAGE_SIZE,
        after: str | None = None,
    ) -> Connection[WebhookDelivery]:
        page = await info.context.run(
            lambda uow: deliveries.list_page(uow, endpoint_id, first, after)
        )

        async def count() -> int:
            return await info.context.run(lambda uow: deliveries.count(uow, endpoint_id))

        return connection(page, WebhookDelivery.of, count)


CUSTOMER_MUTATIONS = record_mutations(
    GraphQLRecord(
        noun="customer",
        plural="customers",
        service=customers.RECORD,
        create=customers.create,
        graphql_type=Customer,
        answers=CUSTOMER_ANSWERS,
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
DEAL_MUTATIONS = record_mutations(
    GraphQLRecord(
        noun="deal",
        plural="deals",
        service=deals.RECORD,
        create=deals.create,
        graphql_type=Deal,
        answers=DEAL_ANSWERS,
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
ACTIVITY_MUTATIONS = record_mutations(
    GraphQLRecord(
        noun="activity",
        plural="activities",
        service=activities.RECORD,
        create=activities.create,
        graphql_type=Activity,
        answers=ACTIVITY_ANSWERS,
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
class Mutation:
    create_customer = CUSTOMER_MUTATIONS.create
    update_customer = CUSTOMER_MUTATIONS.update
    delete_customer = CUSTOMER_MUTATIONS.delete
    upsert_customer = CUSTOMER_MUTATIONS.upsert
    batch_customers = CUSTOMER_MUTATIONS.batch

    create_deal = DEAL_MUTATIONS.create
    upsert_deal = DEAL_MUTATIONS.upsert
    batch_deals = DEAL_MUTATIONS.batch
    update_deal = DEAL_MUTATIONS.update

    @strawberry.mutation
    async def move_deal(self, info: GraphQLInfo, id: uuid.UUID, step_id: uuid.UUID) -> Deal:
        patch = validated(DealPatch, {"step_id": step_id})
        return Deal.of(await info.context.write(lambda uow: deals.RECORD.update(uow, id, patch)))

    @strawberry.mutation(description="employeeId null unassigns the deal.")
    async def assign_deal(
        self, info: GraphQLInfo, id: uuid.UUID, employee_id: uuid.UUID | None
    ) -> Deal:
        patch = validated(DealPatch, {"employee_id": employee_id})
        return Deal.of(await info.context.write(lambda uow: deals.RECORD.update(uow, id, patch)))

    delete_deal = DEAL_MUTATIONS.delete

    @strawberry.mutation
    async def link_customer(
        self, info: GraphQLInfo, deal_id: uuid.UUID, customer_id: uuid.UUID
    ) -> Deal:
        link = validated(CustomerLink, {"customer_id": customer_id})
        return Deal.of(
            await info.context.write(lambda uow: deals.link_customer(uow, deal_id, link))
        )

    @strawberry.mutation
    async def unlink_customer(
        self, info: GraphQLInfo, deal_id: uuid.UUID, customer_id: uuid.UUID
    ) -> Deal:
        def unlink(uow: Any) -> Any:
            deals.unlink_customer(uow, deal_id, customer_id)
            return deals.RECORD.get(uow, deal_id)

        return Deal.of(await info.context.write(unlink))

    create_activity = ACTIVITY_MUTATIONS.create
    upsert_activity = ACTIVITY_MUTATIONS.upsert
    batch_activities = ACTIVITY_MUTATIONS.batch
    update_activity = ACTIVITY_MUTATIONS.update
    delete_activity = ACTIVITY_MUTATIONS.delete

    @strawberry.mutation(description="The answer carries the signing secret, shown this once.")
    async def create_webhook_endpoint(
        self, info: GraphQLInfo, input: WebhookEndpointInput, department_id: uuid.UUID | None = None
    ) -> IssuedWebhookSecret:
        scope = await info.context.scope_in(department_id)
        fields = validated(WebhookEndpointFields, fields_of(input))
        checked = await webhooks.checked(fields, info.context.webhook_addresses)
        issued = await info.context.write(lambda uow: webhooks.create(uow, checked), scope)
        return IssuedWebhookSecret.of(issued)

    @strawberry.mutation
    async def update_webhook_endpoint(
        self, info: GraphQLInfo, id: uuid.UUID, changes: WebhookEndpointChanges
    ) -> WebhookEndpoint:
        patch = validated(WebhookEndpointPatch, fields_of(changes))
        checked = await webhooks.checked(patch, info.context.webhook_addresses)
        return WebhookEndpoint.of(
            await info.context.write(lambda uow: webhooks.update(uow, id, checked))
        )

    @strawberry.mutation
    async def delete_webhook_endpoint(self, info: GraphQLInfo, id: uuid.UUID) -> uuid.UUID:
        await info.context.write(lambda uow: webhooks.delete(uow, id))
        return id

    @strawberry.mutation(
        description="A new signing secret, shown this once; the one it replaces still signs for"
        " 24 hours."
    )
    async def rotate_webhook_secret(self, info: GraphQLInfo, id: uuid.UUID) -> IssuedWebhookSecret:
        return IssuedWebhookSecret.of(
            await info.context.write(lambda uow: webhooks.rotate_secret(uow, id))
        )

    @strawberry.mutation(
        description="Makes the delivery pending and due now, whatever its state: a worker sends"
        " it again, with the same webhook-id, and its three days of retries start again."
    )
    async def redeliver_webhook_delivery(
        self, info: GraphQLInfo, endpoint_id: uuid.UUID, delivery_id: uuid.UUID
    ) -> WebhookDelivery:
        return WebhookDelivery.of(
            await info.context.write(
                lambda uow: deliveries.redeliver(uow, endpoint_id, delivery_id)
            )
        )

    @strawberry.mutation(
        description="Makes a delivery of a new webhook.test event to this endpoint alone,"
        " whatever it subscribes to; each call sends another."
    )
    async def send_test_webhook(self, info: GraphQLInfo, endpoint_id: uuid.UUID) -> WebhookDelivery:
        return WebhookDelivery.of(
            await info.context.write(lambda uow: deliveries.send_test(uow, endpoint_id))
        )


class DashboardSchema(strawberry.Schema):
    # Its documents' cache (``build_schema``), which the direct path reads too.
    documents: DocumentCache

    async def execute(
        self,
        query: str | None,
        variable_values: dict[str, Any] | None = None,
        context_value: Any | None = None,
        root_value: Any | None = None,
        operation_name: str | None = None,
        allowed_operation_types: Iterable[OperationType] | None = None,
        operation_extensions: dict[str, Any] | None = None,
    ) -> ExecutionResult:
        """A subscription streams over the live transports only (``graphql_api.live``, through
        ``subscribe``): run here as a query, its field would answer null, so a plain request
        refuses it as an operation type it may not run (400)."""
        allowed = set(allowed_operation_types or (OperationType.QUERY, OperationType.MUTATION))
        return await super().execute(
            query,
            variable_values,
            context_value,
            root_value,
            operation_name,
            allowed - {OperationType.SUBSCRIPTION},
            operation_extensions,
        )

    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        """Logged where they are mapped (graphql_api.errors), unexpected ones only."""


# (operation name or None, operation type or "unknown", each error's extensions.code).
OperationObserver = Callable[[str | None, str, list[str]], None]


class _Reported(SchemaExtension):
    """Tells ``observe`` of each operation once its errors carry their codes (it is listed
    before DomainErrors, so it finishes after it)."""

    def __init__(self, observe: OperationObserver) -> None:
        self._observe = observe

    def on_operation(self) -> Iterator[None]:
        yield
        context = self.execution_context
        name = context.operation_name
        document = context.graphql_document
        operation = get_operation_ast(document, name) if document is not None else None
        if name is None and operation is not None and operation.name is not None:
            name = operation.name.value
        kind = operation.operation.value if operation is not None else "unknown"
        result = context.result
        errors = result.errors if result is not None and result.errors else []
        self._observe(name, kind, [str((e.extensions or {}).get("code", "")) for e in errors])


def build_schema(
    settings: Settings,
    observe: OperationObserver | None = None,
    observe_root_field: RootFieldObserver | None = None,
) -> DashboardSchema:
    # One cache per schema, shared by its operations: its entries hold this schema's verdicts.
    # Validation rules belong in Guards, not in AddValidationRules extensions: the guard gives
    # them to Strawberry's validation, or finds the verdict in the cache.
    documents = DocumentCache(Guards.of(settings), settings.graphql_document_cache_size)
    # Factories, not instances: each operation gets extensions of its own (the guard keeps the
    # operation's estimate).
    extensions: list[type[SchemaExtension] | Callable[[], SchemaExtension]] = [
        DomainErrors,
        lambda: DocumentGuard(documents),
    ]
    if observe is not None:
        extensions.insert(0, lambda: _Reported(observe))
    definitions = FieldDefinitions()  # Strawberry's definitions of its fields, once it is built
    compiles = settings.graphql_compiled_reads
    execution = CompilingExecutionContext.for_schema(definitions, compiles, observe_root_field)
    schema = DashboardSchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        extensions=extensions,
        execution_context_class=execution,
        config=StrawberryConfig(scalar_map={BigInt: BIG_INT_SCALAR}),
    )
    schema.documents, definitions.schema = documents, schema
    return schema
