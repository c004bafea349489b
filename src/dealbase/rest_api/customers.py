from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from dealbase.edge.callers import AdmittedRoute, caller_of, charge_batch
from dealbase.edge.database import database_of
from dealbase.edge.idempotency import run_once
from dealbase.edge.requests import (
    IdempotencyKey,
    IfMatch,
    IfNoneMatch,
    expected_version,
    json_body,
    parse_body,
)
from dealbase.platform.batches.models import Batch
from dealbase.platform.customers import service
from dealbase.platform.customers.models import (
    CustomerFields,
    CustomerFilter,
    CustomerPatch,
)
from dealbase.platform.resources import customer_json
from dealbase.platform.validation import EMAIL_MAX_LENGTH, SHORT_TEXT, validated
from dealbase.rest_api.openapi import (
    CREATED_HEADERS,
    EXTERNAL_ID_FILTER,
    EXTERNAL_ID_PATH,
    LIST_CURSOR,
    LIST_LIMIT,
    READ_HEADERS,
    UPDATED_SINCE,
    json_request_body,
    problem_responses,
)
from dealbase.rest_api.responses import (
    batch_response,
    created,
    created_from_json_text,
    json_text_page,
    json_text_response,
    no_content,
    resource_response,
)
from dealbase.rest_api.schemas import (
    CustomerBatch,
    CustomerBatchResults,
    CustomerList,
    CustomerOut,
)
from dealbase.tenancy.database.connections import AfterCommit, UnitOfWork

router = APIRouter(prefix="/customers", tags=["customers"], route_class=AdmittedRoute)

CUSTOMER_EXAMPLE: dict[str, Any] = {
    "last_name": "Lovelace",
    "first_name": "Ada",
    "company": "Analytical Engines Ltd",
    "email": "ada@example.com",
    "phone_1": "+44 20 7946 0000",
    "phone_1_label": "office",
    "city": "London",
    "country": "GB",
    "birthday": "1985-12-10",
    "contact_origin": "website",
}


@router.post(
    "",
    status_code=201,
    summary="Create a customer",
    description=(
        "Creates a customer in the caller's department: `last_name` is required, every other"
        " field optional (`null` in the answer when left out). An `external_id` another"
        " customer of the department has is 409 `external_id_taken`."
    ),
    response_model=None,
    responses={
        201: {
            "model": CustomerOut,
            "description": "The created customer.",
            "headers": CREATED_HEADERS,
        },
        **problem_responses(400, 401, 403, 409, 413, 415, 422),
    },
    openapi_extra=json_request_body(CustomerFields, CUSTOMER_EXAMPLE),
)
async def create_customer(
    request: Request,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    scope = caller_of(request)
    body = await json_body(request)
    fields = parse_body(CustomerFields, body)

    def perform(uow: UnitOfWork) -> AfterCommit[Response]:
        customer = service.create_later_as_json(uow, fields)
        return AfterCommit(lambda: created_from_json_text(*customer.read(), "/customers"))

    return await run_once(request, scope, idempotency_key, fields, perform)


@router.get(
    "",
    summary="List customers",
    description="The department's customers, oldest first, a page at a time.",
    response_model=None,
    responses={
        200: {"model": CustomerList, "description": "A page of customers."},
        **problem_responses(401, 403, 422),
    },
)
async def list_customers(
    request: Request,
    limit: int | None = LIST_LIMIT,
    cursor: str | None = LIST_CURSOR,
    email: str | None = Query(
        None, max_length=EMAIL_MAX_LENGTH, description="Exact email address, in any letter case."
    ),
    q: str | None = Query(
        None,
        min_length=1,
        max_length=SHORT_TEXT,
        description="Text the last name, first name or company contains (any letter case).",
    ),
    updated_since: str | None = UPDATED_SINCE,
    external_id: str | None = EXTERNAL_ID_FILTER,
) -> Response:
    scope = caller_of(request)
    filters = validated(
        CustomerFilter,
        {"email": email, "q": q, "updated_since": updated_since, "external_id": external_id},
    )
    page = await database_of(request).read(
        scope, lambda uow: service.list_page_as_json(uow, filters, limit, cursor)
    )
    return json_text_page(page)


@router.get(
    "/{customer_id}",
    summary="Read a customer",
    description="The customer, its version in the `ETag`.",
    response_model=None,
    responses={
        200: {"model": CustomerOut, "description": "The customer.", "headers": READ_HEADERS},
        **problem_responses(401, 403, 404),
    },
)
async def get_customer(
    request: Request,
    customer_id: uuid.UUID,
) -> Response:
    scope = caller_of(request)
    version, text = await database_of(request).read(
        scope, lambda uow: service.get_as_json(uow, customer_id)
    )
    return json_text_response(version, text)


@router.patch(
    "/{customer_id}",
    summary="Update a customer",
    description=(
        "Changes the fields the body carries; `null` clears an optional field, and `last_name`"
        " cannot be cleared. With `If-Match`, only if the customer is still at that ETag."
    ),
    response_model=None,
    responses={
        200: {
            "model": CustomerOut,
            "description": "The updated customer.",
            "headers": READ_HEADERS,
        },
        **problem_responses(400, 401, 403, 404, 409, 412, 413, 415, 422),
    },
    openapi_extra=json_request_body(CustomerPatch, {"email": "ada@example.org", "note": None}),
)
async def update_customer(
    request: Request,
    customer_id: uuid.UUID,
    if_match: IfMatch = None,
) -> Response:
    scope = caller_of(request)
    body = await json_body(request)
    patch = parse_body(CustomerPatch, body)
    customer = await database_of(request).run(
        scope, lambda uow: service.update(uow, customer_id, patch, expected_version(if_match))
    )
    return resource_response(customer_json, customer)


@router.delete(
    "/{customer_id}",
    status_code=204,
    summary="Delete a customer",
    description="Deletes the customer, its activities, and its place in its deals' customers.",
    response_model=None,
    responses={
        204: {"description": "Deleted."},
        **problem_responses(401, 403, 404, 412),
    },
)
async def delete_customer(
    request: Request,
    customer_id: uuid.UUID,
    if_match: IfMatch = None,
) -> Response:
    scope = caller_of(request)
    await database_of(request).run(
        scope, lambda uow: service.delete(uow, customer_id, expected_version(if_match))
    )
    return no_content()


@router.put(
    "/by-external-id/{external_id}",
    summary="Create or update a customer by external id",
    description=(
        "Creates the customer with this external id (201), or changes the fields the body"
        " gives of the one that has it (200); absent fields stay as they are. The body is what"
        " creating takes (`last_name` required), so the same request serves both. A change"
        " that changes nothing writes nothing: no new version, no event. Two clients upserting"
        " the same new external id at once make one customer. `If-Match`: only if the customer"
        " exists at that ETag; `If-None-Match: *`: only if it does not exist (or, with ETags,"
        " only if it is not at one of them)."
    ),
    response_model=None,
    responses={
        200: {
            "model": CustomerOut,
            "description": "The customer existed: as it now is.",
            "headers": READ_HEADERS,
        },
        201: {
            "model": CustomerOut,
            "description": "The created customer.",
            "headers": CREATED_HEADERS,
        },
        **problem_responses(400, 401, 403, 409, 412, 413, 415, 422),
    },
    openapi_extra=json_request_body(CustomerFields, CUSTOMER_EXAMPLE),
)
async def upsert_customer(
    request: Request,
    external_id: str = EXTERNAL_ID_PATH,
    if_match: IfMatch = None,
    if_none_match: IfNoneMatch = None,
) -> Response:
    scope = caller_of(request)
    body = await json_body(request)
    fields = parse_body(CustomerFields, body)
    result = await database_of(request).run(
        scope,
        lambda uow: service.upsert(
            uow,
            external_id,
            fields,
            expected=expected_version(if_match),
            unless=expected_version(if_none_match),
        ),
    )
    customer = result.record
    assert customer is not None, "a successful upsert has its customer"
    if result.outcome == "created":
        return created(customer_json, customer, f"/customers/{customer.id}")
    return resource_response(customer_json, customer)


BATCH_EXAMPLE: dict[str, Any] = {
    "operations": [
        {"op": "upsert", "external_id": "shop-customer-1042", "data": CUSTOMER_EXAMPLE},
        {
            "op": "create",
            "data": {"last_name": "Babbage", "external_id": "shop-customer-1043"},
        },
    ]
}


@router.post(
    "/batch",
    summary="Create and upsert customers in one request",
    description=(
        "Up to 1,000 operations, each a `create` or an `upsert` by external id, applied in a"
        " few statements whatever their number. By default each operation stands alone: one"
        " that fails is reported in its result and the others are written. With"
        " `atomic=true` the batch is all or nothing: any failure writes nothing and answers"
        " 422 `batch_rejected` listing the failures. A batch of n operations counts as"
        " ceil(n / 100) requests against the rate limits."
    ),
    response_model=None,
    responses={
        200: {
            "model": CustomerBatchResults,
            "description": "One result per operation, in order.",
        },
        **problem_responses(400, 401, 403, 409, 413, 415, 422),
    },
    openapi_extra=json_request_body(CustomerBatch, BATCH_EXAMPLE),
)
async def batch_customers(
    request: Request,
    atomic: bool = Query(False, description="All or nothing: any failure writes nothing."),
    idempotency_key: IdempotencyKey = None,
) -> Response:
    scope = caller_of(request)
    body = await json_body(request)
    batch = parse_body(Batch, body)
    await charge_batch(request, scope, len(batch.operations))

    def perform(uow: UnitOfWork) -> Response:
        results = service.batch(uow, batch, atomic=atomic)
        return batch_response(request, customer_json, results)

    return await run_once(request, scope, idempotency_key, batch, perform)
