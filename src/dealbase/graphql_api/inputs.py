"""GraphQL input types. The inputs of customers, deals and activities are made from the
platform's input models (``input_of``), and each becomes that model again through ``fields_of``,
so GraphQL and REST take the same fields and validate them by the same rules."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from enum import Enum
from types import GenericAlias, UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import strawberry
from pydantic import AwareDatetime, BaseModel

from dealbase.graphql_api.types import ActivityType, BigInt
from dealbase.platform.activities.models import ActivityFields
from dealbase.platform.activities.models import ActivityType as ActivityTypeLiteral
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.deals.models import DealCreate, DealPatch
from dealbase.platform.webhooks.models import EventChoice, WebhookEndpointFields


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


@strawberry.input
class CustomerFilter:
    external_id: str | None = strawberry.UNSET
    email: str | None = strawberry.UNSET
    q: str | None = strawberry.UNSET
    updated_since: datetime | None = strawberry.UNSET
    department_id: uuid.UUID | None = strawberry.UNSET


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
