from __future__ import annotations

import uuid

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from dealbase.edge.callers import department_scope
from dealbase.edge.database import database_of
from dealbase.edge.idempotency import run_once
from dealbase.edge.requests import IdempotencyKey, IfMatch, expected_version, json_body, parse_body
from dealbase.platform.activities import service
from dealbase.platform.activities.models import ActivityFields, ActivityFilter, ActivityPatch
from dealbase.platform.resources import activity_json
from dealbase.platform.validation import validated
from dealbase.rest_api.openapi import (
    CREATED_HEADERS,
    EXTERNAL_ID_FILTER,
    LIST_CURSOR,
    LIST_LIMIT,
    READ_HEADERS,
    json_request_body,
    problem_responses,
)
from dealbase.rest_api.responses import created, no_content, resource_page, resource_response
from dealbase.rest_api.schemas import ActivityList, ActivityOut
from dealbase.tenancy.database import UnitOfWork
from dealbase.tenancy.scope import Scope

router = APIRouter(prefix="/activities", tags=["activities"])

ACTIVITY_EXAMPLE = {
    "type": "call",
    "subject": "Follow-up on the quote",
    "due_at": "2026-12-01T09:00:00Z",
    "customer_id": "01a2008a-729d-7000-8ccb-38fd7605fcf5",
}


@router.post(
    "",
    status_code=201,
    summary="Create an activity",
    description=(
        "An activity about a customer of the department (`customer_id`, required), optionally"
        " about one of its deals (`deal_id`) and done by one of its employees (`employee_id`)."
    ),
    response_model=None,
    responses={
        201: {
            "model": ActivityOut,
            "description": "The created activity.",
            "headers": CREATED_HEADERS,
        },
        **problem_responses(400, 401, 403, 409, 413, 415, 422),
    },
    openapi_extra=json_request_body(ActivityFields, ACTIVITY_EXAMPLE),
)
async def create_activity(
    request: Request,
    scope: Scope = Depends(department_scope),
    body: bytes = Depends(json_body),
    idempotency_key: IdempotencyKey = None,
) -> Response:
    fields = parse_body(ActivityFields, body)

    def perform(uow: UnitOfWork) -> Response:
        activity = service.create(uow, fields)
        return created(activity_json, activity, f"/activities/{activity.id}")

    return await run_once(request, scope, idempotency_key, fields, perform)


@router.get(
    "",
    summary="List activities",
    description="The department's activities, oldest first, a page at a time.",
    response_model=None,
    responses={
        200: {"model": ActivityList, "description": "A page of activities."},
        **problem_responses(401, 403, 422),
    },
)
async def list_activities(
    request: Request,
    scope: Scope = Depends(department_scope),
    limit: int | None = LIST_LIMIT,
    cursor: str | None = LIST_CURSOR,
    customer_id: uuid.UUID | None = Query(None, description="Only activities of this customer."),
    deal_id: uuid.UUID | None = Query(None, description="Only activities of this deal."),
    external_id: str | None = EXTERNAL_ID_FILTER,
) -> Response:
    filters = validated(
        ActivityFilter,
        {"customer_id": customer_id, "deal_id": deal_id, "external_id": external_id},
    )
    page = await database_of(request).run(
        scope, lambda uow: service.list_page(uow, filters, limit, cursor)
    )
    return resource_page(activity_json, page)


@router.get(
    "/{activity_id}",
    summary="Read an activity",
    response_model=None,
    responses={
        200: {"model": ActivityOut, "description": "The activity.", "headers": READ_HEADERS},
        **problem_responses(401, 403, 404),
    },
)
async def get_activity(
    request: Request,
    activity_id: uuid.UUID,
    scope: Scope = Depends(department_scope),
) -> Response:
    activity = await database_of(request).run(scope, lambda uow: service.get(uow, activity_id))
    return resource_response(activity_json, activity)


@router.patch(
    "/{activity_id}",
    summary="Update an activity",
    description="Changes the fields the body carries; `null` clears; `type` and `customer_id` cannot be cleared.",
    response_model=None,
    responses={
        200: {
            "model": ActivityOut,
            "description": "The updated activity.",
            "headers": READ_HEADERS,
        },
        **problem_responses(400, 401, 403, 404, 412, 413, 415, 422),
    },
    openapi_extra=json_request_body(ActivityPatch, {"done_at": "2026-12-01T09:20:00Z"}),
)
async def update_activity(
    request: Request,
    activity_id: uuid.UUID,
    scope: Scope = Depends(department_scope),
    body: bytes = Depends(json_body),
    if_match: IfMatch = None,
) -> Response:
    patch = parse_body(ActivityPatch, body)
    activity = await database_of(request).run(
        scope, lambda uow: service.update(uow, activity_id, patch, expected_version(if_match))
    )
    return resource_response(activity_json, activity)


@router.delete(
    "/{activity_id}",
    status_code=204,
    summary="Delete an activity",
    response_model=None,
    responses={204: {"description": "Deleted."}, **problem_responses(401, 403, 404, 412)},
)
async def delete_activity(
    request: Request,
    activity_id: uuid.UUID,
    scope: Scope = Depends(department_scope),
    if_match: IfMatch = None,
) -> Response:
    await database_of(request).run(
        scope, lambda uow: service.delete(uow, activity_id, expected_version(if_match))
    )
    return no_content()
