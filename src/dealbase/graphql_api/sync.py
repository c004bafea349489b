"""What upserts and batches answer: each record with what became of it, or the error of each
operation that failed, in the shape the rest of the schema gives errors (``graphql_api.errors``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

import strawberry

from dealbase.errors import BatchRejected, DomainError, FieldError, Invalid
from dealbase.graphql_api.errors import field_errors_of, message_of
from dealbase.platform.batches.models import Result


@strawberry.enum(description="What an upsert did.")
class WriteOutcome(Enum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"


@strawberry.enum(description="What became of one operation of a batch.")
class OperationOutcome(Enum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    FAILED = "failed"


@strawberry.type(name="FieldError", description="An input field that broke a rule.")
class FieldErrorType:
    field: str = strawberry.field(
        description="As GraphQL names it, from the mutation's arguments:"
        " operations[2].data.lastName."
    )
    code: str
    message: str


@strawberry.type(
    description="Why an operation of a batch failed: what the mutation would have answered as"
    " its error, had the operation been a mutation of its own."
)
class OperationError:
    code: str = strawberry.field(description="As extensions.code: not_found, validation_failed...")
    message: str
    errors: list[FieldErrorType] = strawberry.field(
        description="The offending fields of a validation_failed error, as extensions.errors;"
        " empty for other errors."
    )

    @classmethod
    def of(cls, error: DomainError) -> OperationError:
        return cls(
            code=error.code,
            message=message_of(error),
            errors=[FieldErrorType(**item) for item in field_errors_of(error)],
        )


@strawberry.type(description="How many operations of a batch had each outcome.")
class BatchSummary:
    created: int
    updated: int
    unchanged: int
    failed: int

    @classmethod
    def of(cls, results: Sequence[Result[Any]]) -> BatchSummary:
        counts = Counter(result.outcome for result in results)
        return cls(
            created=counts["created"],
            updated=counts["updated"],
            unchanged=counts["unchanged"],
            failed=counts["failed"],
        )


Model = TypeVar("Model")

_INDEX = "The operation's place in operations, from 0."
_ERROR = "Why the operation failed; null when it did not."
_RESULTS = "One per operation, in the order of operations."


@dataclass(frozen=True)
class SyncAnswers(Generic[Model]):
    """What a synced record's upsert and batch answer, as GraphQL types made from its names
    (``sync_answers``): ``<Name>Upsert`` (the record under its field, and the outcome),
    ``<Name>BatchItem`` and ``<Name>BatchResult``."""

    field: str  # "customer": the field that holds the record
    upsert_type: type
    item_type: type
    batch_type: type

    def upsert(self, result: Result[Model]) -> Any:
        assert result.record is not None, "a successful upsert has its record"
        return self.upsert_type(
            **{self.field: result.record, "outcome": WriteOutcome(result.outcome)}
        )

    def batch(self, results: Sequence[Result[Model]]) -> Any:
        items = [
            self.item_type(
                index=index,
                outcome=OperationOutcome(result.outcome),
                error=None if result.error is None else OperationError.of(result.error),
                **{self.field: result.record},
            )
            for index, result in enumerate(results)
        ]
        return self.batch_type(results=items, summary=BatchSummary.of(results))


def sync_answers(name: str, plural: str, graphql_type: type) -> SyncAnswers[Any]:
    """The answers of the mutations upsert<Name> and batch<Plural>, the record (its read model)
    shown as ``graphql_type`` under the field named like the type (``customer``)."""
    field = name[0].lower() + name[1:]
    upsert = strawberry.type(
        type(
            f"{name}Upsert", (), {"__annotations__": {field: graphql_type, "outcome": WriteOutcome}}
        ),
        description=f"What upsert{name} did, and the {field} as it now is.",
    )
    item = strawberry.type(
        type(
            f"{name}BatchItem",
            (),
            {
                "__annotations__": {
                    "index": int,
                    "outcome": OperationOutcome,
                    field: graphql_type | None,
                    "error": OperationError | None,
                },
                "index": strawberry.field(description=_INDEX),
                field: strawberry.field(
                    description=f"The {field} as it now is; null when the operation failed."
                ),
                "error": strawberry.field(description=_ERROR),
            },
        ),
        description=f"What became of one operation of batch{plural}.",
    )
    batch = strawberry.type(
        type(
            f"{name}BatchResult",
            (),
            {
                "__annotations__": {"results": list[item], "summary": BatchSummary},  # type: ignore[valid-type]
                "results": strawberry.field(description=_RESULTS),
            },
        ),
        description=f"What batch{plural} did.",
    )
    return SyncAnswers(field, upsert, item, batch)


# A batch whose operations carry their data in a field named after their op (batchDeals:
# create, upsert) names the fields of its errors so: operations[2].upsert.stepId, where the
# platform (and REST) says operations[2].data.step_id.


def _named(error: DomainError, index: int, name: str) -> DomainError:
    if not isinstance(error, Invalid):
        return error
    data = f"operations[{index}].data"

    def renamed(field: str) -> str:
        if field == data or field.startswith((data + ".", data + "[")):
            return f"operations[{index}].{name}{field[len(data) :]}"
        return field

    return Invalid(
        error.detail,
        [FieldError(renamed(item.field), item.code, item.message) for item in error.errors],
    )


Record = TypeVar("Record")


def results_named(results: Sequence[Result[Record]], names: Sequence[str]) -> list[Result[Record]]:
    """``results`` with each operation's data named ``names[index]``."""
    return [
        result if result.error is None else Result.failed(_named(result.error, index, names[index]))
        for index, result in enumerate(results)
    ]


def rejection_named(rejected: BatchRejected, names: Sequence[str]) -> BatchRejected:
    """``rejected`` with each operation's data named ``names[index]``."""
    return BatchRejected(
        rejected.detail,
        [(index, _named(error, index, names[index])) for index, error in rejected.failures],
    )
