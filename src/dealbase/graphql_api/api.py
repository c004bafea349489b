"""Mounts the GraphQL API at /graphql."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, cast

import orjson
from cross_web import HTTPException
from fastapi import BackgroundTasks, FastAPI, Request, Response
from fastapi.responses import HTMLResponse, PlainTextResponse
from fastapi.routing import APIRoute
from starlette.types import Receive, Scope, Send
from strawberry.fastapi import GraphQLRouter
from strawberry.http import GraphQLHTTPResponse
from strawberry.types import ExecutionResult

from dealbase.config import Settings
from dealbase.edge.problems import ProtocolError, malformed_json
from dealbase.graphql_api.context import GraphQLContext, context_for
from dealbase.graphql_api.direct import DirectQueries
from dealbase.graphql_api.execution import CompilingExecutionContext, RootFieldObserver
from dealbase.graphql_api.schema import OperationObserver, build_schema

GRAPHQL_PATH = "/graphql"
GRAPHQL_RESPONSE_MEDIA_TYPE = "application/graphql-response+json"
_MUTATION_BY_GET = "mutations are not allowed when using GET"
# Where a response's request error is noted for its status (request.state).
_REQUEST_ERROR = "graphql_request_error"


def _answers_graphql_response(request: Request) -> bool:
    """Whether the client prefers ``application/graphql-response+json`` to ``application/json``
    (GraphQL over HTTP): by the Accept header's q values; without one, or on a tie that names
    ``application/json`` first, the legacy ``application/json``."""
    preferred: tuple[float, int] | None = None
    legacy: tuple[float, int] | None = None
    for position, item in enumerate(request.headers.get("accept", "").split(",")):
        media, _, parameters = item.partition(";")
        quality = 1.0
        for parameter in parameters.split(";"):
            name, _, value = parameter.strip().partition("=")
            if name == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        rank = (quality, -position)
        media = media.strip().lower()
        if media == GRAPHQL_RESPONSE_MEDIA_TYPE:
            preferred = rank
        elif media in ("application/json", "application/*", "*/*"):
            legacy = max(legacy, rank) if legacy is not None else rank
    if preferred is None or preferred[0] <= 0:
        return False
    return legacy is None or preferred > legacy


class _Router(GraphQLRouter[object, None]):
    """Strawberry's router, refusing unreadable requests as the REST API does, with the IDE
    page it is given (Strawberry's own loads its files from public CDNs)."""

    # Set by Strawberry's handlers (and ``_post_without_fastapis_handler``) for each request.
    temporal_response: Response

    def __init__(self, *args: Any, ide_page: str, direct: DirectQueries, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ide_page = ide_page
        self.direct = direct

    async def render_graphql_ide(self, request: Request) -> HTMLResponse:
        return HTMLResponse(self.ide_page)

    def decode_json(self, data: str | bytes) -> object:
        # orjson refuses what json.loads does not: nesting past 1,024 levels (json.loads
        # overflows the stack), invalid UTF-8 and unpaired surrogates. Raised as our own error,
        # the refusal leaves as the app's problem+json rather than Strawberry's plain text.
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise malformed_json(f"The body is not valid JSON: {exc}.") from None

    def encode_json(self, data: object) -> bytes | str:
        # A dashboard page is a large JSON document, which orjson writes far faster than json.dumps.
        try:
            return orjson.dumps(data)
        except TypeError:
            # An integer past 64 bits (the cost estimate of a document far over its budget),
            # which orjson refuses and JSON allows.
            return super().encode_json(data)

    async def run(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        context = kwargs.get("context")
        if isinstance(context, GraphQLContext):
            answered = await self.direct.answer(request, context)
            if answered is not None:
                preferred = _answers_graphql_response(request)
                return Response(
                    answered.body,
                    status_code=400 if preferred and answered.request_error else 200,
                    media_type=GRAPHQL_RESPONSE_MEDIA_TYPE if preferred else "application/json",
                    headers={"vary": "Accept"},
                )
        # Strawberry's other refusals (no operation, another content type, batches): its
        # routes would answer them in plain text.
        try:
            response = await super().run(request, *args, **kwargs)
        except HTTPException as exc:
            if exc.status_code == 405 or exc.reason == _MUTATION_BY_GET:
                # GraphQL over HTTP: a mutation only by POST; any other method, neither.
                allowed = "POST" if exc.status_code != 405 else "GET, POST"
                raise ProtocolError(
                    405,
                    "method_not_allowed",
                    "Method not allowed",
                    f"{exc.reason[:1].upper()}{exc.reason[1:].rstrip('.')}.",
                    headers={"Allow": allowed},
                ) from None
            code = "not_found" if exc.status_code == 404 else "unreadable_request"
            raise ProtocolError(exc.status_code, code, "Unreadable request", exc.reason) from None
        if isinstance(response, Response) and _answers_graphql_response(request):
            response.headers["content-type"] = GRAPHQL_RESPONSE_MEDIA_TYPE
            if getattr(request.state, _REQUEST_ERROR, False):
                response.status_code = 400
        if isinstance(response, Response):
            response.headers["vary"] = "Accept"
        return response

    async def process_result(self, request: Any, result: ExecutionResult) -> GraphQLHTTPResponse:
        processed = await super().process_result(request, result)
        # A request error (the document unreadable or invalid, a variable of the wrong type,
        # the cost over the budget): nothing ran, so the response has no data entry (the
        # GraphQL specification, "Response Format"). Errors of fields have a path.
        if result.data is None and result.errors and all(e.path is None for e in result.errors):
            processed.pop("data", None)
            setattr(request.state, _REQUEST_ERROR, True)
        return processed


def install_graphql_api(
    app: FastAPI,
    settings: Settings,
    observe: OperationObserver | None = None,
    observe_root_field: RootFieldObserver | None = None,
    *,
    ide_page: str,
) -> None:
    """``ide_page``: the GraphiQL page a browser's ``GET /graphql`` gets, when
    ``settings.graphql_ide`` is on."""
    schema = build_schema(settings, observe, observe_root_field)
    execution = cast("type[CompilingExecutionContext]", schema.execution_context_class)
    router = _Router(
        schema,
        path=GRAPHQL_PATH,
        context_getter=context_for,
        graphql_ide="graphiql" if settings.graphql_ide else None,
        ide_page=ide_page,
        direct=DirectQueries(execution, schema.documents, observe, observe_root_field),
        # Mutations only by POST; queries by GET too (cacheable dashboards).
        allow_queries_via_get=True,
        include_in_schema=False,
    )
    app.include_router(router)
    _post_without_fastapis_handler(app, router)


def _post_without_fastapis_handler(app: FastAPI, router: _Router) -> None:
    """``POST /graphql`` answered by the router without FastAPI's request handler, as the
    integration API's routes are (``edge.callers.AdmittedRoute``): its dependency solver, exit
    stacks and sub-response were a large share of a dashboard read's Python calls, for two
    dependencies known in advance (the context, no root value). A request that may stream its
    answer (``multipart/mixed``: subscriptions, incremental delivery) keeps FastAPI's handler,
    whose context lives as long as the stream."""
    route = next(
        each
        for each in app.router.routes
        if isinstance(each, APIRoute) and each.path == GRAPHQL_PATH and each.methods == {"POST"}
    )
    streaming = route.app
    open_context = asynccontextmanager(context_for)

    async def answer(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        if "multipart/mixed" in request.headers.get("accept", ""):
            await streaming(scope, receive, send)
            return
        async with open_context(request) as context:
            # What FastAPI and Strawberry's context getter hand the handler: a sub-response
            # whose headers and status code Strawberry merges into its response, and
            # background tasks, run once the response is sent.
            sub_response = Response()
            del sub_response.headers["content-length"]
            sub_response.status_code = None  # type: ignore[assignment]
            tasks = BackgroundTasks()
            context.request, context.response, context.background_tasks = (
                request,
                sub_response,
                tasks,
            )
            router.temporal_response = sub_response
            try:
                response = await router.run(request=request, context=context, root_value=None)
            except HTTPException as exc:  # as Strawberry's handler answers it
                response = PlainTextResponse(exc.reason, status_code=exc.status_code)
        if tasks.tasks and response.background is None:
            response.background = tasks
        await response(scope, receive, send)

    route.app = answer
