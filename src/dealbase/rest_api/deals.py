from __future__ import annotations

import uuid

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from dealbase.edge.callers import department_scope
from dealbase.edge.database import database_of
from dealbase.edge.idempotency import run_once
from dealbase.edge.requests import IdempotencyKey, IfMatch, expected_version, json_body, parse_body
from dealbase.platform.deals import service
from dealbase.platform.deals.models import CustomerLink, DealCreate, DealFilter, DealPatch
from dealbase.platform.resources import deal_json
from dealbase.platform.validation import validated
from dealbase.rest_api.openapi import (
    CREATED_HEADERS,
    EXTERNAL_ID_FILTER,
    LIST_CURSOR,
    LIST_LIMIT,
    READ_HEADERS,
    UPDATED_SINCE,
    json_request_body,
    problem_responses,
)
from dealbase.rest_api.responses import created, no_content, resource_page, resource_response
from dealbase.rest_api.schemas import DealList, DealOut
from dealbase.tenancy.database import UnitOfWork
from dealbase.tenancy.scope import Scope

router = APIRouter(prefix="/deals", tags=["deals"])

DEAL_EXAMPLE = {
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
    scope: Scope = Depends(department_scope),
    body: bytes = Depends(json_body),
    idempotency_key: IdempotencyKey = None,
) -> Response:
    fields = parse_body(DealCreate, body)

    def perform(uow: UnitOfWork) -> Response:
        deal = service.create(uow, fields)
        return created(deal_json, deal, f"/deals/{deal.id}")

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
    scope: Scope = Depends(department_scope),
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
    page = await database_of(request).run(
        scope, lambda uow: service.list_page(uow, filters, limit, cursor)
    )
    return resource_page(deal_json, page)


@router.get(
    "/{deal_id}",
    summary="Read a deal",
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
    scope: Scope = Depends(department_scope),
) -> Response:
    deal = await database_of(request).run(scope, lambda uow: service.get(uow, deal_id))
    return resource_response(deal_json, deal)


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
        **problem_responses(400, 401, 403, 404, 412, 413, 415, 422),
    },
    openapi_extra=json_request_body(
        DealPatch, {"volume": 300000, "step_id": "01a2008a-5794-7000-99be-dd0cfa5754b5"}
    ),
)
async def update_deal(
    request: Request,
    deal_id: uuid.UUID,
    scope: Scope = Depends(department_scope),
    body: bytes = Depends(json_body),
    if_match: IfMatch = None,
) -> Response:
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
    scope: Scope = Depends(department_scope),
    if_match: IfMatch = None,
) -> Response:
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
    scope: Scope = Depends(department_scope),
    body: bytes = Depends(json_body),
    idempotency_key: IdempotencyKey = None,
) -> Response:
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
    scope: Scope = Depends(department_scope),
) -> Response:
    await database_of(request).run(
        scope, lambda uow: service.unlink_customer(uow, deal_id, customer_id)
    )
    return no_content()
