"""The routes every synced record has (customers, deals, activities), made from one description
of the record: create (``add_create_route``, given what the record's create writes), the list
(``add_list_route``, given its filters), read, update and delete by id (``add_item_routes``),
and upsert by external id and the batch (``add_sync_routes``). Each route is written once here; a record's router adds any route of its own (a deal's customers) between
the calls, where its place in the OpenAPI document is.

A route's path parameter keeps the record's name (``customer_id``, ``deal_id``...), as clients
and the OpenAPI document know it: the endpoint is given the signature FastAPI reads.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel
from starlette.responses import Response

from dealbase.db.units import AfterCommit, UnitOfWork
from dealbase.edge.callers import caller_of, charge_batch
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
from dealbase.platform.batches.models import Batch, Result
from dealbase.platform.custom_fields.filters import PREFIX as CUSTOM_FILTERS_PREFIX
from dealbase.platform.record_writes import Owned
from dealbase.platform.records import SyncedRecord
from dealbase.platform.resources import JsonObject
from dealbase.platform.validation import validated
from dealbase.rest_api.openapi import (
    CREATED_HEADERS,
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
    created_from_json_text,
    json_text_page,
    json_text_response,
    no_content,
    resource_response,
)

Record = TypeVar("Record", bound=Owned)
Fields = TypeVar("Fields", bound=BaseModel)
Created = TypeVar("Created", bound=BaseModel)
# A written record as PostgreSQL made it: its id, its version and its JSON text.
JsonText = tuple[uuid.UUID, int, str]


@dataclass(frozen=True)
class SyncedRecordRoutes(Generic[Record, Fields]):
    """A synced record as its routes show it: its names, its service (its descriptor, whose
    verbs every synced record has), its JSON, its wire models, and the words and examples of
    each route, which say what is particular to it."""

    noun: str  # "customer"
    article: str  # "a" or "an"
    plural: str  # "customers", also the path
    service: SyncedRecord[Record, Fields, Any]
    as_json: Callable[[Record], JsonObject]
    out: type[BaseModel]
    upsert_body: type[Fields]
    patch_body: type[BaseModel]
    batch_body: type[BaseModel]
    batch_results: type[BaseModel]
    patch_description: str
    patch_example: dict[str, Any]
    delete_description: str
    upsert_description: str
    upsert_example: dict[str, Any]
    batch_description: str
    batch_example: dict[str, Any]
    read_description: str = ""
    read_answer: str = ""
    patch_summary: str = ""

    @property
    def id_name(self) -> str:
        return f"{self.noun}_id"

    def location(self, record_id: uuid.UUID) -> str:
        return f"/{self.plural}/{record_id}"


def _endpoint(
    name: str, handle: Callable[..., Awaitable[Response]], parameters: list[inspect.Parameter]
) -> Callable[..., Awaitable[Response]]:
    """``handle`` named ``name``, with the signature FastAPI (and the OpenAPI document) read:
    FastAPI calls it with those parameters by name."""
    handle.__name__ = handle.__qualname__ = name
    handle.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        parameters, return_annotation=Response
    )
    return handle


_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD
_REQUEST = inspect.Parameter("request", _KEYWORD, annotation=Request)


def _optional(name: str, annotation: Any, default: Any = None) -> inspect.Parameter:
    return inspect.Parameter(name, _KEYWORD, annotation=annotation, default=default)


_IDEMPOTENCY_KEY = _optional("idempotency_key", IdempotencyKey)


def add_create_route(
    router: APIRouter,
    record: SyncedRecordRoutes[Record, Fields],
    *,
    body: type[Created],
    example: dict[str, Any],
    description: str,
    write: Callable[[UnitOfWork, Created], AfterCommit[JsonText] | Record],
) -> None:
    """``POST /{plural}``: ``write`` creates the record from the parsed ``body``, and gives it
    back at once, or its id, version and JSON text made by PostgreSQL after the commit."""

    async def create(request: Request, idempotency_key: str | None) -> Response:
        scope = caller_of(request)
        fields = parse_body(body, await json_body(request))

        def perform(uow: UnitOfWork) -> AfterCommit[Response] | Response:
            written = write(uow, fields)
            if isinstance(written, AfterCommit):
                return AfterCommit(
                    lambda: created_from_json_text(*written.read(), f"/{record.plural}")
                )
            # Its JSON as the tenant's custom fields make it.
            shown = record.service.fitted(uow).as_json
            return created(shown, written, record.location(written.id))

        return await run_once(request, scope, idempotency_key, fields, perform)

    router.post(
        "",
        status_code=201,
        summary=f"Create {record.article} {record.noun}",
        description=description,
        response_model=None,
        responses={
            201: {
                "model": record.out,
                "description": f"The created {record.noun}.",
                "headers": CREATED_HEADERS,
            },
            **problem_responses(400, 401, 403, 409, 413, 415, 422),
        },
        openapi_extra=json_request_body(body, example),
    )(_endpoint(f"create_{record.noun}", create, [_REQUEST, _IDEMPOTENCY_KEY]))


def add_list_route(
    router: APIRouter,
    record: SyncedRecordRoutes[Record, Fields],
    *,
    page: type[BaseModel],
    filter_model: type[BaseModel],
    filters: Mapping[str, tuple[Any, Any]],
    description: str = "",
) -> None:
    """``GET /{plural}``: a page of the records the caller may see that ``filters`` admit (each
    a query parameter, by name: its type and its ``Query``), judged as ``filter_model``."""

    async def list_records(
        request: Request, limit: int | None, cursor: str | None, **given: Any
    ) -> Response:
        scope = caller_of(request)
        judged = validated(filter_model, given)
        query = request.query_params.items()
        custom = {name: value for name, value in query if name.startswith(CUSTOM_FILTERS_PREFIX)}
        found = await database_of(request).read(
            scope,
            lambda uow: record.service.list_page_as_json(uow, judged, limit, cursor, custom),
        )
        return json_text_page(found)

    plural = record.plural
    router.get(
        "",
        summary=f"List {plural}",
        description=description or f"The department's {plural}, oldest first, a page at a time.",
        response_model=None,
        responses={
            200: {"model": page, "description": f"A page of {plural}."},
            **problem_responses(401, 403, 422),
        },
    )(
        _endpoint(
            f"list_{plural}",
            list_records,
            [
                _REQUEST,
                _optional("limit", int | None, LIST_LIMIT),
                _optional("cursor", str | None, LIST_CURSOR),
                *(_optional(name, kind, query) for name, (kind, query) in filters.items()),
            ],
        )
    )


def add_item_routes(router: APIRouter, record: SyncedRecordRoutes[Record, Fields]) -> None:
    """``GET``, ``PATCH`` and ``DELETE /{plural}/{<noun>_id}``."""
    record_id = inspect.Parameter(record.id_name, _KEYWORD, annotation=uuid.UUID)
    _add_read_route(router, record, record_id)
    _add_update_route(router, record, record_id)
    _add_delete_route(router, record, record_id)


def _add_read_route(
    router: APIRouter, record: SyncedRecordRoutes[Record, Fields], record_id: inspect.Parameter
) -> None:
    """``GET /{plural}/{<noun>_id}``."""
    service, noun, a = record.service, record.noun, record.article

    async def read(request: Request, **path: uuid.UUID) -> Response:
        scope = caller_of(request)
        wanted = path[record.id_name]
        version, text = await database_of(request).read(
            scope, lambda uow: service.get_as_json(uow, wanted)
        )
        return json_text_response(version, text)

    router.get(
        f"/{{{record.id_name}}}",
        summary=f"Read {a} {noun}",
        description=record.read_description or f"The {noun}, its version in the `ETag`.",
        response_model=None,
        responses={
            200: {
                "model": record.out,
                "description": record.read_answer or f"The {noun}.",
                "headers": READ_HEADERS,
            },
            **problem_responses(401, 403, 404),
        },
    )(_endpoint(f"get_{noun}", read, [_REQUEST, record_id]))


def _add_update_route(
    router: APIRouter, record: SyncedRecordRoutes[Record, Fields], record_id: inspect.Parameter
) -> None:
    """``PATCH /{plural}/{<noun>_id}``."""
    service, noun, a = record.service, record.noun, record.article

    async def update(request: Request, if_match: str | None, **path: uuid.UUID) -> Response:
        scope = caller_of(request)
        wanted = path[record.id_name]
        body = await json_body(request)
        patch = parse_body(record.patch_body, body)

        def perform(uow: UnitOfWork) -> AfterCommit[Response]:
            changed = service.update_as_json(uow, wanted, patch, expected_version(if_match))
            return AfterCommit(lambda: json_text_response(*changed.read()))

        return await database_of(request).run(scope, perform)

    router.patch(
        f"/{{{record.id_name}}}",
        summary=record.patch_summary or f"Update {a} {noun}",
        description=record.patch_description,
        response_model=None,
        responses={
            200: {
                "model": record.out,
                "description": f"The updated {noun}.",
                "headers": READ_HEADERS,
            },
            **problem_responses(400, 401, 403, 404, 409, 412, 413, 415, 422),
        },
        openapi_extra=json_request_body(record.patch_body, record.patch_example),
    )(_endpoint(f"update_{noun}", update, [_REQUEST, record_id, _optional("if_match", IfMatch)]))


def _add_delete_route(
    router: APIRouter, record: SyncedRecordRoutes[Record, Fields], record_id: inspect.Parameter
) -> None:
    """``DELETE /{plural}/{<noun>_id}``."""
    service, noun, a = record.service, record.noun, record.article

    async def delete(request: Request, if_match: str | None, **path: uuid.UUID) -> Response:
        scope = caller_of(request)
        wanted = path[record.id_name]
        await database_of(request).run(
            scope, lambda uow: service.delete(uow, wanted, expected_version(if_match))
        )
        return no_content()

    router.delete(
        f"/{{{record.id_name}}}",
        status_code=204,
        summary=f"Delete {a} {noun}",
        description=record.delete_description,
        response_model=None,
        responses={204: {"description": "Deleted."}, **problem_responses(401, 403, 404, 412)},
    )(_endpoint(f"delete_{noun}", delete, [_REQUEST, record_id, _optional("if_match", IfMatch)]))


def add_sync_routes(router: APIRouter, record: SyncedRecordRoutes[Record, Fields]) -> None:
    """``PUT /{plural}/by-external-id/{external_id}`` and ``POST /{plural}/batch``."""
    _add_upsert_route(router, record)
    _add_batch_route(router, record)


def _upsert_endpoint(
    record: SyncedRecordRoutes[Record, Fields],
) -> Callable[..., Awaitable[Response]]:
    """The upsert by external id: the record as it now is, ``201`` if it was created."""
    service = record.service

    async def upsert(
        request: Request, external_id: str, if_match: str | None, if_none_match: str | None
    ) -> Response:
        scope = caller_of(request)
        body = await json_body(request)
        fields = parse_body(record.upsert_body, body)

        def perform(uow: UnitOfWork) -> AfterCommit[Response]:
            upserted = service.upsert(
                uow,
                external_id,
                fields,
                expected=expected_version(if_match),
                unless=expected_version(if_none_match),
            )
            # Its JSON as the tenant's custom fields make it.
            as_json = service.fitted(uow).as_json
            return AfterCommit(lambda: _upserted(record, as_json, upserted.read()))

        return await database_of(request).run(scope, perform)

    return upsert


def _upserted(
    record: SyncedRecordRoutes[Record, Fields],
    as_json: Callable[[Record], JsonObject],
    result: Result[Record],
) -> Response:
    written = result.record
    assert written is not None, "a successful upsert has its record"
    if result.outcome == "created":
        return created(as_json, written, record.location(written.id))
    return resource_response(as_json, written)


def _add_upsert_route(router: APIRouter, record: SyncedRecordRoutes[Record, Fields]) -> None:
    """``PUT /{plural}/by-external-id/{external_id}``."""
    noun = record.noun
    router.put(
        "/by-external-id/{external_id}",
        summary=f"Create or update {record.article} {noun} by external id",
        description=record.upsert_description,
        response_model=None,
        responses={
            200: {
                "model": record.out,
                "description": f"The {noun} existed: as it now is.",
                "headers": READ_HEADERS,
            },
            201: {
                "model": record.out,
                "description": f"The created {noun}.",
                "headers": CREATED_HEADERS,
            },
            **problem_responses(400, 401, 403, 409, 412, 413, 415, 422),
        },
        openapi_extra=json_request_body(record.upsert_body, record.upsert_example),
    )(
        _endpoint(
            f"upsert_{noun}",
            _upsert_endpoint(record),
            [
                _REQUEST,
                _optional("external_id", str, EXTERNAL_ID_PATH),
                _optional("if_match", IfMatch),
                _optional("if_none_match", IfNoneMatch),
            ],
        )
    )


def _add_batch_route(router: APIRouter, record: SyncedRecordRoutes[Record, Fields]) -> None:
    """``POST /{plural}/batch``."""
    service = record.service

    async def batch(request: Request, atomic: bool, idempotency_key: str | None) -> Response:
        scope = caller_of(request)
        body = await json_body(request)
        operations = parse_body(Batch, body)
        await charge_batch(request, scope, len(operations.operations))

        def perform(uow: UnitOfWork) -> AfterCommit[Response]:
            results = service.batch(uow, operations, atomic=atomic)
            as_json = service.fitted(uow).as_json
            return AfterCommit(lambda: batch_response(request, as_json, results.read()))

        return await run_once(request, scope, idempotency_key, operations, perform)

    router.post(
        "/batch",
        summary=f"Create and upsert {record.plural} in one request",
        description=record.batch_description,
        response_model=None,
        responses={
            200: {
                "model": record.batch_results,
                "description": "One result per operation, in order.",
            },
            **problem_responses(400, 401, 403, 409, 413, 415, 422),
        },
        openapi_extra=json_request_body(record.batch_body, record.batch_example),
    )(
        _endpoint(
            f"batch_{record.plural}",
            batch,
            [
                _REQUEST,
                _optional(
                    "atomic",
                    bool,
                    Query(False, description="All or nothing: any failure writes nothing."),
                ),
                _IDEMPOTENCY_KEY,
            ],
        )
    )
