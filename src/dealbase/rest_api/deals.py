from __future__ import annotations

import uuid

from fastapi import APIRouter, Depends
from starlette.responses import Response

from dealbase.platform.deals import service
from dealbase.platform.deals.models import DealCreate
from dealbase.rest_api.openapi import json_request_body, problem_responses
from dealbase.rest_api.requests import database, department_scope, json_body, parse_body
from dealbase.rest_api.responses import created, json_response
from dealbase.rest_api.schemas import DealOut
from dealbase.tenancy.database import Database
from dealbase.tenancy.scope import Scope

router = APIRouter(prefix="/deals", tags=["deals"])

DEAL_EXAMPLE = {
    "name": "Analytical engine, 2 units",
    "volume": 250000,
    "deal_origin": "trade fair",
    "note": "Wants delivery before spring.",
    "customers": [{"last_name": "Lovelace", "first_name": "Ada"}, {"last_name": "Babbage"}],
}

_LOCATION = {"Location": {"description": "Path of the new deal.", "schema": {"type": "string"}}}


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
        201: {"model": DealOut, "description": "The created deal.", "headers": _LOCATION},
        **problem_responses(400, 401, 403, 409, 413, 415, 422),
    },
    openapi_extra=json_request_body(DealCreate, DEAL_EXAMPLE),
)
def create_deal(
    scope: Scope = Depends(department_scope),
    body: bytes = Depends(json_body),
    db: Database = Depends(database),
) -> Response:
    fields = parse_body(DealCreate, body)
    with db.unit_of_work(scope) as uow:
        deal = service.create(uow, fields)
    return created(DealOut, deal, f"/deals/{deal.id}")


@router.get(
    "/{deal_id}",
    summary="Read a deal",
    response_model=None,
    responses={
        200: {"model": DealOut, "description": "The deal with its customers."},
        **problem_responses(401, 403, 404),
    },
)
def get_deal(
    deal_id: uuid.UUID,
    scope: Scope = Depends(department_scope),
    db: Database = Depends(database),
) -> Response:
    with db.unit_of_work(scope) as uow:
        deal = service.get(uow, deal_id)
    return json_response(DealOut, deal)
