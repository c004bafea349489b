"""GraphQL input types. The inputs of customers, deals and activities are made from the
platform's input models (``input_of``), and each becomes that model again through ``fields_of``,
so GraphQL and REST take the same fields and validate them by the same rules."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from types import GenericAlias, UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import strawberry
from pydantic import AwareDatetime, BaseModel
from strawberry.scalars import JSON

from dealbase.errors import FieldError, Invalid
from dealbase.graphql_api.context import GraphQLContext
from dealbase.graphql_api.types import ActivityType, BigInt
from dealbase.platform.activities.models import ActivityFields
from dealbase.platform.activities.models import ActivityType as ActivityTypeLiteral
from dealbase.platform.batches.models import Batch
from dealbase.platform.custom_fields.filters import named_as_parameters
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.deals.models import DealCreate, DealPatch, DealUpsert
from dealbase.platform.shapes import CUSTOM_FIELDS
from dealbase.platform.validation import validated
from dealbase.platform.webhooks.models import EventChoice, WebhookEndpointFields
from dealbase.tenancy.scope import Scope

Filters = TypeVar("Filters", bound=BaseModel)


def fields_of(value: object) -> dict[str, Any]:
    """The fields the client gave, as the platform names them: absent (UNSET) fields are left
    out, so a PATCH-like input tells 'leave as it is' from 'clear' (null)."""
    found = {}
    for item in dataclasses.fields(value):  # type: ignore[arg-type]
        given = getattr(value, item.name)
        if given is strawberry.UNSET:
            continue
        found[item.name] = given.value if isinstance(given, Enum) else given
    return found


@dataclass(frozen=True)
class FilterFields:
    """A list's filter input as the platform takes it: the department it names (None: the
    caller's), its other fields by the platform's names, and its filters on the tenant's
    custom fields by their parameters' names (``custom_fields.filters``)."""

    department_id: uuid.UUID | None
    fields: dict[str, Any]
    custom: dict[str, object]


def filter_fields(filter_input: object | None) -> FilterFields:
    """A list's filter input as the platform takes it (``FilterFields``): the same for the
    resolvers and the compiled reads. A ``customFields`` that is no object is refused."""
    given = fields_of(filter_input) if filter_input is not None else {}
    custom = given.pop(CUSTOM_FIELDS, None)
    if custom is not None and not isinstance(custom, dict):
        raise Invalid.of(
            CUSTOM_FIELDS,
            "wrong_type",
            f"{CUSTOM_FIELDS} is an object of filters on the tenant's custom fields by name.",
        )
    return FilterFields(given.pop("department_id", None), given, named_as_parameters(custom or {}))


async def listed(
    context: GraphQLContext,
    model: type[Filters],
    filter_input: object | None,
    extra: Mapping[str, Any],
) -> tuple[Scope, Filters, dict[str, object]]:
    """A list's filter input narrowed to its department (when it names one) and, with ``extra``
    (an order), validated as the platform's filter model, and its custom filters, which the
    platform judges by the tenant's fields: the same for the resolvers and the compiled
    reads."""
    given = filter_fields(filter_input)
    scope = await context.scope_in(given.department_id)
    return scope, validated(model, {**given.fields, **extra}), given.custom


# The GraphQL type of each Literal the platform's input models use: an enum, or String where
# the values are not GraphQL names (event types have dots; the platform model judges them).
_LITERALS: dict[Any, type] = {ActivityTypeLiteral: ActivityType, EventChoice: str}


def _graphql_type(annotation: Any, nested: Mapping[type[BaseModel], type]) -> Any:
    """The GraphQL type of a platform field: its shape only. Lengths, patterns and ranges stay
    on the platform model, which every mutation applies to ``fields_of`` its input, so GraphQL
    and REST refuse the same values with the same errors."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _graphql_type(get_args(annotation)[0], nested)
    if origin in (Union, UnionType):
        return Union[tuple(_graphql_type(member, nested) for member in get_args(annotation))]  # noqa: UP007
    if origin is list:
        (item,) = get_args(annotation)
        return GenericAlias(list, (_graphql_type(item, nested),))
    if origin is Literal:
        return _LITERALS[annotation]
    if annotation is int:  # the platform's integers are 64-bit; GraphQL's Int has 32
        return BigInt
    if annotation is AwareDatetime:
        return datetime
    if origin is dict:  # custom fields' values, judged by the tenant's definitions
        return JSON
    return nested.get(annotation, annotation)


Input = TypeVar("Input")


def input_of(
    model: type[BaseModel],
    *,
    every_field_optional: bool = False,
    nested: Mapping[type[BaseModel], type] | None = None,
    description: str | None = None,
) -> Callable[[type[Input]], type[Input]]:
    """The decorated class as the GraphQL input object of ``model``, a field for each of its
    fields, so a field is declared once, on the platform model. A field the model requires is
    non-null, unless ``every_field_optional`` (an input that changes an object); any other is
    nullable and UNSET when absent, which ``fields_of`` leaves out. Required fields come first,
    as the schema has always listed them; ``nested`` names the input of a nested platform model."""

    def derive(declared: type[Input]) -> type[Input]:
        fields = model.model_fields
        annotations: dict[str, Any] = {}
        for name in sorted(fields, key=lambda name: not fields[name].is_required()):
            graphql_type = _graphql_type(fields[name].annotation, nested or {})
            if fields[name].is_required() and not every_field_optional:
                annotations[name] = graphql_type
            else:
                annotations[name] = graphql_type | None
                setattr(declared, name, strawberry.UNSET)
        declared.__annotations__ = annotations
        return strawberry.input(declared, description=description)

    return derive


@input_of(CustomerFields)
class CustomerInput:
    pass


# Every field of CustomerInput, optional: what updateCustomer validates as CustomerPatch.
@input_of(
    CustomerFields,
    every_field_optional=True,
    description="Absent fields stay as they are; null clears (not lastName).",
)
class CustomerChanges:
    pass


@input_of(DealCreate, nested={CustomerFields: CustomerInput})
class DealInput:
    pass


def deal_fields_of(value: object) -> dict[str, Any]:
    """``fields_of`` a DealInput, its customers' included."""
    given = fields_of(value)
    if "customers" in given:
        given["customers"] = [fields_of(customer) for customer in given["customers"] or []]
    return given


@input_of(
    DealUpsert,
    description="What upsertDeal takes: a deal's fields, without its customers (link them with"
    " linkCustomer). A new deal starts in stepId, else in the department's first step; an"
    " existing one changes only the fields given (null clears; stepId is never null).",
)
class DealUpsertInput:
    pass


# Not DealInput made optional: a deal's changes also move (stepId) and assign (employeeId) it.
@input_of(
    DealPatch, description="Absent fields stay as they are; null clears (not name or stepId)."
)
class DealChanges:
    pass


@input_of(ActivityFields)
class ActivityInput:
    pass


# Every field of ActivityInput, optional: what updateActivity validates as ActivityPatch.
@input_of(
    ActivityFields,
    every_field_optional=True,
    description="Absent fields stay as they are; null clears (not type, customerId).",
)
class ActivityChanges:
    pass


@strawberry.enum(description="What an operation of a batch does.")
class BatchOp(Enum):
    CREATE = "create"
    UPSERT = "upsert"


_OP = (
    "CREATE makes a new {record} of data (its external id, if any, in data.externalId);"
    " UPSERT creates the {record} with externalId, or changes the fields data gives of the one"
    " that has it (absent fields stay as they are)."
)
_EXTERNAL_ID = (
    "UPSERT: the {record}'s external id ({data}.externalId may repeat it). CREATE: absent."
)


@strawberry.input(description="One operation of batchCustomers.")
class CustomerOperationInput:
    op: BatchOp = strawberry.field(description=_OP.format(record="customer"))
    external_id: str | None = strawberry.field(
        default=strawberry.UNSET, description=_EXTERNAL_ID.format(record="customer", data="data")
    )
    data: CustomerInput = strawberry.field(description="The customer's fields.")


@strawberry.input(description="One operation of batchActivities.")
class ActivityOperationInput:
    op: BatchOp = strawberry.field(description=_OP.format(record="activity"))
    external_id: str | None = strawberry.field(
        default=strawberry.UNSET, description=_EXTERNAL_ID.format(record="activity", data="data")
    )
    data: ActivityInput = strawberry.field(description="The activity's fields.")


@strawberry.input(
    description="One operation of batchDeals: its deal in create or upsert, the one op names."
)
class DealOperationInput:
    op: BatchOp = strawberry.field(
        description="CREATE makes a new deal of create (customers included; its external id, if"
        " any, in create.externalId); UPSERT creates the deal with externalId of upsert, or"
        " changes the fields upsert gives of the one that has it."
    )
    external_id: str | None = strawberry.field(
        default=strawberry.UNSET, description=_EXTERNAL_ID.format(record="deal", data="upsert")
    )
    create: DealInput | None = strawberry.field(
        default=strawberry.UNSET, description="CREATE: the new deal. UPSERT: absent."
    )
    upsert: DealUpsertInput | None = strawberry.field(
        default=strawberry.UNSET, description="UPSERT: the deal's fields. CREATE: absent."
    )


def _given(value: object) -> bool:
    return value is not strawberry.UNSET and value is not None


def deal_batch_of(operations: Sequence[DealOperationInput]) -> Batch:
    """``batch_of`` the deal operations, each with its deal in the field its op names (create or
    upsert, which the operation's errors then name in place of REST's data)."""
    malformed = []
    for index, operation in enumerate(operations):
        named = operation.op.value
        other = "upsert" if named == "create" else "create"
        if not _given(getattr(operation, named)):
            malformed.append(
                FieldError(f"operations[{index}].{named}", "missing", f"{named} is required")
            )
        if _given(getattr(operation, other)):
            malformed.append(
                FieldError(
                    f"operations[{index}].{other}",
                    "unknown_field",
                    f"a {named} operation has no {other}",
                )
            )
    if malformed:
        names = ", ".join(error.field for error in malformed)
        raise Invalid(f"The request has invalid fields: {names}.", malformed)
    return batch_of(
        operations, lambda operation: deal_fields_of(getattr(operation, operation.op.value))
    )


def _data_fields(operation: Any) -> dict[str, Any]:
    return fields_of(operation.data)


def batch_of(
    operations: Sequence[Any], data_of: Callable[[Any], dict[str, Any]] = _data_fields
) -> Batch:
    """The platform's Batch of the operation inputs (each with ``op`` and ``external_id``), each
    operation's data as ``data_of`` gives it (``fields_of`` its ``data`` by default). The
    platform judges each operation's data alone, as it judges a REST batch's; a malformed
    operation, or more than 1,000 of them, is refused as a whole."""
    found = []
    for operation in operations:
        item: dict[str, Any] = {"op": operation.op.value}
        if _given(operation.external_id):
            item["external_id"] = operation.external_id
        item["data"] = data_of(operation)
        found.append(item)
    return validated(Batch, {"operations": found})


@input_of(WebhookEndpointFields)
class WebhookEndpointInput:
    pass


# Every field of WebhookEndpointInput, optional: what updateWebhookEndpoint validates as
# WebhookEndpointPatch.
@input_of(
    WebhookEndpointFields,
    every_field_optional=True,
    description="Absent fields stay as they are; only description can be cleared (null).",
)
class WebhookEndpointChanges:
    pass


def _custom_filters() -> Any:
    """A filter input's customFields: REST's custom filters, named without their prefix."""
    return strawberry.field(
        default=strawberry.UNSET,
        description="Filters on the tenant's unique or filterable custom fields of the record,"
        ' as REST\'s custom_fields.* parameters without that prefix: {"<name>": value}'
        " equality (a select: an option id or a list of them, any of them; a multi select:"
        ' records holding any of them), {"<name>.gte": value, "<name>.lte": value}'
        " ranges of integer, decimal, date and timestamp fields. Values as customFields shows"
        " them; a decimal may also be a number.",
    )


@strawberry.input
class CustomerFilter:
    external_id: str | None = strawberry.UNSET
    email: str | None = strawberry.UNSET
    q: str | None = strawberry.UNSET
    updated_since: datetime | None = strawberry.UNSET
    department_id: uuid.UUID | None = strawberry.UNSET
    custom_fields: JSON | None = _custom_filters()


@strawberry.input
class DealFilter:
    external_id: str | None = strawberry.UNSET
    step_id: uuid.UUID | None = strawberry.UNSET
    employee_id: uuid.UUID | None = strawberry.UNSET
    customer_id: uuid.UUID | None = strawberry.UNSET
    department_id: uuid.UUID | None = strawberry.UNSET
    updated_since: datetime | None = strawberry.UNSET
    created_after: datetime | None = strawberry.UNSET
    created_before: datetime | None = strawberry.UNSET
    volume_min: BigInt | None = strawberry.UNSET
    volume_max: BigInt | None = strawberry.UNSET
    custom_fields: JSON | None = _custom_filters()


@strawberry.enum
class DealOrder(Enum):
    CREATED_ASC = "created_asc"
    CREATED_DESC = "created_desc"
    VOLUME_ASC = "volume_asc"
    VOLUME_DESC = "volume_desc"


@strawberry.input
class ActivityFilter:
    external_id: str | None = strawberry.UNSET
    customer_id: uuid.UUID | None = strawberry.UNSET
    deal_id: uuid.UUID | None = strawberry.UNSET
    department_id: uuid.UUID | None = strawberry.UNSET
    custom_fields: JSON | None = _custom_filters()
