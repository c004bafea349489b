from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from dealbase.db.units import UnitOfWork
from dealbase.edge.callers import AdmittedRoute, caller_of
from dealbase.edge.database import database_of
from dealbase.edge.idempotency import run_once
from dealbase.edge.requests import IdempotencyKey, json_body, parse_body
from dealbase.platform.deals import service
from dealbase.platform.deals.models import (
    CustomerLink,
    DealCreate,
    DealFilter,
    DealPatch,
    DealUpsert,
)
from dealbase.platform.resources import deal_json
from dealbase.rest_api.openapi import (
    EXTERNAL_ID_FILTER,
    READ_HEADERS,
    UPDATED_SINCE,
    json_request_body,
    problem_responses,
)
from dealbase.rest_api.records import (
    SyncedRecordRoutes,
    add_create_route,
    add_item_routes,
    add_list_route,
    add_sync_routes,
)
from dealbase.rest_api.responses import no_content, resource_response
from dealbase.rest_api.schemas import DealBatch, DealBatchResults, DealList, DealOut

router = APIRouter(prefix="/deals", tags=["deals"], route_class=AdmittedRoute)

DEAL_EXAMPLE: dict[str, Any] = {
    "name": "Analytical engine, 2 units",
    "volume": 250000,
    "deal_origin": "trade fair",
    "note": "Wants delivery before spring.",
    "customers": [{"last_name": "Lovelace", "first_name": "Ada"}, {"last_name": "Babbage"}],
}


DEAL_UPSERT_EXAMPLE: dict[str, Any] = {
    "name": "Analytical engine, 2 units",
    "volume": 250000,
    "deal_origin": "shop",
    "note": "Wants delivery before spring.",
}


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


DEAL_ROUTES = SyncedRecordRoutes(
    noun="deal",
    article="a",
    plural="deals",
    service=service.RECORD,
    as_json=deal_json,
    out=DealOut,
    upsert_body=DealUpsert,
    patch_body=DealPatch,
    batch_body=DealBatch,
    batch_results=DealBatchResults,
    read_description=(
        "The deal with its customers, in the order they were linked; its version in the `ETag`."
    ),
    read_answer="The deal with its customers.",
    patch_summary="Update, move or assign a deal",
    patch_description=(
        "Changes `name`, `volume`, `deal_origin`, `note`; `step_id` moves the deal to another step"
        " of its department; `employee_id` assigns it to an employee of its department, and `null`"
        " unassigns it. A step or employee of another department is a 422 naming the field."
    ),
    patch_example={"volume": 300000, "step_id": "01a2008a-5794-7000-99be-dd0cfa5754b5"},
    delete_description="Deletes the deal; its customers stay, and its activities no longer name it.",
    upsert_description=(
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
    upsert_example=DEAL_UPSERT_EXAMPLE,
    batch_description=(
        "Up to 1,000 operations, each a `create` (`data` as `POST /deals` takes it, customers"
        " included) or an `upsert` by external id (`data` as `PUT"
        " /deals/by-external-id/{external_id}` takes it), applied one after another in one"
        " transaction. By default each operation stands alone: one that fails is reported in"
        " its result and the others are written. With `atomic=true` the batch is all or"
        " nothing: any failure writes nothing and answers 422 `batch_rejected` listing the"
        " invalid operations, or else the first that failed. A batch of n operations counts as"
        " ceil(n / 100) requests against the rate limits."
    ),
    batch_example=BATCH_EXAMPLE,
)


add_create_route(
    router,
    DEAL_ROUTES,
    body=DealCreate,
    example=DEAL_EXAMPLE,
    description=(
        "Creates the deal in the caller's department, unassigned, at the department's first "
        "pipeline step, and one new customer per element of `customers`, returned in request order."
    ),
    write=service.create_later_as_json,
)


add_list_route(
    router,
    DEAL_ROUTES,
    page=DealList,
    filter_model=DealFilter,
    filters={
        "step_id": (uuid.UUID | None, Query(None, description="Only deals in this step.")),
        "employee_id": (
            uuid.UUID | None,
            Query(None, description="Only deals assigned to this employee."),
        ),
        "customer_id": (
            uuid.UUID | None,
            Query(None, description="Only deals linked to this customer."),
        ),
        "updated_since": (str | None, UPDATED_SINCE),
        "external_id": (str | None, EXTERNAL_ID_FILTER),
    },
    description="The department's deals with their customers, oldest first, a page at a time.",
)


add_item_routes(router, DEAL_ROUTES)


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
        linked = service.link_customer(uow, deal_id, link)
        # Its JSON as the tenant's custom fields make it.
        return resource_response(service.RECORD.fitted(uow).as_json, linked)

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


add_sync_routes(router, DEAL_ROUTES)
