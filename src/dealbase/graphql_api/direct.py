"""Queries answered by graphql-core and the compiled reads alone, without Strawberry's request
machinery.

A dashboard sends the same few documents all day. Once a document's text is in the document
cache, parsed and found valid within the cost budget, a request for it needs nothing Strawberry
adds around an execution: its extensions (the guard that finds the document, the error mapping,
the operation's metric), its execution context and its result processing were a quarter of the
workers' CPU time for a page of customers whose JSON PostgreSQL builds (bench/README.md). Here
the cached document is executed with the same execution context Strawberry uses
(``CompilingExecutionContext``: compiled root fields as PostgreSQL's JSON, any other through
the resolvers), and the response is written around its result, as Strawberry writes it.

Only what this can answer exactly as Strawberry would is answered here: a POST of
``application/json`` (no streaming transport asked for) whose body has nothing but ``query``,
``variables`` and ``operationName``, a kept text whose document is valid
and within the budget for these variables, one query operation, variables that coerce, and a
result without errors. Anything else (a new text, a mutation, a refusal, any error of a field)
runs through Strawberry from the start, in the same read transaction; nothing has been answered
or counted by then. tests/graphql_api/test_direct.py compares both ways' answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from inspect import isawaitable
from typing import Any, TypeGuard, cast

import orjson
from graphql import ExecutionResult, OperationType
from starlette.requests import Request
from strawberry.execution.is_awaitable import optimized_is_awaitable

from dealbase.graphql_api.compiled import (
    CompilingExecutionContext,
    RootFieldObserver,
    report_root_fields,
)
from dealbase.graphql_api.context import GraphQLContext
from dealbase.graphql_api.documents import DocumentCache
from dealbase.graphql_api.schema import OperationObserver

_REQUEST_KEYS = frozenset({"query", "variables", "operationName"})


class DirectQueries:
    """Answers the requests described above (``answer``) for one schema."""

    def __init__(
        self,
        schema: Any,
        documents: DocumentCache,
        observe_operation: OperationObserver | None,
        observe_root_field: RootFieldObserver | None,
    ) -> None:
        self._schema = schema._schema
        self._documents = documents
        self._budget = documents.guards.max_cost
        self._observe_operation = observe_operation
        self._observe_root_field = observe_root_field

    async def answer(self, request: Request, context: GraphQLContext) -> bytes | None:
        """The response's body, or None where Strawberry is to run the request."""
        if request.method != "POST" or context.caller is None:
            return None
        headers = request.headers
        media_type = headers.get("content-type", "").partition(";")[0].strip().lower()
        accepted = headers.get("accept", "")
        # Anything else (another body, a streaming transport asked for) is Strawberry's to read.
        if (
            media_type != "application/json"
            or "multipart" in accepted
            or "event-stream" in accepted
        ):
            return None
        try:
            sent = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return None
        if not isinstance(sent, dict) or not _REQUEST_KEYS.issuperset(sent):
            return None
        text, variables, name = sent.get("query"), sent.get("variables"), sent.get("operationName")
        if (
            not isinstance(text, str)
            or not (variables is None or isinstance(variables, dict))
            or not (name is None or isinstance(name, str))
        ):
            return None
        checked = self._documents.get(text)
        if checked is None or checked.errors_within_budget != ():
            return None
        estimate = checked.cost.estimate(variables)
        if estimate > self._budget:
            return None
        executor = CompilingExecutionContext.build(
            self._schema,
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
        executor.observes_root_fields = False
        result = executor.execute_operation()
        if isawaitable(result):
            result = await result
        if not isinstance(result, ExecutionResult) or result.errors:
            return None
        try:
            answer = orjson.dumps(
                {
                    "data": result.data,
                    "extensions": {"cost": {"estimated": estimate, "budget": self._budget}},
                }
            )
        except TypeError:
            # An integer past 64 bits (a resolver's sum), which orjson refuses: Strawberry's
            # router writes those (graphql_api.api).
            return None
        self._observed(executor, name)
        return answer

    def _observed(self, executor: CompilingExecutionContext, name: str | None) -> None:
        """What Strawberry's run reports of an operation: its root fields' paths (when the
        compiler ran them), its name."""
        if executor.root_field_paths is not None:
            report_root_fields(executor.root_field_paths, self._observe_root_field)
        if self._observe_operation is not None:
            operation = executor.operation.name
            self._observe_operation(
                name or (operation.value if operation is not None else None), "query", []
            )
