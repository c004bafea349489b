"""GET /openapi.json under the integration API: the caller's tenant's own OpenAPI document.

It is the public document (``/openapi.json``, ``rest_api.openapi``) with every record's
``custom_fields`` typed by the tenant's live custom fields: one property per field, of its type,
and no other (``additionalProperties: false``), so that the clients integrators generate from it
type the values they send and read. Any key of the tenant reads it, as it reads the fields'
definitions (GET /custom-fields).

Which component schemas carry a record's ``custom_fields`` is read off the public document: a
schema that request bodies use (``openapi.request_body_roles``) is a create's or an upsert's
(required fields required) or a PATCH's (nothing required, a required field never null); any
other is a response's, which always shows every live field. The record is the schema's name's
(``CustomerOut``, ``ActivityPatch``...).

Each schema's document is kept while the tenant's live fields are those it was made of: a
request reads the fields (one statement) and is answered from the kept text when they are the
same, so a change of the fields shows in the next request.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal

import orjson
from anyio import to_thread
from fastapi import APIRouter, FastAPI, Request
from pydantic import TypeAdapter
from starlette.responses import Response

from dealbase.db.units import UnitOfWork
from dealbase.edge.callers import TenantWideRoute, caller_of
from dealbase.edge.database import database_of
from dealbase.platform.custom_fields import service
from dealbase.platform.custom_fields.definitions import LiveFields, live_fields
from dealbase.platform.custom_fields.models import CustomField, FieldType, RecordKind
from dealbase.platform.custom_fields.values import DECIMAL_DIGITS, DECIMAL_PLACES, value_type
from dealbase.platform.shapes import CUSTOM_FIELDS
from dealbase.rest_api.openapi import problem_responses, request_body_roles

router = APIRouter(tags=["custom fields"], route_class=TenantWideRoute)

# The documents kept at most (one a schema, each as large as the public one); past that the
# cache starts again.
_DOCUMENTS_KEPT = 64
_STATE = "tenant_documents"

_NULL = {"type": "null"}
# A schema name's record: the longest prefix first ("CustomerOut", "DealPatch").
_RECORDS: tuple[tuple[str, RecordKind], ...] = (
    ("Customer", "customer"),
    ("Activity", "activity"),
    ("Deal", "deal"),
)
_WHOLE_DIGITS = DECIMAL_DIGITS - DECIMAL_PLACES
DECIMAL_PATTERN = rf"^-?[0-9]{{1,{_WHOLE_DIGITS}}}(\.[0-9]{{1,{DECIMAL_PLACES}}})?$"

# What a schema with custom_fields is to its record: a create's or an upsert's body, a change's
# (a PATCH), or a response.
Role = Literal["create", "change", "response"]
# What a required field's value is, by the role of the schema it is in.
_REQUIRED_WORDS: Mapping[Role, str] = {
    "create": "Required: a create or an upsert gives it, never null.",
    "change": "Required of the record: it may be left out, never null.",
    "response": "Required of new records: one older than the rule may show null.",
}
# What a value of each type is, for a field's description.
_TYPE_WORDS: Mapping[FieldType, str] = {
    FieldType.EMAIL: "an email address (name@domain), at most 320 characters",
    FieldType.URL: "a URL, at most 2,048 characters",
    FieldType.INTEGER: "a whole number (a signed 64-bit integer)",
    FieldType.DECIMAL: (
        f'a decimal number as a JSON string (`"1234.50"`), up to {_WHOLE_DIGITS} digits before'
        f" the point and {DECIMAL_PLACES} after; a JSON number is accepted too, and read as its"
        " decimal. Responses always show a string"
    ),
    FieldType.BOOLEAN: "true or false",
    FieldType.DATE: "a calendar date, YYYY-MM-DD",
    FieldType.TIMESTAMP: (
        "an RFC 3339 date-time with its UTC offset; responses show it in UTC with six"
        " fractional digits and `Z`"
    ),
}


@router.get(
    "/openapi.json",
    summary="Read the tenant's own OpenAPI document",
    description=(
        "The public document (`/openapi.json`) with the `custom_fields` of customers, deals and"
        " activities typed by the tenant's live custom fields (archived ones left out): one"
        " property per field, of its type, and no other. Generate a client from it to have the"
        " fields typed; fetch it again after a change of the fields (GET /custom-fields). Any"
        " key of the tenant reads it."
    ),
    response_model=None,
    responses={
        200: {
            "description": "The tenant's OpenAPI 3.1 document.",
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "additionalProperties": True,
                        "description": "An OpenAPI 3.1 document.",
                    }
                }
            },
        },
        **problem_responses(401, 403),
    },
)
async def get_tenant_openapi_document(request: Request) -> Response:
    scope = caller_of(request)
    live = await database_of(request).read(scope, _live_fields)
    documents: TenantDocuments = getattr(request.app.state, _STATE)
    text = await documents.of(scope.schema, scope.tenant_id, live)
    return Response(text, media_type="application/json")


def _live_fields(uow: UnitOfWork) -> LiveFields:
    return live_fields(service.list_fields(uow, None))


class TenantDocuments:
    """Each schema's document as JSON text, with the live fields it was made of."""

    def __init__(self, public: Callable[[], dict[str, Any]]) -> None:
        self._public = public
        self._by_schema: dict[str, tuple[object, bytes]] = {}

    async def of(self, schema: str, tenant_id: uuid.UUID, live: LiveFields) -> bytes:
        key = (tenant_id, *(live.get(record, ()) for _, record in _RECORDS))
        kept = self._by_schema.get(schema)
        if kept is not None and kept[0] == key:
            return kept[1]
        public = self._public()
        # Off the event loop: the document is half a megabyte of JSON to copy and write.
        text = await to_thread.run_sync(
            lambda: orjson.dumps(tenant_document(public, tenant_id, live))
        )
        if len(self._by_schema) >= _DOCUMENTS_KEPT:
            self._by_schema.clear()
        self._by_schema[schema] = (key, text)
        return text


def install_tenant_documents(app: FastAPI) -> None:
    """Where the route finds the documents it has made (``app.state``)."""
    setattr(app.state, _STATE, TenantDocuments(app.openapi))


def tenant_document(
    public: Mapping[str, Any], tenant_id: uuid.UUID, live: LiveFields
) -> dict[str, Any]:
    """The public document (left as it is) with ``custom_fields`` typed by ``live``, and the
    examples fitted to the types."""
    document: dict[str, Any] = orjson.loads(orjson.dumps(public))
    info = document["info"]
    info["title"] = f"{info['title']}: tenant {tenant_id}"
    info["description"] = (
        f"{info['description'].rstrip()}\n\nThis is the tenant's own document: `custom_fields`"
        " of each record is typed by the tenant's live custom fields as they were when it was"
        " read (GET /custom-fields). Read it again after a change of the fields."
    )
    schemas: dict[str, Any] = document["components"]["schemas"]
    referenced = _references(document)
    roles = request_body_roles(document["paths"], schemas)
    if live.get("customer"):
        _deals_customers_without_custom_fields(schemas)
    for name, schema in schemas.items():
        if CUSTOM_FIELDS in schema.get("properties", {}):
            _type_record(name, schema, roles.get(name), live)
    _fit_examples(document, live)
    # What only the free objects referred to (JsonValue) would be left unused.
    for name in referenced - _references(document):
        del schemas[name]
    return document


# A deal's customers as it shows them: without their custom fields (docs/api.md, "Records carry
# them": read the customer).
DEAL_CUSTOMER = "DealCustomerOut"


def _deals_customers_without_custom_fields(schemas: dict[str, Any]) -> None:
    """A deal's ``customers``, of a schema of their own: the customer's without
    ``custom_fields``, which a deal does not show."""
    customer: dict[str, Any] = orjson.loads(orjson.dumps(schemas["CustomerOut"]))
    del customer["properties"][CUSTOM_FIELDS]
    customer["title"] = DEAL_CUSTOMER
    customer["description"] = (
        "A customer as a deal shows it: without its custom fields (read the customer for them)."
    )
    schemas[DEAL_CUSTOMER] = customer
    schemas["DealOut"]["properties"]["customers"]["items"] = {"$ref": _ref(DEAL_CUSTOMER)}


def _type_record(
    name: str, schema: dict[str, Any], role: set[str] | None, live: LiveFields
) -> None:
    """``custom_fields`` of the component schema ``name``, as the bodies it is part of (its
    ``role``: what they do, none for a response's) take it."""
    record = record_of(name)
    fields = live.get(record, ())
    if role is None:
        _type_response(schema, record, fields)
    elif role == {"update"}:
        _type_request(schema, record, fields, change=True)
    elif "update" not in role:
        _type_request(schema, record, fields, change=False)
    else:
        raise ValueError(f"{name}: custom_fields of a body that creates and updates: {role}")


def _references(node: object) -> set[str]:
    """The component schemas ``node`` refers to."""
    if isinstance(node, list):
        return set().union(*map(_references, node))
    if not isinstance(node, dict):
        return set()
    found = set().union(*map(_references, node.values()))
    reference = node.get("$ref")
    if isinstance(reference, str):
        found.add(reference.rsplit("/", 1)[1])
    return found


def record_of(schema_name: str) -> RecordKind:
    record = record_of_or_none(schema_name)
    if record is None:
        raise ValueError(f"{schema_name} has custom_fields, but no record kind is named by it")
    return record


def record_of_or_none(schema_name: str) -> RecordKind | None:
    return next((record for prefix, record in _RECORDS if schema_name.startswith(prefix)), None)


def _ref(name: str) -> str:
    return f"#/components/schemas/{name}"


def _type_response(
    schema: dict[str, Any], record: RecordKind, fields: tuple[CustomField, ...]
) -> None:
    """A record as responses show it: without fields of its kind, no ``custom_fields`` key;
    with, ``custom_fields`` always, every live field in it, its value or null."""
    properties = schema["properties"]
    if not fields:
        del properties[CUSTOM_FIELDS]
        return
    properties[CUSTOM_FIELDS] = {
        **_values_object(fields, required=[field.name for field in fields], role="response"),
        "title": "Custom Fields",
        "description": f"The tenant's custom fields of the {record}: every live field by its"
        " name, its value or null.",
    }
    schema["required"] = [*schema.get("required", []), CUSTOM_FIELDS]


def _type_request(
    schema: dict[str, Any], record: RecordKind, fields: tuple[CustomField, ...], *, change: bool
) -> None:
    """A body's ``custom_fields``: on a create or an upsert, the required fields given (and then
    ``custom_fields`` too), not null; on a change (``change``), any field may be left out, and a
    required one is never null. A record kind without fields takes ``{}`` or null alone."""
    properties = schema["properties"]
    public = properties[CUSTOM_FIELDS]
    # The public description's first sentence says the object is free; the rest what leaving it
    # out means, which stays true.
    meaning = public.get("description", "").partition(". ")[2]
    required = [] if change else [field.name for field in fields if field.required]
    role: Role = "change" if change else "create"
    values = _values_object(fields, required=required, role=role)
    intro = (
        f"The tenant's custom fields of the {record}, by name, each of its type."
        if fields
        else f"The tenant has no custom fields of the {record}: only `{{}}` (or null)."
    )
    if required:
        properties[CUSTOM_FIELDS] = {**values, "title": "Custom Fields", "description": intro}
        schema["required"] = [*schema.get("required", []), CUSTOM_FIELDS]
        return
    properties[CUSTOM_FIELDS] = {
        "anyOf": [values, _NULL],
        "title": "Custom Fields",
        "description": f"{intro} {meaning}".strip(),
    }


def _values_object(
    fields: tuple[CustomField, ...], *, required: list[str], role: Role
) -> dict[str, Any]:
    """``custom_fields``' object in a schema of ``role`` (``_REQUIRED_WORDS``'): a response's
    values are each null or of its type, a body's a required field's never null."""
    properties = {
        field.name: _field_schema(
            field, nullable=role == "response" or not field.required, role=role
        )
        for field in fields
    }
    typed: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
    }
    if required:
        typed["required"] = required
    return typed


def _field_schema(field: CustomField, *, nullable: bool, role: Role) -> dict[str, Any]:
    words = _describe(field)
    if field.required:
        words += f" {_REQUIRED_WORDS[role]}"
    value = value_schema(field)
    if nullable:
        return {"anyOf": [value, _NULL], "title": field.label, "description": words}
    return {**value, "title": field.label, "description": words}


def value_schema(field: CustomField) -> dict[str, Any]:
    """The JSON Schema of a value of ``field``, null aside: the rules ``values.value_type``
    judges it by, a select's as the enum of its live options' ids."""
    if field.type is FieldType.DECIMAL:
        return {"type": "string", "pattern": DECIMAL_PATTERN}
    if field.type in (FieldType.SINGLE_SELECT, FieldType.MULTI_SELECT):
        ids = [str(option.id) for option in field.options or () if not option.archived]
        # An enum lists at least one value: a select without live options takes none (null
        # aside), and a multiple one only [].
        one: dict[str, Any] = {"type": "string", "enum": ids} if ids else {"not": {}}
        if field.type is FieldType.SINGLE_SELECT:
            return one
        return {"type": "array", "items": one, "uniqueItems": True, "maxItems": len(ids)}
    schema: dict[str, Any] = TypeAdapter(value_type(field)).json_schema()
    return schema


def _describe(field: CustomField) -> str:
    if field.type is FieldType.TEXT:
        return f"{field.label}: text of at most {field.max_length} characters."
    if field.type in (FieldType.SINGLE_SELECT, FieldType.MULTI_SELECT):
        options = ", ".join(
            f"`{option.id}` ({option.label})"
            for option in field.options or ()
            if not option.archived
        )
        which = "the id of one" if field.type is FieldType.SINGLE_SELECT else "ids, each once,"
        return f"{field.label}: {which} of its options: {options or 'none is live'}."
    return f"{field.label}: {_TYPE_WORDS[field.type]}."


def _fit_examples(document: dict[str, Any], live: LiveFields) -> None:
    """The examples of the component schemas and of the request bodies, each record's
    ``custom_fields`` given what its typed schema requires (a response: every live field; a
    create's: the required ones), each field a value of its type."""
    schemas: dict[str, Any] = document["components"]["schemas"]
    fit = _ExampleFitter(schemas, live)
    for name, schema in schemas.items():
        for example in schema.get("examples", []):
            fit(example, {"$ref": _ref(name)})
    for operations in document["paths"].values():
        for operation in operations.values():
            for media in operation.get("requestBody", {}).get("content", {}).values():
                if "example" in media:
                    fit(media["example"], media["schema"])


class _ExampleFitter:
    def __init__(self, schemas: Mapping[str, Any], live: LiveFields) -> None:
        self._schemas = schemas
        self._live = live

    def __call__(self, example: object, schema: Mapping[str, Any]) -> None:
        """Fits ``example``, a value of ``schema``, and every value in it."""
        reference = schema.get("$ref")
        if isinstance(reference, str):
            name = reference.rsplit("/", 1)[1]
            schema = self._schemas[name]
            if isinstance(example, dict) and CUSTOM_FIELDS in schema.get("properties", {}):
                self._fit_record(example, schema, live=self._live.get(record_of(name), ()))
            elif isinstance(example, dict) and record_of_or_none(name) is not None:
                example.pop(CUSTOM_FIELDS, None)
        for branch in _branches(schema, example):
            self(example, branch)
        if isinstance(example, list):
            for item in example:
                self(item, schema.get("items", {}))
        elif isinstance(example, dict):
            properties = schema.get("properties", {})
            for key, value in example.items():
                if key in properties:
                    self(value, properties[key])

    @staticmethod
    def _fit_record(
        example: dict[str, Any], schema: Mapping[str, Any], live: tuple[CustomField, ...]
    ) -> None:
        if CUSTOM_FIELDS not in schema.get("required", []) and CUSTOM_FIELDS not in example:
            return
        typed = schema["properties"][CUSTOM_FIELDS]
        (values,) = [branch for branch in typed.get("anyOf", [typed]) if branch != _NULL]
        wanted = values.get("required", [])
        example[CUSTOM_FIELDS] = {
            field.name: example_value(field) for field in live if field.name in wanted
        }


def _branches(schema: Mapping[str, Any], example: object) -> list[Mapping[str, Any]]:
    """The schemas ``example`` is also a value of: each of an ``anyOf`` or an ``allOf``, and the
    one of a ``oneOf`` its discriminator names."""
    branches: list[Mapping[str, Any]] = [*schema.get("anyOf", []), *schema.get("allOf", [])]
    discriminator = schema.get("discriminator")
    if discriminator is not None and isinstance(example, dict):
        chosen = discriminator["mapping"].get(example.get(discriminator["propertyName"]))
        branches += [{"$ref": chosen}] if chosen else []
    else:
        branches += schema.get("oneOf", [])
    return branches


_EXAMPLES: Mapping[FieldType, object] = {
    FieldType.TEXT: "Text",
    FieldType.EMAIL: "ada@example.com",
    FieldType.URL: "https://example.com/",
    FieldType.INTEGER: 12,
    FieldType.DECIMAL: "1234.50",
    FieldType.BOOLEAN: True,
    FieldType.DATE: "2027-06-30",
    FieldType.TIMESTAMP: "2026-12-04T09:30:00.000000Z",
}


def example_value(field: CustomField) -> object:
    """A value of ``field`` as a response shows it, for the document's examples."""
    if field.type in (FieldType.SINGLE_SELECT, FieldType.MULTI_SELECT):
        ids = [str(option.id) for option in field.options or () if not option.archived]
        if field.type is FieldType.SINGLE_SELECT:
            return ids[0] if ids else None
        return ids[:1]
    if field.type is FieldType.TEXT and field.max_length is not None:
        return str(_EXAMPLES[field.type])[: field.max_length]
    return _EXAMPLES[field.type]
