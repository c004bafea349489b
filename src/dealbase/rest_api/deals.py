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
from dealbase.platform.deals import service
from dealbase.platform.deals.models import (
    CustomerLink,
    DealCreate,
    DealFilter,
    DealPatch,
    DealUpsert,
)
from dealbase.platform.resources import deal_json
from dealbase.platform.validation import validated
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
from dealbase.rest_api.schemas import DealBatch, DealBatchResults, DealList, DealOut
from dealbase.tenancy.database.connections import AfterCommit, UnitOfWork

router = APIRouter(prefix="/deals", tags=["deals"], route_class=AdmittedRoute)

DEAL_EXAMPLE: dict[str, Any] = {
    "name": "Analytical engine, 2 units",
    "volume": 250000,
    "deal_origin": "trade fair",
    "note": "Wants delivery before spring.",
    "customers": [{"last_name": "Lovelace", "first_name": "Ada"}, {"last_name": "Babbage"}],
}


@router.post(
    "",
    status_code=201,
    summary="Create a deal",
    description=(
        "Creates the deal in the caller's department, unassigned, at the department's first "
        "pipeline step, and one new customer per element of `customers`, returned in request order."
    ),
    response_model=None,
    responses={
        201: {"model": DealOut, "description": "The created deal.", "headers": CREATED_HEADERS},
        **problem_responses(400, 401, 403, 409, 413, 415, 422),
    },
    openapi_extra=json_request_body(DealCreate, DEAL_EXAMPLE),
)
async def create_deal(
    request: Request,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    scope = caller_of(request)
    body = await json_body(request)
    fields = parse_body(DealCreate, body)

    def perform(uow: UnitOfWork) -> AfterCommit[Response]:
        deal = service.create_later_as_json(uow, fields)
        return AfterCommit(lambda: created_from_json_text(*deal.read(), "/deals"))

    return await run_once(request, scope, idempotency_key, fields, perform)


@router.get(
    "",
    summary="List deals",
    description="The department's deals with their customers, oldest first, a page at a time.",
    response_model=None,
    responses={
        200: {"model": DealList, "description": "A page of deals."},
        **problem_responses(401, 403, 422),
    },
)
async def list_deals(
    request: Request,
    limit: int | None = LIST_LIMIT,
    cursor: str | None = LIST_CURSOR,
    step_id: uuid.UUID | None = Query(None, description="Only deals in this step."),
    employee_id: uuid.UUID | None = Query(
        None, description="Only deals assigned to this employee."
    ),
    customer_id: uuid.UUID | None = Query(None, description="Only deals linked to this customer."),
    updated_since: str | None = UPDATED_SINCE,
    external_id: str | None = EXTERNAL_ID_FILTER,
) -> Response:
    scope = caller_of(request)
    filters = validated(
        DealFilter,
        {
            "external_id": external_id,
            "step_id": step_id,
            "employee_id": employee_id,
            "customer_id": customer_id,
            "updated_since": updated_since,
        },
    )
    page = await database_of(request).read(
        scope, lambda uow: service.list_page_as_json(uow, filters, limit, cursor)
    )
    return json_text_page(page)


@router.get(
    "/{deal_id}",
    summary="Read a deal",
    description="The deal with its customers, in the order they were linked; its version in"
    " the `ETag`.",
    response_model=None,
    responses={
        200: {
            "model": DealOut,
            "description": "The deal with its customers.",
            "headers": READ_HEADERS,
        },
        **problem_responses(401, 403, 404),
    },
)
async def get_deal(
    request: Request,
    deal_id: uuid.UUID,
) -> Response:
    scope = caller_of(request)
    version, text = await database_of(request).read(
        scope, lambda uow: service.get_as_json(uow, deal_id)
    )
    return json_text_response(version, text)


@router.patch(
    "/{deal_id}",
    summary="Update, move or assign a deal",
    description=(
        "Changes `name`, `volume`, `deal_origin`, `note`; `step_id` moves the deal to another step"
        " of its department; `employee_id` assigns it to an employee of its department, and `null`"
        " unassigns it. A step or employee of another department is a 422 naming the field."
    ),
    response_model=None,
    responses={
        200: {"model": DealOut, "description": "The updated deal.", "headers": READ_HEADERS},
        **problem_responses(400, 401, 403, 404, 409, 412, 413, 415, 422),
    },
    openapi_extra=json_request_body(
        DealPatch, {"volume": 300000, "step_id": "01a2008a-5794-7000-99be-dd0cfa5754b5"}
    ),
)
async def update_deal(
    request: Request,
    deal_id: uuid.UUID,
    if_match: IfMatch = None,
) -> Response:
    scope = caller_of(request)
    body = await json_body(request)
    patch = parse_body(DealPatch, body)
    deal = await database_of(request).run(
        scope, lambda uow: service.update(uow, deal_id, patch, expected_version(if_match))
    )
    return resource_response(deal_json, deal)


@router.delete(
    "/{deal_id}",
    status_code=204,
    summary="Delete a deal",
    description="Deletes the deal; its customers stay, and its activities no longer name it.",
    response_model=None,
    responses={204: {"description": "Deleted."}, **problem_responses(401, 403, 404, 412)},
)
async def delete_deal(
    request: Request,
    deal_id: uuid.UUID,
    if_match: IfMatch = None,
) -> Response:
    scope = caller_of(request)
    await database_of(request).run(
        scope, lambda uow: service.delete(uow, deal_id, expected_version(if_match))
    )
    return no_content()


@router.post(
    "/{deal_id}/customers",
    summary="Link a customer to a deal",
    description=(
        "Appends an existing customer of the department to the deal's `customers`; linking a"
        " customer that is linked already changes nothing."
    ),
    response_model=None,
    responses={
        200: {
            "model": DealOut,
            "description": "The deal with its customers.",
            "headers": READ_HEADERS,
        },
        **problem_responses(400, 401, 403, 404, 409, 413, 415, 422),
    },
    openapi_extra=json_request_body(
        CustomerLink, {"customer_id": "01a2008a-729d-7000-8ccb-38fd7605fcf5"}
    ),
)
async def link_customer(
    request: Request,
    deal_id: uuid.UUID,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    scope = caller_of(request)
    body = await json_body(request)
    link = parse_body(CustomerLink, body)

    def perform(uow: UnitOfWork) -> Response:
        return resource_response(deal_json, service.link_customer(uow, deal_id, link))

    return await run_once(request, scope, idempotency_key, link, perform)


@router.delete(
    "/{deal_id}/customers/{customer_id}",
    status_code=204,
    summary="Unlink a customer from a deal",
    description="The customer itself stays; 404 when it is not linked to the deal.",
    response_model=None,
    responses={204: {"description": "Unlinked."}, **problem_responses(401, 403, 404)},
)
async def unlink_customer(
    request: Request,
    deal_id: uuid.UUID,
    customer_id: uuid.UUID,
) -> Response:
    scope = caller_of(request)
    await database_of(request).run(
        scope, lambda uow: service.unlink_customer(uow, deal_id, customer_id)
    )
    return no_content()


DEAL_UPSERT_EXAMPLE: dict[str, Any] = {
    "name": "Analytical engine, 2 units",
    "volume": 250000,
    "deal_origin": "shop",
    "note": "Wants delivery before spring.",
}


@router.put(
    "/by-external-id/{external_id}",
    summary="Create or update a deal by external id",
    description=(
        "Creates the deal with this external id (201), or changes the fields the body gives of"
        " the one that has it (200); absent fields stay as they are. The body is what creating"
        " takes (`name` required), so the same request serves both, but without `customers`:"
        " upsert the customers first and link them with `POST /deals/{deal_id}/customers`. A"
        " new deal starts in `step_id` if given, else in the department's first step, and is"
        " assigned to `employee_id` if given; on an existing deal they move and assign it as"
        " `PATCH` does, with the same events (`step_id` may be omitted, never null). A step or"
        " employee of another department is a 422 naming the field. A change that changes"
        " nothing writes nothing: no new version, no event. Two clients upserting the same new"
        " external id at once make one deal. `If-Match`: only if the deal exists at that ETag;"
        " `If-None-Match: *`: only if it does not exist (or, with ETags, only if it is not at"
        " one of them)."
    ),
    response_model=None,
    responses={
        200: {
            "model": DealOut,
            "description": "The deal existed: as it now is.",
            "headers": READ_HEADERS,
        },
        201: {"model": DealOut, "description": "The created deal.", "headers": CREATED_HEADERS},
        **problem_responses(400, 401, 403, 409, 412, 413, 415, 422),
    },
    openapi_extra=json_request_body(DealUpsert, DEAL_UPSERT_EXAMPLE),
)
async def upsert_deal(
    request: Request,
    external_id: str = EXTERNAL_ID_PATH,
    if_match: IfMatch = None,
    if_none_match: IfNoneMatch = None,
) -> Response:
    scope = caller_of(request)
    body = await json_body(request)
    fields = parse_body(DealUpsert, body)
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
    deal = result.record
    assert deal is not None, "a successful upsert has its deal"
    if result.outcome == "created":
        return created(deal_json, deal, f"/deals/{deal.id}")
    return resource_response(deal_json, deal)


BATCH_EXAMPLE: dict[str, Any] = {
    "operations": [
        {"op": "upsert", "external_id": "shop-order-5001", "data": DEAL_UPSERT_EXAMPLE},
        {
            "op": "create",
            "data": {
                "name": "Difference engine",
                "external_id": "shop-order-5002",
                "customers": [{"last_name": "Babbage"}],
            },
        },
    ]
}


@router.post(
    "/batch",
    summary="Create and upsert deals in one request",
    description=(
        "Up to 1,000 operations, each a `create` (`data` as `POST /deals` takes it, customers"
        " included) or an `upsert` by external id (`data` as `PUT"
        " /deals/by-external-id/{external_id}` takes it), applied one after another in one"
        " transaction. By default each operation stands alone: one that fails is reported in"
        " its result and the others are written. With `atomic=true` the batch is all or"
        " nothing: any failure writes nothing and answers 422 `batch_rejected` listing the"
        " invalid operations, or else the first that failed. A batch of n operations counts as"
        " ceil(n / 100) requests against the rate limits."
    ),
    response_model=None,
    responses={
        200: {"model": DealBatchResults, "description": "One result per operation, in order."},
        **problem_responses(400, 401, 403, 409, 413, 415, 422),
    },
    openapi_extra=json_request_body(DealBatch, BATCH_EXAMPLE),
)
async def batch_deals(
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
        return batch_response(request, deal_json, results)

    return await run_once(request, scope, idempotency_key, batch, perform)
