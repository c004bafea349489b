from __future__ import annotations

import uuid

from fastapi import APIRouter, Request
from starlette.responses import Response

from dealbase.db.units import UnitOfWork
from dealbase.edge.callers import AdmittedRoute, caller_of
from dealbase.edge.database import database_of, webhook_addresses_of
from dealbase.edge.idempotency import run_once
from dealbase.edge.requests import IdempotencyKey, IfMatch, expected_version, json_body, parse_body
from dealbase.platform.webhooks import deliveries, service
from dealbase.platform.webhooks.models import WebhookEndpointFields, WebhookEndpointPatch
from dealbase.rest_api.openapi import (
    ACCEPTED_HEADERS,
    CREATED_HEADERS,
    LIST_CURSOR,
    LIST_LIMIT,
    READ_HEADERS,
    json_request_body,
    problem_responses,
)
from dealbase.rest_api.responses import created_as, json_response, no_content, page_response
from dealbase.rest_api.schemas import (
    WebhookDeliveryList,
    WebhookDeliveryOut,
    WebhookEndpointList,
    WebhookEndpointOut,
    WebhookEndpointWithSecretOut,
)

router = APIRouter(prefix="/webhooks", tags=["webhooks"], route_class=AdmittedRoute)

WEBHOOK_ENDPOINT_EXAMPLE = {
    "url": "https://hooks.example.com/dealbase",
    "events": ["deal.created", "deal.step_changed"],
    "description": "Pipeline board",
}
_URL_RULE = (
    " `url` must be `https` and its host a public address (a name is resolved, and every"
    " address it resolves to must be public); otherwise 422 naming `url`."
)


@router.post(
    "",
    status_code=201,
    summary="Create a webhook endpoint",
    description=(
        'Subscribes a URL to the department\'s events (`events`: event types, or `["*"]`).'
        " The answer carries the signing `secret`, shown this once." + _URL_RULE
    ),
    response_model=None,
    responses={
        201: {
            "model": WebhookEndpointWithSecretOut,
            "description": "The created endpoint, with its secret.",
            "headers": CREATED_HEADERS,
        },
        **problem_responses(400, 401, 403, 409, 413, 415, 422),
    },
    openapi_extra=json_request_body(WebhookEndpointFields, WEBHOOK_ENDPOINT_EXAMPLE),
)
async def create_webhook_endpoint(
    request: Request,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    scope = caller_of(request)
    body = await json_body(request)
    fields = parse_body(WebhookEndpointFields, body)
    checked = await service.checked(fields, webhook_addresses_of(request))

    def perform(uow: UnitOfWork) -> Response:
        endpoint = service.create(uow, checked)
        return created_as(WebhookEndpointWithSecretOut, endpoint, f"/webhooks/{endpoint.id}")

    return await run_once(request, scope, idempotency_key, fields, perform)


@router.get(
    "",
    summary="List webhook endpoints",
    description="The department's webhook endpoints, oldest first, a page at a time.",
    response_model=None,
    responses={
        200: {"model": WebhookEndpointList, "description": "A page of webhook endpoints."},
        **problem_responses(401, 403, 422),
    },
)
async def list_webhook_endpoints(
    request: Request,
    limit: int | None = LIST_LIMIT,
    cursor: str | None = LIST_CURSOR,
) -> Response:
    scope = caller_of(request)
    page = await database_of(request).run(scope, lambda uow: service.list_page(uow, limit, cursor))
    return page_response(WebhookEndpointList, page)


@router.get(
    "/{webhook_id}",
    summary="Read a webhook endpoint",
    description="The endpoint without its secret, which is shown only when it is issued.",
    response_model=None,
    responses={
        200: {
            "model": WebhookEndpointOut,
            "description": "The endpoint (without its secret).",
            "headers": READ_HEADERS,
        },
        **problem_responses(401, 403, 404),
    },
)
async def get_webhook_endpoint(
    request: Request,
    webhook_id: uuid.UUID,
) -> Response:
    scope = caller_of(request)
    endpoint = await database_of(request).run(scope, lambda uow: service.get(uow, webhook_id))
    return json_response(WebhookEndpointOut, endpoint)


@router.patch(
    "/{webhook_id}",
    summary="Update a webhook endpoint",
    description=(
        "Changes the fields the body carries; only `description` can be cleared (`null`)."
        " Setting `enabled` clears `disabled_reason`." + _URL_RULE
    ),
    response_model=None,
    responses={
        200: {
            "model": WebhookEndpointOut,
            "description": "The updated endpoint.",
            "headers": READ_HEADERS,
        },
        **problem_responses(400, 401, 403, 404, 412, 413, 415, 422),
    },
    openapi_extra=json_request_body(WebhookEndpointPatch, {"enabled": False}),
)
async def update_webhook_endpoint(
    request: Request,
    webhook_id: uuid.UUID,
    if_match: IfMatch = None,
) -> Response:
    scope = caller_of(request)
    body = await json_body(request)
    patch = parse_body(WebhookEndpointPatch, body)
    checked = await service.checked(patch, webhook_addresses_of(request))
    endpoint = await database_of(request).run(
        scope, lambda uow: service.update(uow, webhook_id, checked, expected_version(if_match))
    )
    return json_response(WebhookEndpointOut, endpoint)


@router.delete(
    "/{webhook_id}",
    status_code=204,
    summary="Delete a webhook endpoint",
    description=(
        "Deletes the endpoint with its delivery log: nothing more is sent to it. With"
        " `If-Match`, only if it is still at that ETag."
    ),
    response_model=None,
    responses={204: {"description": "Deleted."}, **problem_responses(401, 403, 404, 412)},
)
async def delete_webhook_endpoint(
    request: Request,
    webhook_id: uuid.UUID,
    if_match: IfMatch = None,
) -> Response:
    scope = caller_of(request)
    await database_of(request).run(
        scope, lambda uow: service.delete(uow, webhook_id, expected_version(if_match))
    )
    return no_content()


@router.post(
    "/{webhook_id}/rotate-secret",
    summary="Rotate a webhook endpoint's secret",
    description=(
        "Issues a new signing `secret`, shown this once. The secret it replaces keeps signing"
        " for 24 hours (until `previous_secret_expires_at`), so receivers can switch without"
        " missing a delivery; one replaced earlier stops at once."
    ),
    response_model=None,
    responses={
        200: {
            "model": WebhookEndpointWithSecretOut,
            "description": "The endpoint, with its new secret.",
            "headers": READ_HEADERS,
        },
        **problem_responses(401, 403, 404, 412),
    },
)
async def rotate_webhook_secret(
    request: Request,
    webhook_id: uuid.UUID,
    if_match: IfMatch = None,
) -> Response:
    scope = caller_of(request)
    rotated = await database_of(request).run(
        scope, lambda uow: service.rotate_secret(uow, webhook_id, expected_version(if_match))
    )
    return json_response(WebhookEndpointWithSecretOut, rotated)


@router.get(
    "/{webhook_id}/deliveries",
    summary="List a webhook endpoint's deliveries",
    description=(
        "The delivery log: each event (or test event) sent or to be sent to the endpoint, newest"
        " first, a page at a time, each with every attempt to send it, oldest first."
    ),
    response_model=None,
    responses={
        200: {"model": WebhookDeliveryList, "description": "A page of deliveries."},
        **problem_responses(401, 403, 404, 422),
    },
)
async def list_webhook_deliveries(
    request: Request,
    webhook_id: uuid.UUID,
    limit: int | None = LIST_LIMIT,
    cursor: str | None = LIST_CURSOR,
) -> Response:
    scope = caller_of(request)
    page = await database_of(request).run(
        scope, lambda uow: deliveries.list_page(uow, webhook_id, limit, cursor)
    )
    return page_response(WebhookDeliveryList, page)


_ACCEPTED = (
    " Answers at once with the delivery; a worker sends it as soon as it can (only while the"
    " endpoint is enabled)."
)


@router.post(
    "/{webhook_id}/deliveries/{delivery_id}/redeliver",
    status_code=202,
    summary="Redeliver a webhook delivery",
    description=(
        "Makes the delivery `pending` and due now, whatever its state: it is sent again with the"
        " same `webhook-id`, and its three days of retries start again." + _ACCEPTED
    ),
    response_model=None,
    responses={
        202: {
            "model": WebhookDeliveryOut,
            "description": "The delivery, pending.",
            "headers": ACCEPTED_HEADERS,
        },
        **problem_responses(401, 403, 404, 409, 422),
    },
)
async def redeliver_webhook_delivery(
    request: Request,
    webhook_id: uuid.UUID,
    delivery_id: uuid.UUID,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    scope = caller_of(request)

    def perform(uow: UnitOfWork) -> Response:
        delivery = deliveries.redeliver(uow, webhook_id, delivery_id)
        return json_response(WebhookDeliveryOut, delivery, 202)

    return await run_once(request, scope, idempotency_key, None, perform)


@router.post(
    "/{webhook_id}/test",
    status_code=202,
    summary="Send a test event to a webhook endpoint",
    description=(
        "Makes a delivery of a new `webhook.test` event, whose `data` is"
        ' `{"webhook_endpoint_id": ...}`, to this endpoint alone, whatever event types it'
        " subscribes to. The event is not in the events feed, and the delivery's `event_id` is"
        " null. Each request sends another test event (an `Idempotency-Key` makes a retry"
        " safe)." + _ACCEPTED
    ),
    response_model=None,
    responses={
        202: {
            "model": WebhookDeliveryOut,
            "description": "The test event's delivery, pending.",
            "headers": ACCEPTED_HEADERS,
        },
        **problem_responses(401, 403, 404, 409, 422),
    },
)
async def send_test_webhook(
    request: Request,
    webhook_id: uuid.UUID,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    scope = caller_of(request)

    def perform(uow: UnitOfWork) -> Response:
        return json_response(WebhookDeliveryOut, deliveries.send_test(uow, webhook_id), 202)

    return await run_once(request, scope, idempotency_key, None, perform)
