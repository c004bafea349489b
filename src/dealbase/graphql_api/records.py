"""The lists and mutations every synced record has (customers, deals, activities), made from
its descriptor: its list as a connection (``RecordListing``), and create<Name>, update<Name>,
delete<Name>, upsert<Name> and batch<Plural> (``record_mutations``). Each is written once
here; the schema's Mutation takes them in the order its SDL shows, beside a record's own
mutations (a deal's moves and links).

Strawberry reads a resolver's arguments and answer from its annotations: a resolver made here
is given them as the record's types (its inputs, its GraphQL type, its answers).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import strawberry
from pydantic import BaseModel

from dealbase.db.units import UnitOfWork
from dealbase.errors import BatchRejected
from dealbase.graphql_api.inputs import fields_of, listed
from dealbase.graphql_api.sync import SyncAnswers, rejection_named, results_named
from dealbase.graphql_api.types import Connection, GraphQLInfo, connection
from dealbase.platform.batches.models import Batch, Result
from dealbase.platform.record_writes import Owned
from dealbase.platform.records import SyncedRecord
from dealbase.platform.validation import validated

Item = TypeVar("Item", bound=Owned)
Filters = TypeVar("Filters", bound=BaseModel)

_UPSERT = (
    "Creates the {record} with this external id, or changes the fields input gives of the one"
    " that has it (absent fields stay as they are, null clears). A change that changes nothing"
    " writes nothing: UNCHANGED, at the same version."
)
_BATCH = (
    "Up to 1,000 creates and upserts of {records}, in one transaction. Each operation stands"
    " alone: one that fails has its error in its result, and the others are written. atomic:"
    " all or nothing, any failure writes nothing and is the error batch_rejected, its"
    " extensions.failures listing each failed operation. Counts as ceil(n / 100) requests"
    " against the rate limits."
)


@dataclass(frozen=True)
class GraphQLRecord:
    """A synced record as its mutations take and answer it."""

    noun: str  # "customer": descriptions
    plural: str  # "customers"
    service: SyncedRecord[Any, Any, Any]  # its descriptor: update, delete, upsert, batch
    create: Callable[[UnitOfWork, Any], Any]  # its service's create
    graphql_type: type  # Customer: what create and update answer
    answers: SyncAnswers[Any]  # what upsert and batch answer
    create_input: type  # CustomerInput
    create_fields: type[BaseModel]  # CustomerFields: what the create input is validated as
    changes_input: type  # CustomerChanges
    patch: type[BaseModel]  # CustomerPatch
    upsert_input: type  # CustomerInput
    upsert_fields: type[BaseModel]  # CustomerFields
    operation_input: type  # CustomerOperationInput
    batch_of: Callable[[Sequence[Any]], Batch]  # the operations as the platform's Batch
    # The create input's fields as the platform names them (a deal's customers converted).
    create_fields_of: Callable[[Any], dict[str, Any]] = fields_of
    # Operations give their data in the field their op names (batchDeals: create, upsert),
    # which their errors then name, in place of data.
    data_named_by_op: bool = False
    batch_description: str = ""  # said after the batch's own description


@dataclass(frozen=True)
class RecordListing(Generic[Item, Filters]):
    """A synced record's list as a connection: the filter input narrowed to its department (when
    it names one) and validated as the platform's filter model, the page, and a lazy count,
    both narrowed by the filter's custom filters."""

    record: SyncedRecord[Item, Any, Filters]
    filter_model: type[Filters]

    async def page(
        self,
        info: GraphQLInfo,
        filter_input: object | None,
        first: int,
        after: str | None,
        order_by: dict[str, Any] | None = None,
    ) -> Connection[Item]:
        scope, filters, custom = await listed(
            info.context, self.filter_model, filter_input, order_by or {}
        )
        page = await info.context.run(
            lambda uow: self.record.list_page(uow, filters, first, after, custom), scope
        )

        async def count() -> int:
            return await info.context.run(
                lambda uow: self.record.count(uow, filters, custom), scope
            )

        return connection(page, count)


@dataclass(frozen=True)
class RecordMutations:
    """A record's mutation fields, for the schema's Mutation type."""

    create: Any
    update: Any
    delete: Any
    upsert: Any
    batch: Any


def record_mutations(record: GraphQLRecord) -> RecordMutations:
    create, update, delete = _edits(record)
    upsert, batch = _syncs(record)
    return RecordMutations(create=create, update=update, delete=delete, upsert=upsert, batch=batch)


def _edits(record: GraphQLRecord) -> tuple[Any, Any, Any]:
    """create<Name>, update<Name> and delete<Name>."""
    service = record.service

    async def create(info: GraphQLInfo, input: Any, department_id: uuid.UUID | None = None) -> Any:
        scope = await info.context.scope_in(department_id)
        fields = validated(record.create_fields, record.create_fields_of(input))
        return await info.context.write(lambda uow: record.create(uow, fields), scope)

    async def update(info: GraphQLInfo, id: uuid.UUID, changes: Any) -> Any:
        patch = validated(record.patch, fields_of(changes))
        return await info.context.write(lambda uow: service.update(uow, id, patch))

    async def delete(info: GraphQLInfo, id: uuid.UUID) -> uuid.UUID:
        await info.context.write(lambda uow: service.delete(uow, id))
        return id

    create.__annotations__ = {
        "info": GraphQLInfo,
        "input": record.create_input,
        "department_id": uuid.UUID | None,
        "return": record.graphql_type,
    }
    update.__annotations__ = {
        "info": GraphQLInfo,
        "id": uuid.UUID,
        "changes": record.changes_input,
        "return": record.graphql_type,
    }
    delete.__annotations__ = {"info": GraphQLInfo, "id": uuid.UUID, "return": uuid.UUID}
    return (
        strawberry.mutation(resolver=create),
        strawberry.mutation(resolver=update),
        strawberry.mutation(resolver=delete),
    )


def _syncs(record: GraphQLRecord) -> tuple[Any, Any]:
    """upsert<Name> and batch<Plural>."""
    service = record.service

    async def upsert(
        info: GraphQLInfo, external_id: str, input: Any, department_id: uuid.UUID | None = None
    ) -> Any:
        scope = await info.context.department_scope(department_id)
        fields = validated(record.upsert_fields, fields_of(input))
        result: Result[Any] = await info.context.write(
            lambda uow: service.upsert(uow, external_id, fields), scope
        )
        return record.answers.upsert(result)

    async def batch(
        info: GraphQLInfo,
        operations: list[Any],
        atomic: bool = False,
        department_id: uuid.UUID | None = None,
    ) -> Any:
        scope = await info.context.department_scope(department_id)
        platform_batch = record.batch_of(operations)
        await info.context.charge_batch(scope, len(platform_batch.operations))
        names = [
            operation.op.value if record.data_named_by_op else "data" for operation in operations
        ]
        try:
            results: list[Result[Any]] = await info.context.write(
                lambda uow: service.batch(uow, platform_batch, atomic=atomic), scope
            )
        except BatchRejected as rejected:
            raise rejection_named(rejected, names) from None
        return record.answers.batch(results_named(results, names))

    return _sync_fields(record, upsert, batch)


def _sync_fields(
    record: GraphQLRecord, upsert: Callable[..., Any], batch: Callable[..., Any]
) -> tuple[Any, Any]:
    """The upsert and batch resolvers as mutation fields, typed by the record's inputs and
    answers."""
    upsert.__annotations__ = {
        "info": GraphQLInfo,
        "external_id": str,
        "input": record.upsert_input,
        "department_id": uuid.UUID | None,
        "return": record.answers.upsert_type,
    }
    batch.__annotations__ = {
        "info": GraphQLInfo,
        "operations": list[record.operation_input],  # type: ignore[name-defined]
        "atomic": bool,
        "department_id": uuid.UUID | None,
        "return": record.answers.batch_type,
    }
    return (
        strawberry.mutation(resolver=upsert, description=_UPSERT.format(record=record.noun)),
        strawberry.mutation(
            resolver=batch,
            description=_BATCH.format(records=record.plural) + record.batch_description,
        ),
    )
