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

A body answered whole by compiled reads keeps its plan (``_Plan``): the same bytes again skip
the parsing, the execution context and the arguments' conversion, and run each read for their
own caller.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from inspect import isawaitable
from typing import Any, TypeGuard, cast

import orjson
from graphql import ExecutionResult, OperationType
from starlette.requests import Request
from strawberry.execution.is_awaitable import optimized_is_awaitable

from dealbase.graphql_api.compiled import (
    CompilingExecutionContext,
    PreparedRead,
    RootFieldObserver,
    report_root_fields,
)
from dealbase.graphql_api.context import GraphQLContext
from dealbase.graphql_api.documents import DocumentCache
from dealbase.graphql_api.schema import OperationObserver

_REQUEST_KEYS = frozenset({"query", "variables", "operationName"})
# Request bodies kept with their plan (``_Plan``), per process: a dashboard's few documents,
# each with the variables it sends, a few hundred bytes each.
_PLANS_KEPT = 256
_PLANNED_BODY_BYTES = 16 * 1024


class DirectQueries:
    """Answers the requests described above (``answer``) for one schema."""

    def __init__(
        self,
        schema: Any,
        documents: DocumentCache,
        observe_operation: OperationObserver | None,
        observe_root_field: RootFieldObserver | None,
    ) -> None:
        self._graphql_schema = schema._schema
        self._documents = documents
        self._budget = documents.guards.max_cost
        self._observe_operation = observe_operation
        self._observe_root_field = observe_root_field
        self._plans: OrderedDict[bytes, _Plan] = OrderedDict()

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
        body = await request.body()
        plan = self._plans.get(body)
        if plan is not None:
            self._plans.move_to_end(body)
            return await self._planned(plan, context)
        try:
            sent = orjson.loads(body)
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
            self._graphql_schema,
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
        extensions = {"cost": {"estimated": estimate, "budget": self._budget}}
        try:
            answer = orjson.dumps({"data": result.data, "extensions": extensions})
        except TypeError:
            # An integer past 64 bits (a resolver's sum), which orjson refuses: Strawberry's
            # router writes those (graphql_api.api).
            return None
        operation = executor.operation.name
        operation_name = name or (operation.value if operation is not None else None)
        self._observed(executor.root_field_paths, operation_name)
        reads = executor.prepared_reads
        if (
            reads is not None
            and isinstance(result.data, dict)
            and reads.keys() == result.data.keys()
            and len(body) <= _PLANNED_BODY_BYTES
        ):
            self._plans[body] = _Plan(
                tuple((key, reads[key]) for key in result.data),
                extensions,
                operation_name,
                executor.root_field_paths or {},
            )
            if len(self._plans) > _PLANS_KEPT:
                self._plans.popitem(last=False)
        return answer

    async def _planned(self, plan: _Plan, context: GraphQLContext) -> bytes | None:
        """The answer of a planned body for the caller of ``context``, or None where Strawberry
        is to run the request (a read the resolvers must answer, any error)."""
        data: dict[str, orjson.Fragment] = {}
        last = len(plan.reads) == 1
        try:
            for key, read in plan.reads:
                text = await read.run(context, last)
                if text is None:
                    return None
                data[key] = orjson.Fragment(text)
        except Exception:
            # Reported as a field's error by the resolvers, which run it again.
            return None
        answer = orjson.dumps({"data": data, "extensions": plan.extensions})
        self._observed(plan.root_fields, plan.operation_name)
        return answer

    def _observed(self, root_fields: Mapping[str, str] | None, operation: str | None) -> None:
        """What Strawberry's run reports of an operation: its root fields' paths (when the
        compiler ran them), its name."""
        if root_fields is not None:
            report_root_fields(root_fields, self._observe_root_field)
        if self._observe_operation is not None:
            self._observe_operation(operation, "query", [])


@dataclass(frozen=True, slots=True)
class _Plan:
    """A request body whose query's root fields were all compiled and answered: each one's read
    with the body's arguments, by response key, and what the answer reports besides. The same
    bytes always give the same document, variables and operation, so the next request with
    them runs the reads for its own caller without parsing, coercing or converting anything."""

    reads: tuple[tuple[str, PreparedRead], ...]
    extensions: dict[str, Any]
    operation_name: str | None
    root_fields: Mapping[str, str]
