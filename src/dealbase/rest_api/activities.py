from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Query

from dealbase.edge.callers import AdmittedRoute
from dealbase.platform.activities import service
from dealbase.platform.activities.models import ActivityFields, ActivityFilter, ActivityPatch
from dealbase.platform.resources import activity_json
from dealbase.rest_api.openapi import EXTERNAL_ID_FILTER
from dealbase.rest_api.records import (
    SyncedRecordRoutes,
    add_create_route,
    add_item_routes,
    add_list_route,
    add_sync_routes,
)
from dealbase.rest_api.schemas import ActivityBatch, ActivityBatchResults, ActivityList, ActivityOut

router = APIRouter(prefix="/activities", tags=["activities"], route_class=AdmittedRoute)

ACTIVITY_EXAMPLE: dict[str, Any] = {
    "type": "call",
    "subject": "Follow-up on the quote",
    "due_at": "2026-12-01T09:00:00Z",
    "customer_id": "01a2008a-729d-7000-8ccb-38fd7605fcf5",
}


BATCH_EXAMPLE: dict[str, Any] = {
    "operations": [
        {"op": "upsert", "external_id": "crm-call-77", "data": ACTIVITY_EXAMPLE},
        {
            "op": "create",
            "data": {**ACTIVITY_EXAMPLE, "type": "email", "external_id": "crm-mail-78"},
        },
    ]
}


ACTIVITY_ROUTES = SyncedRecordRoutes(
    noun="activity",
    article="an",
    plural="activities",
    service=service.RECORD,
    as_json=activity_json,
    out=ActivityOut,
    upsert_body=ActivityFields,
    patch_body=ActivityPatch,
    batch_body=ActivityBatch,
    batch_results=ActivityBatchResults,
    patch_description="Changes the fields the body carries; `null` clears; `type` and `customer_id` cannot be cleared.",
    patch_example={"done_at": "2026-12-01T09:20:00Z"},
    delete_description="Deletes the activity. With `If-Match`, only if it is still at that ETag.",
    upsert_description=(
        "Creates the activity with this external id (201), or changes the fields the body gives"
        " of the one that has it (200); absent fields stay as they are. The body is what"
        " creating takes (`type` and `customer_id` required), so the same request serves both;"
        " its `customer_id`, `deal_id` and `employee_id` must be of the department, as on"
        " create. A change that changes nothing writes nothing: no new version, no event. Two"
        " clients upserting the same new external id at once make one activity. `If-Match`:"
        " only if the activity exists at that ETag; `If-None-Match: *`: only if it does not"
        " exist (or, with ETags, only if it is not at one of them)."
    ),
    upsert_example=ACTIVITY_EXAMPLE,
    batch_description=(
        "Up to 1,000 operations, each a `create` or an `upsert` by external id (`data` as"
        " `POST /activities` takes it for both), applied one after another in one transaction."
        " By default each operation stands alone: one that fails is reported in its result and"
        " the others are written. With `atomic=true` the batch is all or nothing: any failure"
        " writes nothing and answers 422 `batch_rejected` listing the invalid operations, or"
        " else the first that failed. A batch of n operations counts as ceil(n / 100) requests"
        " against the rate limits."
    ),
    batch_example=BATCH_EXAMPLE,
)


add_create_route(
    router,
    ACTIVITY_ROUTES,
    body=ActivityFields,
    example=ACTIVITY_EXAMPLE,
    description=(
        "An activity about a customer of the department (`customer_id`, required), optionally"
        " about one of its deals (`deal_id`) and done by one of its employees (`employee_id`)."
    ),
    write=service.create,
)


add_list_route(
    router,
    ACTIVITY_ROUTES,
    page=ActivityList,
    filter_model=ActivityFilter,
    filters={
        "customer_id": (
            uuid.UUID | None,
            Query(None, description="Only activities of this customer."),
        ),
        "deal_id": (uuid.UUID | None, Query(None, description="Only activities of this deal.")),
        "external_id": (str | None, EXTERNAL_ID_FILTER),
    },
)


add_item_routes(router, ACTIVITY_ROUTES)
add_sync_routes(router, ACTIVITY_ROUTES)
