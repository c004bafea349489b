"""The dashboards' schema: each feature's queries and mutations (graphql_api.customers, deals,
activities, pipeline, webhooks), each a call of the platform service REST calls, in a unit of
work; the subscriptions; the extensions and the executor."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import strawberry
from graphql import GraphQLError, get_operation_ast
from strawberry.extensions import SchemaExtension
from strawberry.schema.config import StrawberryConfig
from strawberry.tools import merge_types
from strawberry.types import ExecutionContext, ExecutionResult
from strawberry.types.graphql import OperationType

from dealbase.config import Settings
from dealbase.graphql_api.activities import ActivityMutation, ActivityQuery
from dealbase.graphql_api.custom_fields import CustomFieldQuery
from dealbase.graphql_api.customers import CustomerMutation, CustomerQuery
from dealbase.graphql_api.deals import DealMutation, DealQuery
from dealbase.graphql_api.documents import DocumentCache, DocumentGuard
from dealbase.graphql_api.errors import DomainErrors
from dealbase.graphql_api.execution import (
    CompilingExecutionContext,
    FieldDefinitions,
    RootFieldObserver,
)
from dealbase.graphql_api.guards import Guards
from dealbase.graphql_api.pipeline import PipelineQuery
from dealbase.graphql_api.subscriptions import Subscription
from dealbase.graphql_api.types import BIG_INT_SCALAR, BigInt
from dealbase.graphql_api.webhooks import WebhookMutation, WebhookQuery

# Each feature's fields, in the order the SDL shows them.
Query = merge_types(
    "Query",
    (CustomerQuery, DealQuery, ActivityQuery, CustomFieldQuery, PipelineQuery, WebhookQuery),
)
Mutation = merge_types(
    "Mutation", (CustomerMutation, DealMutation, ActivityMutation, WebhookMutation)
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
