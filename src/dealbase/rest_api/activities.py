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
from dealbase.platform.activities import service
from dealbase.platform.activities.models import ActivityFields, ActivityFilter, ActivityPatch
from dealbase.platform.batches.models import Batch
from dealbase.platform.resources import activity_json
from dealbase.platform.validation import validated
from dealbase.rest_api.openapi import (
    CREATED_HEADERS,
    EXTERNAL_ID_FILTER,
    EXTERNAL_ID_PATH,
    LIST_CURSOR,
    LIST_LIMIT,
    READ_HEADERS,
    json_request_body,
    problem_responses,
)
from dealbase.rest_api.responses import (
    batch_response,
    created,
    json_text_page,
    json_text_response,
    no_content,
    resource_response,
)
from dealbase.rest_api.schemas import (
    ActivityBatch,
    ActivityBatchResults,
    ActivityList,
    ActivityOut,
)
from dealbase.tenancy.database.connections import UnitOfWork

router = APIRouter(prefix="/activities", tags=["activities"], route_class=AdmittedRoute)

ACTIVITY_EXAMPLE: dict[str, Any] = {
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
    idempotency_key: IdempotencyKey = None,
) -> Response:
    scope = caller_of(request)
    body = await json_body(request)
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
    limit: int | None = LIST_LIMIT,
    cursor: str | None = LIST_CURSOR,
    customer_id: uuid.UUID | None = Query(None, description="Only activities of this customer."),
    deal_id: uuid.UUID | None = Query(None, description="Only activities of this deal."),
    external_id: str | None = EXTERNAL_ID_FILTER,
) -> Response:
    scope = caller_of(request)
    filters = validated(
        ActivityFilter,
        {"customer_id": customer_id, "deal_id": deal_id, "external_id": external_id},
    )
    page = await database_of(request).read(
        scope, lambda uow: service.list_page_as_json(uow, filters, limit, cursor)
    )
    return json_text_page(page)


@router.get(
    "/{activity_id}",
    summary="Read an activity",
    description="The activity, its version in the `ETag`.",
    response_model=None,
    responses={
        200: {"model": ActivityOut, "description": "The activity.", "headers": READ_HEADERS},
        **problem_responses(401, 403, 404),
    },
)
async def get_activity(
    request: Request,
    activity_id: uuid.UUID,
) -> Response:
    scope = caller_of(request)
    version, text = await database_of(request).read(
        scope, lambda uow: service.get_as_json(uow, activity_id)
    )
    return json_text_response(version, text)


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
        **problem_responses(400, 401, 403, 404, 409, 412, 413, 415, 422),
    },
    openapi_extra=json_request_body(ActivityPatch, {"done_at": "2026-12-01T09:20:00Z"}),
)
async def update_activity(
    request: Request,
    activity_id: uuid.UUID,
    if_match: IfMatch = None,
) -> Response:
    scope = caller_of(request)
    body = await json_body(request)
    patch = parse_body(ActivityPatch, body)
    activity = await database_of(request).run(
        scope, lambda uow: service.update(uow, activity_id, patch, expected_version(if_match))
    )
    return resource_response(activity_json, activity)


@router.delete(
    "/{activity_id}",
    status_code=204,
    summary="Delete an activity",
    description="Deletes the activity. With `If-Match`, only if it is still at that ETag.",
    response_model=None,
    responses={204: {"description": "Deleted."}, **problem_responses(401, 403, 404, 412)},
)
async def delete_activity(
    request: Request,
    activity_id: uuid.UUID,
    if_match: IfMatch = None,
) -> Response:
    scope = caller_of(request)
    await database_of(request).run(
        scope, lambda uow: service.delete(uow, activity_id, expected_version(if_match))
    )
    return no_content()


@router.put(
    "/by-external-id/{external_id}",
    summary="Create or update an activity by external id",
    description=(
        "Creates the activity with this external id (201), or changes the fields the body gives"
        " of the one that has it (200); absent fields stay as they are. The body is what"
        " creating takes (`type` and `customer_id` required), so the same request serves both;"
        " its `customer_id`, `deal_id` and `employee_id` must be of the department, as on"
        " create. A change that changes nothing writes nothing: no new version, no event. Two"
        " clients upserting the same new external id at once make one activity. `If-Match`:"
        " only if the activity exists at that ETag; `If-None-Match: *`: only if it does not"
        " exist (or, with ETags, only if it is not at one of them)."
    ),
    response_model=None,
    responses={
        200: {
            "model": ActivityOut,
            "description": "The activity existed: as it now is.",
            "headers": READ_HEADERS,
        },
        201: {
            "model": ActivityOut,
            "description": "The created activity.",
            "headers": CREATED_HEADERS,
        },
        **problem_responses(400, 401, 403, 409, 412, 413, 415, 422),
    },
    openapi_extra=json_request_body(ActivityFields, ACTIVITY_EXAMPLE),
)
async def upsert_activity(
    request: Request,
    external_id: str = EXTERNAL_ID_PATH,
    if_match: IfMatch = None,
    if_none_match: IfNoneMatch = None,
) -> Response:
    scope = caller_of(request)
    body = await json_body(request)
    fields = parse_body(ActivityFields, body)
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
    activity = result.record
    assert activity is not None, "a successful upsert has its activity"
    if result.outcome == "created":
        return created(activity_json, activity, f"/activities/{activity.id}")
    return resource_response(activity_json, activity)


BATCH_EXAMPLE: dict[str, Any] = {
    "operations": [
        {"op": "upsert", "external_id": "crm-call-77", "data": ACTIVITY_EXAMPLE},
        {
            "op": "create",
            "data": {**ACTIVITY_EXAMPLE, "type": "email", "external_id": "crm-mail-78"},
        },
    ]
}


@router.post(
    "/batch",
    summary="Create and upsert activities in one request",
    description=(
        "Up to 1,000 operations, each a `create` or an `upsert` by external id (`data` as"
        " `POST /activities` takes it for both), applied one after another in one transaction."
        " By default each operation stands alone: one that fails is reported in its result and"
        " the others are written. With `atomic=true` the batch is all or nothing: any failure"
        " writes nothing and answers 422 `batch_rejected` listing the invalid operations, or"
        " else the first that failed. A batch of n operations counts as ceil(n / 100) requests"
        " against the rate limits."
    ),
    response_model=None,
    responses={
        200: {
            "model": ActivityBatchResults,
            "description": "One result per operation, in order.",
        },
        **problem_responses(400, 401, 403, 409, 413, 415, 422),
    },
    openapi_extra=json_request_body(ActivityBatch, BATCH_EXAMPLE),
)
async def batch_activities(
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
        return batch_response(request, activity_json, results)

    return await run_once(request, scope, idempotency_key, batch, perform)
