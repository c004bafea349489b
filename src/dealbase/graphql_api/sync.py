"""What upserts and batches answer: each record with what became of it, or the error of each
operation that failed, in the shape the rest of the schema gives errors (``graphql_api.errors``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any, TypeVar

import strawberry

from dealbase.errors import BatchRejected, DomainError, FieldError, Invalid
from dealbase.graphql_api.errors import field_errors_of, message_of
from dealbase.graphql_api.types import Activity, Customer, Deal
from dealbase.platform.activities.models import Activity as ActivityModel
from dealbase.platform.batches.models import Result
from dealbase.platform.customers.models import Customer as CustomerModel
from dealbase.platform.deals.models import Deal as DealModel


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


Item = TypeVar("Item")
Model = TypeVar("Model")


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


def _items(
    item: Callable[..., Item],
    field: str,
    shown: Callable[[Model], Any],
    results: Sequence[Result[Model]],
) -> list[Item]:
    """A batch's items, each with its record under ``field`` as ``shown`` makes it (null when
    its operation failed)."""
    return [
        item(
            **_item(index, result),
            **{field: None if result.record is None else shown(result.record)},
        )
        for index, result in enumerate(results)
    ]


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
            results=_items(CustomerBatchItem, "customer", Customer.of, results),
            summary=BatchSummary.of(results),
        )


@strawberry.type(description="What upsertDeal did, and the deal as it now is.")
class DealUpsert:
    deal: Deal
    outcome: WriteOutcome

    @classmethod
    def of(cls, result: Result[DealModel]) -> DealUpsert:
        return cls(deal=Deal.of(_record(result)), outcome=WriteOutcome(result.outcome))


@strawberry.type(description="What became of one operation of batchDeals.")
class DealBatchItem:
    index: int = strawberry.field(description=_INDEX)
    outcome: OperationOutcome
    deal: Deal | None = strawberry.field(
        description="The deal as it now is; null when the operation failed."
    )
    error: OperationError | None = strawberry.field(description=_ERROR)


@strawberry.type(description="What batchDeals did.")
class DealBatchResult:
    results: list[DealBatchItem] = strawberry.field(description=_RESULTS)
    summary: BatchSummary

    @classmethod
    def of(cls, results: Sequence[Result[DealModel]]) -> DealBatchResult:
        return cls(
            results=_items(DealBatchItem, "deal", Deal.of, results),
            summary=BatchSummary.of(results),
        )


@strawberry.type(description="What upsertActivity did, and the activity as it now is.")
class ActivityUpsert:
    activity: Activity
    outcome: WriteOutcome

    @classmethod
    def of(cls, result: Result[ActivityModel]) -> ActivityUpsert:
        return cls(activity=Activity.of(_record(result)), outcome=WriteOutcome(result.outcome))


@strawberry.type(description="What became of one operation of batchActivities.")
class ActivityBatchItem:
    index: int = strawberry.field(description=_INDEX)
    outcome: OperationOutcome
    activity: Activity | None = strawberry.field(
        description="The activity as it now is; null when the operation failed."
    )
    error: OperationError | None = strawberry.field(description=_ERROR)


@strawberry.type(description="What batchActivities did.")
class ActivityBatchResult:
    results: list[ActivityBatchItem] = strawberry.field(description=_RESULTS)
    summary: BatchSummary

    @classmethod
    def of(cls, results: Sequence[Result[ActivityModel]]) -> ActivityBatchResult:
        return cls(
            results=_items(ActivityBatchItem, "activity", Activity.of, results),
            summary=BatchSummary.of(results),
        )


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
