"""Wire models of responses: field for field what the integration document shows. A customer,
a deal and an activity take their fields from the platform's read models (``fields_from``); the
request bodies are the platform's input models themselves."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from types import UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    WithJsonSchema,
    create_model,
)

from dealbase.platform.activities.models import Activity, ActivityFields
from dealbase.platform.batches.models import MAX_OPERATIONS
from dealbase.platform.customers.models import Customer, CustomerFields
from dealbase.platform.deals.models import Deal, DealCreate, DealUpsert
from dealbase.platform.resources import (
    ACTIVITY_HIDDEN,
    CUSTOMER_HIDDEN,
    DEAL_HIDDEN,
    format_timestamp,
)
from dealbase.platform.shapes import CUSTOM_FIELDS
from dealbase.platform.validation import EXTERNAL_ID_MAX_LENGTH, EXTERNAL_ID_PATTERN
from dealbase.platform.webhooks.delivery_models import Attempt, Delivery
from dealbase.platform.webhooks.models import WebhookEndpoint

TIMESTAMP_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$"


Timestamp = Annotated[
    datetime,
    PlainSerializer(format_timestamp, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "format": "date-time",
            "pattern": TIMESTAMP_PATTERN,
            "examples": ["2026-11-21T09:30:00.000000Z"],
        }
    ),
]


class WireModel(BaseModel):
    model_config = ConfigDict(from_attributes=True, frozen=True)


Wire = TypeVar("Wire", bound=WireModel)


def _on_the_wire(annotation: Any) -> Any:
    """The wire type of a read model's attribute: a moment is shown as the document's timestamp."""
    if annotation is datetime:
        return Timestamp
    if get_origin(annotation) is UnionType:
        return Union[tuple(_on_the_wire(member) for member in get_args(annotation))]  # noqa: UP007
    return annotation


# A record's custom fields as it shows them: typed field by field in the tenant's own document
# (GET /api/v1/integration/openapi.json with its key).
CustomFieldsShown = dict[str, JsonValue]


def fields_from(
    read_model: type,
    *,
    hidden: Collection[str] = (),
    nested: Mapping[str, Any] | None = None,
    renamed: Mapping[str, str] | None = None,
    custom_fields: bool = False,
) -> Callable[[type[Wire]], type[Wire]]:
    """The decorated wire model, given a field for each attribute of ``read_model`` (a platform
    dataclass) in its order, so a platform field is declared once: ``hidden`` names the attributes
    the wire does not show, ``nested`` the wire type of attributes holding other read models,
    ``renamed`` the wire name of attributes the wire shows under another name, and
    ``custom_fields`` whether the tenant's custom fields follow them (a synced record's).

    The result is a subclass of the decorated class under the same name (pydantic takes its fields
    when a class is made), keeping its docstring and its configuration (examples)."""
    types = {**get_type_hints(read_model), **(nested or {})}
    names = renamed or {}
    # (type, ...): required, so an optional attribute is still always shown, as null. A renamed
    # field reads its attribute, or (an example, a body) its wire name.
    fields: dict[str, Any] = {
        names.get(field.name, field.name): (
            _on_the_wire(types[field.name]),
            Field(validation_alias=AliasChoices(field.name, names[field.name]))
            if field.name in names
            else ...,
        )
        for field in dataclasses.fields(read_model)
        if field.name not in hidden
    }
    if custom_fields:
        fields[CUSTOM_FIELDS] = (
            CustomFieldsShown,
            Field(default_factory=dict, description=_CUSTOM_FIELDS_SHOWN),
        )

    def derive(declared: type[Wire]) -> type[Wire]:
        return create_model(
            declared.__name__,
            __base__=declared,
            __module__=declared.__module__,
            __doc__=declared.__doc__,
            **fields,
        )

    return derive


# Every field the customer shows, null unless given below.
_CUSTOMER_EXAMPLE: dict[str, JsonValue] = {
    **{
        field.name: None
        for field in dataclasses.fields(Customer)
        if field.name not in CUSTOMER_HIDDEN
    },
    "id": "01a2008a-729d-7000-8ccb-38fd7605fcf5",
    "external_id": "shop-customer-1042",
    "tenant_id": "01a2008a-5757-7000-8f59-f1c22b8851ad",
    "last_name": "Lovelace",
    "first_name": "Ada",
    "email": "ada@example.com",
    "created_at": "2026-11-21T09:30:00.000000Z",
    "updated_at": "2026-11-21T09:30:00.000000Z",
    "custom_fields": {"contract_number": "C-1042"},
}


_CUSTOM_FIELDS_SHOWN = (
    "Present when the tenant has defined custom fields of the record (GET /custom-fields):"
    " each live field by its name, its value or null. The tenant's own OpenAPI document"
    " types each one."
)


# The shape platform.resources.customer_json builds, described for the OpenAPI document.
@fields_from(Customer, hidden=CUSTOMER_HIDDEN, custom_fields=True)
class CustomerOut(WireModel):
    """A customer; every optional field that was not supplied is ``null``."""

    model_config = ConfigDict(json_schema_extra={"examples": [_CUSTOMER_EXAMPLE]})


# The shape platform.resources.deal_json builds.
@fields_from(Deal, hidden=DEAL_HIDDEN, nested={"customers": list[CustomerOut]}, custom_fields=True)
class DealOut(WireModel):
    """A deal with its customers, in the order they were linked."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "01a2008a-8a11-7000-9d35-e2bf8eeee32e",
                    "external_id": "erp-order-77-3",
                    "name": "Analytical engine, 2 units",
                    "volume": 250000,
                    "deal_origin": "trade fair",
                    "employee_id": None,
                    "employee_name": None,
                    "step_id": "01a2008a-5794-7000-99be-dd0cfa5754b6",
                    "department_id": "01a2008a-5794-7000-99be-dd0cfa5754b5",
                    "note": None,
                    "created_at": "2026-11-21T09:31:00.000000Z",
                    "updated_at": "2026-11-21T09:31:00.000000Z",
                    "customers": [_CUSTOMER_EXAMPLE],
                    "custom_fields": {"renewal_date": "2027-06-30"},
                }
            ]
        }
    )


class ProblemFieldError(BaseModel):
    field: str = Field(
        description="Dotted path of the offending field, e.g. customers[2].last_name."
    )
    pointer: str = Field(description="The same location as a JSON pointer into the request body.")
    code: str = Field(description="Stable machine-readable reason, e.g. missing, too_long.")
    message: str


class OperationProblem(BaseModel):
    """RFC 9457 problem details, with dealbase's stable ``code`` and the request id: a
    response's, or one batch operation's."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "type": "/problems/validation_failed",
                    "title": "Validation failed",
                    "status": 422,
                    "detail": "The request has invalid fields: last_name.",
                    "code": "validation_failed",
                    "request_id": "8f14e45fceea167a5a36dedd4bea2543",
                    "errors": [
                        {
                            "field": "last_name",
                            "pointer": "/last_name",
                            "code": "missing",
                            "message": "Field required",
                        }
                    ],
                }
            ]
        }
    )

    type: str = Field(examples=["/problems/validation_failed"])
    title: str
    status: int
    detail: str
    code: str = Field(examples=["validation_failed"])
    request_id: str
    errors: list[ProblemFieldError] | None = Field(
        default=None, description="Present on validation failures: every offending field."
    )


class BatchFailure(BaseModel):
    index: int = Field(description="The operation's place in `operations`, from 0.")
    error: OperationProblem


class Problem(OperationProblem):
    """RFC 9457 problem details, with dealbase's stable ``code`` and the request id."""

    failures: list[BatchFailure] | None = Field(
        default=None,
        description="Present on batch_rejected (an atomic batch): each failed operation.",
    )


# The shape platform.resources.activity_json builds.
@fields_from(Activity, hidden=ACTIVITY_HIDDEN, custom_fields=True)
class ActivityOut(WireModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "01a2008b-0a00-7000-b557-3b3b2532467b",
                    "external_id": None,
                    "type": "call",
                    "subject": "Follow-up on the quote",
                    "note": None,
                    "due_at": "2026-12-01T09:00:00.000000Z",
                    "done_at": None,
                    "customer_id": "01a2008a-729d-7000-8ccb-38fd7605fcf5",
                    "deal_id": None,
                    "employee_id": None,
                    "created_at": "2026-11-21T09:32:00.000000Z",
                    "updated_at": "2026-11-21T09:32:00.000000Z",
                    "custom_fields": {},
                }
            ]
        }
    )


_WEBHOOK_ENDPOINT_EXAMPLE: dict[str, JsonValue] = {
    "id": "01a2008b-3c00-7000-8a4e-5f0f3c9d2a11",
    "url": "https://hooks.example.com/dealbase",
    "events": ["deal.created", "deal.step_changed"],
    "enabled": True,
    "disabled_reason": None,
    "description": "Pipeline board",
    "ordered": True,
    "previous_secret_expires_at": None,
    "created_at": "2026-11-21T09:33:00.000000Z",
    "updated_at": "2026-11-21T09:33:00.000000Z",
}


# As a customer: no department and the version as the ETag header.
@fields_from(WebhookEndpoint, hidden={"department_id", "version"})
class WebhookEndpointOut(WireModel):
    """A webhook endpoint. Its secret is shown only when it is issued: in the answer that
    creates the endpoint and in the one that rotates the secret."""

    model_config = ConfigDict(json_schema_extra={"examples": [_WEBHOOK_ENDPOINT_EXAMPLE]})


class WebhookEndpointWithSecretOut(WebhookEndpointOut):
    """A webhook endpoint with its new signing secret, shown this once."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    **_WEBHOOK_ENDPOINT_EXAMPLE,
                    "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                }
            ]
        }
    )

    secret: str = Field(
        description="Standard Webhooks signing secret: `whsec_` and the base64 of the key."
    )


# As the worker records it: a delivery that failed once and waits for its retry.
_WEBHOOK_DELIVERY_EXAMPLE: dict[str, JsonValue] = {
    "id": "01a2008c-2b00-7000-9a10-6c1d2e3f4a5b",
    "webhook_endpoint_id": "01a2008b-3c00-7000-8a4e-5f0f3c9d2a11",
    "event_id": "01a2008c-1a00-7000-8f00-3b3b2532467b",
    "event_type": "deal.step_changed",
    "state": "pending",
    "attempt_count": 1,
    "next_attempt_at": "2026-11-21T09:40:05.120000Z",
    "created_at": "2026-11-21T09:40:00.050000Z",
    "delivered_at": None,
    "attempts": [
        {
            "attempted_at": "2026-11-21T09:40:00.100000Z",
            "status_code": 500,
            "duration_ms": 12,
            "error": "The endpoint answered 500.",
        }
    ],
}


@fields_from(Attempt)
class WebhookAttemptOut(WireModel):
    """One attempt to send a delivery. ``status_code`` is null when no answer came (refused,
    timed out, an address not allowed); ``error`` says why the attempt failed, null when it
    succeeded."""


@fields_from(
    Delivery,
    renamed={"endpoint_id": "webhook_endpoint_id"},
    nested={"attempts": list[WebhookAttemptOut]},
)
class WebhookDeliveryOut(WireModel):
    """An event (or a test event) on its way to one webhook endpoint. ``event_id`` is null for a
    test event (``event_type`` ``webhook.test``); ``state`` is ``pending`` until an attempt
    succeeds (``delivered``) or the retries give up (``failed``); ``next_attempt_at`` is when
    a pending delivery is next tried (null otherwise); ``attempts`` lists every attempt, oldest
    first."""

    model_config = ConfigDict(json_schema_extra={"examples": [_WEBHOOK_DELIVERY_EXAMPLE]})


class StepOut(WireModel):
    id: uuid.UUID
    name: str
    position: int = Field(description="1 for the step new deals start in, then in pipeline order.")


class EmployeeOut(WireModel):
    id: uuid.UUID
    name: str
    email: str | None
    department_id: uuid.UUID
    created_at: Timestamp
    updated_at: Timestamp


class DepartmentOut(WireModel):
    id: uuid.UUID
    name: str
    steps: list[StepOut]
    created_at: Timestamp
    updated_at: Timestamp


class _ListOf(WireModel):
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null on the last page."
    )


class CustomerList(_ListOf):
    data: list[CustomerOut]


class DealList(_ListOf):
    data: list[DealOut]


class ActivityList(_ListOf):
    data: list[ActivityOut]


class WebhookEndpointList(_ListOf):
    data: list[WebhookEndpointOut]


class WebhookDeliveryList(_ListOf):
    data: list[WebhookDeliveryOut]


class EmployeeList(_ListOf):
    data: list[EmployeeOut]


class StepList(WireModel):
    data: list[StepOut]


class BatchSummary(BaseModel):
    created: int
    updated: int
    unchanged: int
    failed: int


def _operation_data(data: type[BaseModel], taken: str) -> tuple[type[BaseModel], Any]:
    """The field ``data`` of a batch's operation: ``data``, as the operation ``taken`` it."""
    return (
        data,
        Field(
            description=f"A {data.__name__} object, {taken} Judged on its own: data that breaks"
            " this schema fails this operation (a 422 result), not the batch."
        ),
    )


def _create_operation_fields(create: type[BaseModel]) -> dict[str, Any]:
    """The fields of a batch's create operation, whose ``data`` is ``create``."""
    return {
        "op": (Literal["create"], ...),
        "data": _operation_data(create, "as creating one takes it, external_id included."),
    }


def _upsert_operation_fields(upsert: type[BaseModel]) -> dict[str, Any]:
    """The fields of a batch's upsert operation, whose ``data`` is ``upsert``."""
    return {
        "op": (Literal["upsert"], ...),
        "external_id": (
            str,
            Field(
                max_length=EXTERNAL_ID_MAX_LENGTH,
                description="The record to create or update.",
                json_schema_extra={"pattern": EXTERNAL_ID_PATTERN},
            ),
        ),
        "data": _operation_data(
            upsert, "as the upsert takes it; data.external_id may only repeat external_id."
        ),
    }


def _batch_result_fields(shown: type[BaseModel]) -> dict[str, Any]:
    """The fields of one operation's result, whose ``data`` is ``shown``."""
    return {
        "status": (int, Field(description="The status a request of its own would have had.")),
        "outcome": (Literal["created", "updated", "unchanged", "failed"], ...),
        "data": (shown | None, Field(default=None, description="The record, unless failed.")),
        "error": (
            OperationProblem | None,
            Field(default=None, description="Why it failed, if it did."),
        ),
    }


def _batch_models(
    resource: str, create: type[BaseModel], upsert: type[BaseModel], shown: type[BaseModel]
) -> tuple[type[BaseModel], type[BaseModel]]:
    """The request and response bodies of ``POST /{resource}/batch``, named after ``resource``:
    a create operation's ``data`` is ``create``, an upsert's ``upsert``, a result's ``shown``."""
    forbid = ConfigDict(extra="forbid")
    # These models only describe the body (the route parses it as a platform Batch): each
    # operation's `data` is shown as the schema it is judged against, and is judged on its own,
    # so data that breaks its schema fails its operation (a 422 result), not the batch.
    create_operation = create_model(
        f"{resource}CreateOperation", __config__=forbid, **_create_operation_fields(create)
    )
    upsert_operation = create_model(
        f"{resource}UpsertOperation", __config__=forbid, **_upsert_operation_fields(upsert)
    )
    operation = Annotated[create_operation | upsert_operation, Field(discriminator="op")]
    request_fields: dict[str, Any] = {
        "operations": (list[operation], Field(min_length=1, max_length=MAX_OPERATIONS)),
    }
    result = create_model(f"{resource}BatchResult", **_batch_result_fields(shown))
    response_fields: dict[str, Any] = {
        "results": (list[result], Field(description="One per operation, in order.")),
        "summary": (BatchSummary, ...),
    }
    return (
        create_model(f"{resource}Batch", __config__=forbid, **request_fields),
        create_model(f"{resource}BatchResults", **response_fields),
    )


CustomerBatch, CustomerBatchResults = _batch_models(
    "Customer", CustomerFields, CustomerFields, CustomerOut
)
# A deal's create takes its customers; its upsert takes a step and an employee instead.
DealBatch, DealBatchResults = _batch_models("Deal", DealCreate, DealUpsert, DealOut)
ActivityBatch, ActivityBatchResults = _batch_models(
    "Activity", ActivityFields, ActivityFields, ActivityOut
)
