from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Depends
from starlette.responses import Response

from dealbase.platform.customers import service
from dealbase.platform.customers.models import CustomerFields
from dealbase.rest_api.openapi import json_request_body, problem_responses
from dealbase.rest_api.requests import database, department_scope, json_body, parse_body
from dealbase.rest_api.responses import created, json_response
from dealbase.rest_api.schemas import CustomerOut
from dealbase.tenancy.database import Database
from dealbase.tenancy.scope import Scope

router = APIRouter(prefix="/customers", tags=["customers"])

CUSTOMER_EXAMPLE: dict[str, Any] = {
    "last_name": "Lovelace",
    "first_name": "Ada",
    "company": "Analytical Engines Ltd",
    "email": "ada@example.com",
    "phone_1": "+44 20 7946 0000",
    "phone_1_label": "office",
    "city": "London",
    "country": "GB",
    "birthday": "1815-12-10",
    "contact_origin": "website",
}

_LOCATION = {"Location": {"description": "Path of the new customer.", "schema": {"type": "string"}}}


@router.post(
    "",
    status_code=201,
    summary="Create a customer",
    response_model=None,
    responses={
        201: {"model": CustomerOut, "description": "The created customer.", "headers": _LOCATION},
        **problem_responses(400, 401, 403, 413, 415, 422),
    },
    openapi_extra=json_request_body(CustomerFields, {**CUSTOMER_EXAMPLE, "birthday": "1985-12-10"}),
)
def create_customer(
    scope: Scope = Depends(department_scope),
    body: bytes = Depends(json_body),
    db: Database = Depends(database),
) -> Response:
    fields = parse_body(CustomerFields, body)
    with db.unit_of_work(scope) as uow:
        customer = service.create(uow, fields)
    return created(CustomerOut, customer, f"/customers/{customer.id}")


@router.get(
    "/{customer_id}",
    summary="Read a customer",
    response_model=None,
    responses={
        200: {"model": CustomerOut, "description": "The customer."},
        **problem_responses(401, 403, 404),
    },
)
def get_customer(
    customer_id: uuid.UUID,
    scope: Scope = Depends(department_scope),
    db: Database = Depends(database),
) -> Response:
    with db.unit_of_work(scope) as uow:
        customer = service.get(uow, customer_id)
    return json_response(CustomerOut, customer)
