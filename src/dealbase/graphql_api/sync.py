"""What upserts and batches answer: each record with what became of it, or the error of each
operation that failed, in the shape the rest of the schema gives errors (``graphql_api.errors``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from enum import Enum
from typing import Any

import strawberry

from dealbase.errors import DomainError
from dealbase.graphql_api.errors import field_errors_of, message_of
from dealbase.graphql_api.types import Customer
from dealbase.platform.batches.models import Result
from dealbase.platform.customers.models import Customer as CustomerModel


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


@strawberry.type(description="An input field that broke a rule.")
class FieldError:
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
    errors: list[FieldError] = strawberry.field(
        description="The offending fields of a validation_failed error, as extensions.errors;"
        " empty for other errors."
    )

    @classmethod
    def of(cls, error: DomainError) -> OperationError:
        return cls(
            code=error.code,
            message=message_of(error),
            errors=[FieldError(**item) for item in field_errors_of(error)],
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


def _record(result: Result[Any]) -> Any:
    assert result.record is not None, "a successful upsert has its record"
    return result.record


def _item(index: int, result: Result[Any]) -> dict[str, Any]:
    """An item's fields but its record."""
    return {
        "index": index,
        "outcome": OperationOutcome(result.outcome),
        "error": None if result.error is None else OperationError.of(result.error),
    }


_INDEX = "The operation's place in operations, from 0."
_ERROR = "Why the operation failed; null when it did not."
_RESULTS = "One per operation, in the order of operations."


@strawberry.type(description="What upsertCustomer did, and the customer as it now is.")
class CustomerUpsert:
    customer: Customer
    outcome: WriteOutcome

    @classmethod
    def of(cls, result: Result[CustomerModel]) -> CustomerUpsert:
        return cls(customer=Customer.of(_record(result)), outcome=WriteOutcome(result.outcome))


@strawberry.type(description="What became of one operation of batchCustomers.")
class CustomerBatchItem:
    index: int = strawberry.field(description=_INDEX)
    outcome: OperationOutcome
    customer: Customer | None = strawberry.field(
        description="The customer as it now is; null when the operation failed."
    )
    error: OperationError | None = strawberry.field(description=_ERROR)


@strawberry.type(description="What batchCustomers did.")
class CustomerBatchResult:
    results: list[CustomerBatchItem] = strawberry.field(description=_RESULTS)
    summary: BatchSummary

    @classmethod
    def of(cls, results: Sequence[Result[CustomerModel]]) -> CustomerBatchResult:
        return cls(
            results=[
                CustomerBatchItem(
                    **_item(index, result),
                    customer=None if result.record is None else Customer.of(result.record),
                )
                for index, result in enumerate(results)
            ],
            summary=BatchSummary.of(results),
        )
