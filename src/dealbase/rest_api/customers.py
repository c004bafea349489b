from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from dealbase.edge.callers import AdmittedRoute
from dealbase.platform.customers import service
from dealbase.platform.customers.models import CustomerFields, CustomerFilter, CustomerPatch
from dealbase.platform.resources import customer_json
from dealbase.platform.validation import EMAIL_MAX_LENGTH, NO_NUL_PATTERN, SHORT_TEXT
from dealbase.rest_api.openapi import EXTERNAL_ID_FILTER, UPDATED_SINCE
from dealbase.rest_api.records import (
    SyncedRecordRoutes,
    add_create_route,
    add_item_routes,
    add_list_route,
    add_sync_routes,
)
from dealbase.rest_api.schemas import CustomerBatch, CustomerBatchResults, CustomerList, CustomerOut

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


BATCH_EXAMPLE: dict[str, Any] = {
    "operations": [
        {"op": "upsert", "external_id": "shop-customer-1042", "data": CUSTOMER_EXAMPLE},
        {
            "op": "create",
            "data": {"last_name": "Babbage", "external_id": "shop-customer-1043"},
        },
    ]
}


CUSTOMER_ROUTES = SyncedRecordRoutes(
    noun="customer",
    article="a",
    plural="customers",
    service=service.RECORD,
    as_json=customer_json,
    out=CustomerOut,
    upsert_body=CustomerFields,
    patch_body=CustomerPatch,
    batch_body=CustomerBatch,
    batch_results=CustomerBatchResults,
    patch_description=(
        "Changes the fields the body carries; `null` clears an optional field, and `last_name`"
        " cannot be cleared. With `If-Match`, only if the customer is still at that ETag."
    ),
    patch_example={"email": "ada@example.org", "note": None},
    delete_description="Deletes the customer, its activities, and its place in its deals' customers.",
    upsert_description=(
        "Creates the customer with this external id (201), or changes the fields the body"
        " gives of the one that has it (200); absent fields stay as they are. The body is what"
        " creating takes (`last_name` required), so the same request serves both. A change"
        " that changes nothing writes nothing: no new version, no event. Two clients upserting"
        " the same new external id at once make one customer. `If-Match`: only if the customer"
        " exists at that ETag; `If-None-Match: *`: only if it does not exist (or, with ETags,"
        " only if it is not at one of them)."
    ),
    upsert_example=CUSTOMER_EXAMPLE,
    batch_description=(
        "Up to 1,000 operations, each a `create` or an `upsert` by external id, applied in a"
        " few statements whatever their number. By default each operation stands alone: one"
        " that fails is reported in its result and the others are written. With"
        " `atomic=true` the batch is all or nothing: any failure writes nothing and answers"
        " 422 `batch_rejected` listing the failures. A batch of n operations counts as"
        " ceil(n / 100) requests against the rate limits."
    ),
    batch_example=BATCH_EXAMPLE,
)


add_create_route(
    router,
    CUSTOMER_ROUTES,
    body=CustomerFields,
    example=CUSTOMER_EXAMPLE,
    description=(
        "Creates a customer in the caller's department: `last_name` is required, every other"
        " field optional (`null` in the answer when left out). An `external_id` another"
        " customer of the department has is 409 `external_id_taken`."
    ),
    write=service.create_later_as_json,
)


add_list_route(
    router,
    CUSTOMER_ROUTES,
    page=CustomerList,
    filter_model=CustomerFilter,
    filters={
        # The NUL character is declared for clients and refused by the platform's PlainText
        # rule (422 invalid_character), as in a body.
        "email": (
            str | None,
            Query(
                None,
                max_length=EMAIL_MAX_LENGTH,
                description="Exact email address, in any letter case.",
                json_schema_extra={"pattern": NO_NUL_PATTERN},
            ),
        ),
        "q": (
            str | None,
            Query(
                None,
                min_length=1,
                max_length=SHORT_TEXT,
                description=(
                    "Text the last name, first name or company contains (any letter case)."
                ),
                json_schema_extra={"pattern": NO_NUL_PATTERN},
            ),
        ),
        "updated_since": (str | None, UPDATED_SINCE),
        "external_id": (str | None, EXTERNAL_ID_FILTER),
    },
)


add_item_routes(router, CUSTOMER_ROUTES)
add_sync_routes(router, CUSTOMER_ROUTES)
