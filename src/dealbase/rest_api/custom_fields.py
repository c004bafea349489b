"""/custom-fields: the tenant's own fields on its customers, deals and activities. Any key of
the tenant reads them; only a tenant-wide key defines, changes or deletes one, since a field is
the tenant's, in every department (docs/security.md)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import ConfigDict
from starlette.responses import Response

from dealbase.edge.callers import TenantWideRoute, caller_of
from dealbase.edge.database import database_of, schema_changes_of
from dealbase.edge.requests import IfMatch, expected_version, json_body, parse_body
from dealbase.platform.custom_fields import service
from dealbase.platform.custom_fields.models import (
    CustomField,
    CustomFieldFields,
    CustomFieldPatch,
    Option,
    RecordKind,
)
from dealbase.rest_api.openapi import (
    CREATED_HEADERS,
    READ_HEADERS,
    json_request_body,
    problem_responses,
)
from dealbase.rest_api.responses import created_as, json_response, no_content
from dealbase.rest_api.schemas import WireModel, fields_from

router = APIRouter(prefix="/custom-fields", tags=["custom fields"], route_class=TenantWideRoute)

CUSTOM_FIELD_EXAMPLE = {
    "record": "customer",
    "name": "contract_number",
    "label": "Contract number",
    "type": "text",
    "max_length": 40,
    "unique": True,
}
_EXAMPLE_OUT: dict[str, Any] = {
    "id": "01a2008c-1e00-7000-8b1c-2a3b4c5d6e7f",
    **CUSTOM_FIELD_EXAMPLE,
    "options": None,
    "required": False,
    "filterable": False,
    "archived": False,
    "created_at": "2026-12-04T09:30:00.000000Z",
    "updated_at": "2026-12-04T09:30:00.000000Z",
}


@fields_from(Option)
class OptionOut(WireModel):
    """A select's option: records hold its ``id``, which never changes."""


@fields_from(CustomField, hidden={"version"}, nested={"options": list[OptionOut] | None})
class CustomFieldOut(WireModel):
    """A custom field. Records carry its values under ``custom_fields``, by its ``name``."""

    model_config = ConfigDict(json_schema_extra={"examples": [_EXAMPLE_OUT]})


class CustomFieldList(WireModel):
    data: list[CustomFieldOut]


@router.post(
    "",
    status_code=201,
    summary="Define a custom field",
    description=(
        "Adds a field to every customer, deal or activity (`record`) of the tenant: a column of"
        " its own, indexed when `unique` or `filterable`. A tenant-wide key only."
    ),
    response_model=None,
    responses={
        201: {
            "model": CustomFieldOut,
            "description": "The new field.",
            "headers": CREATED_HEADERS,
        },
        **problem_responses(400, 401, 403, 409, 413, 415, 422, 503),
    },
    openapi_extra=json_request_body(CustomFieldFields, CUSTOM_FIELD_EXAMPLE),
)
async def define_custom_field(request: Request) -> Response:
    scope = caller_of(request)
    fields = parse_body(CustomFieldFields, await json_body(request))
    field = await service.define(schema_changes_of(request), scope, fields)
    return created_as(CustomFieldOut, field, f"/custom-fields/{field.id}")


@router.get(
    "",
    summary="List custom fields",
    description="The tenant's custom fields, of one record kind or of all, oldest first.",
    response_model=None,
    responses={
        200: {"model": CustomFieldList, "description": "Every custom field."},
        **problem_responses(401, 403, 422),
    },
)
async def list_custom_fields(
    request: Request,
    record: Annotated[
        RecordKind | None, Query(description="Only the fields of this record kind.")
    ] = None,
) -> Response:
    scope = caller_of(request)
    found = await database_of(request).run(scope, lambda uow: service.list_fields(uow, record))
    return json_response(CustomFieldList, {"data": found})


@router.get(
    "/{field_id}",
    summary="Read a custom field",
    description="The field's definition, its version as the `ETag`.",
    response_model=None,
    responses={
        200: {"model": CustomFieldOut, "description": "The field.", "headers": READ_HEADERS},
        **problem_responses(401, 403, 404),
    },
)
async def get_custom_field(request: Request, field_id: uuid.UUID) -> Response:
    scope = caller_of(request)
    field = await database_of(request).run(scope, lambda uow: service.get(uow, field_id))
    return json_response(CustomFieldOut, field)


@router.patch(
    "/{field_id}",
    summary="Change or archive a custom field",
    description=(
        "Changes what the body carries. No change loses a value: `max_length` only grows, a"
        " type only widens (email or url to text, integer to decimal), options are renamed or"
        " archived but never removed, and `archived` hides the field from writes while keeping"
        " its values. Making a field `unique` fails with 409 `values_not_unique` while records"
        " of a department share a value. A tenant-wide key only."
    ),
    response_model=None,
    responses={
        200: {"model": CustomFieldOut, "description": "The field.", "headers": READ_HEADERS},
        **problem_responses(400, 401, 403, 404, 409, 412, 413, 415, 422, 503),
    },
    openapi_extra=json_request_body(CustomFieldPatch, {"label": "Contract no."}),
)
async def change_custom_field(
    request: Request, field_id: uuid.UUID, if_match: IfMatch = None
) -> Response:
    scope = caller_of(request)
    patch = parse_body(CustomFieldPatch, await json_body(request))
    given: dict[str, Any] = {name: getattr(patch, name) for name in patch.model_fields_set}
    field = await service.change(
        schema_changes_of(request), scope, field_id, given, expected_version(if_match)
    )
    return json_response(CustomFieldOut, field)


@router.delete(
    "/{field_id}",
    status_code=204,
    summary="Delete a custom field and its values",
    description=(
        "Drops an archived field with every record's value of it; 409 `field_not_archived`"
        " for a field not archived first. A tenant-wide key only."
    ),
    response_model=None,
    responses={204: {"description": "Deleted."}, **problem_responses(401, 403, 404, 409, 412)},
)
async def delete_custom_field(
    request: Request, field_id: uuid.UUID, if_match: IfMatch = None
) -> Response:
    scope = caller_of(request)
    await service.delete(schema_changes_of(request), scope, field_id, expected_version(if_match))
    return no_content()
