"""Queries answered by graphql-core and the compiled reads alone, without Strawberry's request
machinery: a custom view's path (``api._Router.run``), beside Strawberry's.

A dashboard sends the same few documents all day. Once a document's text is in the document
cache, parsed and found valid within the cost budget, a request for it needs nothing Strawberry
adds around an execution: its extensions (the guard that finds the document, the error mapping,
the operation's metric), its execution context and its result processing were a large share of
the workers' CPU time for a page of customers whose JSON PostgreSQL builds. Here
the cached document is executed with the schema's own execution context class
(``execution.CompilingExecutionContext``: each root field compiled to PostgreSQL's JSON or
answered by its resolver), and the response is written around its result as Strawberry writes
it, errors included: mapped as ``errors.DomainErrors`` maps them, counted as ``_Reported``
counts them.

What is answered here is chosen before anything runs: a POST of ``application/json`` (no
streaming transport asked for) whose body has nothing but ``query``, ``variables`` and
``operationName``, a kept text whose document is valid and within the budget for these
variables, one query operation, and variables that coerce. Anything else (a new text, a
mutation, a refusal) runs through Strawberry instead; nothing has been answered or counted by
then. Once a request runs here, its answer is this one, whatever its fields answer: no request
runs twice. tests/graphql_api/test_direct.py compares both ways' answers.

A body answered whole by compiled reads, without an error, keeps its plan (``_Plan``): the same
bytes again skip the parsing, the execution context and the arguments' conversion, and run each
read for their own caller (``execution.run_root_reads``, as the execution context runs them).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from inspect import isawaitable
from typing import Any, NamedTuple, TypeGuard, cast

import orjson
from graphql import ExecutionResult, GraphQLError, OperationType
from starlette.requests import Request
from strawberry.execution.is_awaitable import optimized_is_awaitable

from dealbase.graphql_api.context import GraphQLContext
from dealbase.graphql_api.documents import DocumentCache
from dealbase.graphql_api.errors import mapped_error
from dealbase.graphql_api.execution import (
    CompilingExecutionContext,
    RootFieldObserver,
    RootRead,
    report_root_fields,
    run_root_reads,
)
from dealbase.graphql_api.schema import OperationObserver

_REQUEST_KEYS = frozenset({"query", "variables", "operationName"})
# Request bodies kept with their plan (``_Plan``), per process: a dashboard's few documents,
# each with the variables it sends, a few hundred bytes each.
_PLANS_KEPT = 256
_PLANNED_BODY_BYTES = 16 * 1024


class Answer(NamedTuple):
    """A response's body, and whether it answers a request error (no data: GraphQL over HTTP
    then answers 400 to a client that asked for ``application/graphql-response+json``)."""

    body: bytes
    request_error: bool = False


class DirectQueries:
    """Answers the requests described above (``answer``) for one schema."""

    def __init__(
        self,
        execution: type[CompilingExecutionContext],
        documents: DocumentCache,
        observe_operation: OperationObserver | None,
        observe_root_field: RootFieldObserver | None,
    ) -> None:
        self._execution = execution
        self._documents = documents
        self._budget = documents.guards.max_cost
        self._observe_operation = observe_operation
        self._observe_root_field = observe_root_field
        self._plans: OrderedDict[bytes, _Plan] = OrderedDict()

    async def answer(self, request: Request, context: GraphQLContext) -> Answer | None:
        """The response, or None where Strawberry is to run the request."""
        if context.caller is None or not _plain_json_post(request):
            return None
        body = await request.body()
        plan = self._plans.get(body)
        if plan is not None:
            self._plans.move_to_end(body)
            return await self._planned(plan, context)
        sent = _request_body(body)
        if sent is None:
            return None
        text, variables, name = sent.get("query"), sent.get("variables"), sent.get("operationName")
        if not _request_fields(text, variables, name):
            return None
        checked = self._documents.get(text)
        schema = self._documents.schema
        if schema is None or checked is None or checked.errors_within_budget != ():
            return None
        estimate = checked.cost.estimate(variables)
        if estimate > self._budget:
            return None
        executor = self._execution.build(
            schema,
            checked.document,
            None,
            context,
            variables,
            name,
            # As Strawberry runs it: plain values are not asked whether they are awaitable.
            is_awaitable=cast("Callable[[Any], TypeGuard[Awaitable[Any]]]", optimized_is_awaitable),
        )
        if isinstance(executor, list) or executor.operation.operation is not OperationType.QUERY:
            return None
        assert isinstance(executor, CompilingExecutionContext)
        # From here on, this is the request's answer.
        return await self._executed(executor, body, estimate, name, context)

    async def _executed(
        self,
        executor: CompilingExecutionContext,
        body: bytes,
        estimate: int,
        name: str | None,
        context: GraphQLContext,
    ) -> Answer:
        """The answer of the query ``executor`` runs, its plan kept where it has one."""
        try:
            result = executor.execute_operation()
            if isawaitable(result):
                result = await result
        except Exception as error:  # as Strawberry answers an execution that raised
            result = ExecutionResult(None, [GraphQLError(str(error), original_error=error)])
        assert isinstance(result, ExecutionResult)
        extensions = {"cost": {"estimated": estimate, "budget": self._budget}}
        operation = executor.operation.name
        operation_name = name or (operation.value if operation is not None else None)
        reads = executor.root_reads
        if (
            not result.errors
            and isinstance(result.data, dict)
            and [each.key for each in reads] == list(result.data)
            and len(body) <= _PLANNED_BODY_BYTES
        ):
            self._plans[body] = _Plan(
                tuple(reads), extensions, operation_name, executor.root_field_paths or {}
            )
            if len(self._plans) > _PLANS_KEPT:
                self._plans.popitem(last=False)
        return self._answer(result.data, result.errors or [], extensions, operation_name, context)

    async def _planned(self, plan: _Plan, context: GraphQLContext) -> Answer:
        """The answer of a planned body for the caller of ``context``."""
        report_root_fields(plan.root_fields, self._observe_root_field)
        errors: list[GraphQLError] = []
        data = await run_root_reads(plan.reads, context, errors, len(plan.reads) == 1)
        return self._answer(data, errors, plan.extensions, plan.operation_name, context)

    def _answer(
        self,
        data: dict[str, Any] | None,
        raised: list[GraphQLError],
        extensions: dict[str, Any],
        operation_name: str | None,
        context: GraphQLContext,
    ) -> Answer:
        """The response Strawberry writes for this result (``strawberry.http.process_result``
        and the router's ``process_result``), its operation counted as ``_Reported`` counts."""
        errors = [mapped_error(error, context.request_id) for error in raised]
        if self._observe_operation is not None:
            codes = [str((error.extensions or {}).get("code", "")) for error in errors]
            self._observe_operation(operation_name, "query", codes)
        response: dict[str, Any] = {"data": data}
        if errors:
            response["errors"] = [error.formatted for error in errors]
        response["extensions"] = extensions
        request_error = data is None and bool(errors) and all(e.path is None for e in errors)
        if request_error:
            del response["data"]
        return Answer(_dumps(response), request_error)


def _plain_json_post(request: Request) -> bool:
    """A POST of JSON that asks for no streaming transport: anything else (another body, a
    streaming transport asked for) is Strawberry's to read."""
    if request.method != "POST":
        return False
    headers = request.headers
    media_type = headers.get("content-type", "").partition(";")[0].strip().lower()
    accepted = headers.get("accept", "")
    return (
        media_type == "application/json"
        and "multipart" not in accepted
        and "event-stream" not in accepted
    )


def _request_body(body: bytes) -> dict[str, Any] | None:
    """The body's JSON object, if it has nothing but a request's keys."""
    try:
        sent = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(sent, dict) or not _REQUEST_KEYS.issuperset(sent):
        return None
    return sent


def _request_fields(text: object, variables: object, name: object) -> TypeGuard[str]:
    """Whether the body's query is a text, its variables an object and its operation's name a
    text, where given."""
    return (
        isinstance(text, str)
        and (variables is None or isinstance(variables, dict))
        and (name is None or isinstance(name, str))
    )


def _dumps(response: dict[str, Any]) -> bytes:
    """``response`` as JSON, as the router's ``encode_json`` writes it: by orjson, or past what
    orjson takes (an integer past 64 bits, a resolver's sum) as Strawberry's view does, each
    compiled field's JSON (an ``orjson.Fragment``, which only orjson writes) by orjson."""
    try:
        return orjson.dumps(response)
    except TypeError:
        pass
    data = response.get("data")
    if not isinstance(data, dict) or not any(isinstance(v, orjson.Fragment) for v in data.values()):
        return _compact(response).encode()
    parts = [
        orjson.dumps(key)
        + b":"
        + (orjson.dumps(value) if isinstance(value, orjson.Fragment) else _compact(value).encode())
        for key, value in data.items()
    ]
    rest = _compact({key: value for key, value in response.items() if key != "data"})
    return b'{"data":{' + b",".join(parts) + b"}," + rest[1:].encode()


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class _Plan:
    """A request body whose query's root fields were all compiled and answered: each one's read
    with the body's arguments, in the response's order, and what the answer reports besides.
    The same bytes always give the same document, variables and operation, so the next request
    with them runs the reads for its own caller without parsing, coercing or converting
    anything."""

    reads: tuple[RootRead, ...]
    extensions: dict[str, Any]
    operation_name: str | None
    root_fields: Mapping[str, str]
