"""The document cache: a document sent again is neither parsed nor validated nor costed again,
its refusals and errors are exactly those Strawberry's own pipeline gives without a cache, the
cost follows each request's variables, and the cache holds at most its size."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import strawberry
from fastapi.testclient import TestClient
from graphql import GraphQLFormattedError, ValidationContext, ValidationRule, parse
from strawberry.extensions import (
    DisableIntrospection,
    MaxAliasesLimiter,
    MaxTokensLimiter,
    QueryDepthLimiter,
    SchemaExtension,
)
from strawberry.schema import schema as strawberry_schema
from strawberry.schema.config import StrawberryConfig
from strawberry.types import ExecutionResult

from dealbase.config import Settings
from dealbase.graphql_api import documents
from dealbase.graphql_api.errors import DomainErrors
from dealbase.graphql_api.guards import cost_plan, cost_refusal, estimate_cost
from dealbase.graphql_api.schema import DashboardSchema, Mutation, Query, build_schema
from dealbase.graphql_api.types import BIG_INT_SCALAR, BigInt
from tests.graphql_api import support
from tests.support import TenantWorld


@dataclass
class Calls:
    parse: int = 0
    validate: int = 0
    cost_plan: int = 0


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    """Counts the parses (Strawberry parses a document the cache does not have), validations
    and cost plans of every schema in this process."""
    counted = Calls()

    def counting_parse(*args: Any, **kwargs: Any) -> Any:
        counted.parse += 1
        return parse(*args, **kwargs)

    validate_document = strawberry_schema.validate_document

    def counting_validate(*args: Any, **kwargs: Any) -> Any:
        counted.validate += 1
        return validate_document(*args, **kwargs)

    def counting_plan(*args: Any, **kwargs: Any) -> Any:
        counted.cost_plan += 1
        return cost_plan(*args, **kwargs)

    monkeypatch.setattr("strawberry.schema.schema.parse", counting_parse)
    # The cache has Strawberry validate what it does not know.
    monkeypatch.setattr(strawberry_schema, "validate_document", counting_validate)
    monkeypatch.setattr(documents, "cost_plan", counting_plan)
    return counted


class _SkipExecution(SchemaExtension):
    """Stops an operation where its resolvers would run (they need a request's context)."""

    def on_execute(self) -> Iterator[None]:
        self.execution_context.result = ExecutionResult(data={}, errors=None)
        yield


def _schema(settings: Settings, **update: Any) -> DashboardSchema:
    schema = build_schema(settings.model_copy(update=update))
    schema.extensions = (*schema.extensions, _SkipExecution)
    return schema


def _run(
    schema: strawberry.Schema, query: str, variables: dict[str, Any] | None = None
) -> ExecutionResult:
    return asyncio.run(schema.execute(query, variables))


def _errors(result: ExecutionResult) -> list[GraphQLFormattedError]:
    return [error.formatted for error in result.errors or ()]


def _codes(result: ExecutionResult) -> list[str]:
    return [error["extensions"]["code"] for error in _errors(result)]


PAGE = "query ($n: Int!) { deals(first: $n) { edges { node { id customers { id } } } } }"
DASHBOARD = (
    "query Dashboard($first: Int!) { deals(first: $first) { totalCount"
    " edges { node { id name step { id name } employee { id } customers { id lastName } } } } }"
)


# --- the same document again ---------------------------------------------------------------


def test_a_document_sent_again_is_not_parsed_validated_or_costed_again(
    client: TestClient, world: TenantWorld, calls: Calls
) -> None:
    # A text of its own: the session's app may have read the dashboard query already.
    query = f"{DASHBOARD} # {uuid.uuid4()}"
    support.data_of(
        client, 'mutation { createDeal(input: {name: "d"}) { id } }', headers=world.key.headers
    )
    calls.parse = calls.validate = calls.cost_plan = 0

    first = support.data_of(client, query, {"first": 50}, world.key.headers)
    second = support.data_of(client, query, {"first": 50}, world.key.headers)

    assert len(first["deals"]["edges"]) == 1
    assert second == first
    assert (calls.parse, calls.validate, calls.cost_plan) == (1, 1, 1)


def test_another_text_is_read_anew_even_if_it_differs_only_in_a_comment(
    settings: Settings, calls: Calls
) -> None:
    schema = _schema(settings)

    for query in ("{ __typename }", "{ __typename }", "{ __typename } # 2", "{ __typename }"):
        assert _run(schema, query).errors is None

    assert (calls.parse, calls.validate, calls.cost_plan) == (2, 2, 2)


def test_each_schema_keeps_its_own_verdicts(settings: Settings, calls: Calls) -> None:
    deep = "{ deals { edges { node { customers { id } } } } }"

    assert _run(_schema(settings), deep).errors is None
    assert (
        "exceeds maximum operation depth"
        in _errors(_run(_schema(settings, graphql_max_depth=3), deep))[0]["message"]
    )


# --- refusals ------------------------------------------------------------------------------

REFUSED = {
    "deep": (
        "{ deals(first: 1) { edges { node { customers { deals(first: 1) { id } } } } } }",
        None,
        "invalid_query",
    ),
    "aliased": ("{ a: __typename b: __typename c: __typename }", None, "invalid_query"),
    "introspection": ("{ __schema { queryType { name } } }", None, "invalid_query"),
    "unknown field": ("{ deals { nope } }", None, "invalid_query"),
    "too costly": (PAGE, {"n": 100}, "query_too_costly"),
}
LIMITED = {
    "graphql_max_depth": 4,
    "graphql_max_aliases": 2,
    "graphql_max_cost": 100,
    "graphql_introspection": False,
}


@pytest.mark.parametrize("name", REFUSED)
def test_a_refused_document_is_refused_again_from_the_cache(
    settings: Settings, calls: Calls, name: str
) -> None:
    query, variables, code = REFUSED[name]
    schema = _schema(settings, **LIMITED)

    first, second = _run(schema, query, variables), _run(schema, query, variables)

    assert first.data is None and second.data is None
    assert set(_codes(first)) == {code}
    assert _errors(second) == _errors(first)
    assert (calls.parse, calls.validate) == (1, 1)


def test_a_document_over_the_token_limit_is_parsed_and_refused_every_time(
    settings: Settings, calls: Calls
) -> None:
    schema = _schema(settings, graphql_max_tokens=100)
    query = "{ " + "__typename " * 100 + "}"

    results = [_run(schema, query) for _ in range(2)]

    for result in results:
        (error,) = _errors(result)
        assert "more than 100 tokens" in error["message"]
        assert error["extensions"]["code"] == "invalid_query"
    # Never kept: a refusal at parse is no document to keep.
    assert (calls.parse, calls.validate) == (2, 0)


def test_a_document_refused_for_its_cost_passes_with_fewer_items_and_is_refused_again(
    settings: Settings, calls: Calls
) -> None:
    schema = _schema(settings, graphql_max_cost=100)

    results = [_run(schema, PAGE, {"n": n}) for n in (100, 1, 100, 50, 1)]

    assert [_codes(result) for result in results] == [
        ["query_too_costly"],
        [],
        ["query_too_costly"],
        ["query_too_costly"],
        [],
    ]
    assert _errors(results[2]) == _errors(results[0])
    assert _errors(results[3])[0]["message"] != _errors(results[0])[0]["message"]
    # Validated once over the budget (with the refusal's place among the errors) and once
    # within it, both for good.
    assert (calls.parse, calls.validate, calls.cost_plan) == (1, 2, 1)


# --- cost ----------------------------------------------------------------------------------


def test_the_cost_follows_each_requests_variables(settings: Settings, calls: Calls) -> None:
    schema = _schema(settings)

    def estimated(variables: dict[str, Any]) -> int:
        result = _run(schema, PAGE, variables)
        assert result.errors is None, result.errors
        assert result.extensions is not None
        value: int = result.extensions["cost"]["estimated"]
        return value

    one, ten, hundred = estimated({"n": 1}), estimated({"n": 10}), estimated({"n": 100})

    assert one < ten < hundred
    assert estimated({"n": 10}) == ten
    assert calls.cost_plan == 1


def test_the_cost_plan_gives_what_the_walk_through_the_document_gives(
    settings: Settings,
) -> None:
    schema = _schema(settings)
    _run(schema, "{ __typename }")
    graphql_schema = schema.documents.schema  # learnt from Strawberry's validation
    assert graphql_schema is not None
    # deals: 1 + a x edges; edges: 1 + node; node: 1 + customers (1 + 25 x id) + activities
    # (1 + b x id) = 28 + b.
    document = parse(
        "query ($a: Int, $b: Int!) { deals(first: $a) { edges { node {"
        " customers { id } activities(first: $b) { id } } } } }"
    )
    plan = cost_plan(graphql_schema, document)

    assert plan.estimate({"a": 3, "b": 4}) == 1 + 3 * (1 + 1 + 26 + 1 + 4)
    assert plan.estimate({"b": 4}) == 1 + 100 * (29 + 4)  # a variable not given: the maximum
    assert plan.estimate({"a": 0, "b": "x"}) == 1 + 1 * (29 + 100)  # at least one item
    assert estimate_cost(graphql_schema, document, {"a": 3, "b": 4}) == 100


# --- bounds --------------------------------------------------------------------------------


def test_the_cache_holds_at_most_its_size_dropping_the_least_recently_used(
    settings: Settings, calls: Calls
) -> None:
    schema = _schema(settings, graphql_document_cache_size=2)
    a, b, c = ("{ __typename }", "{ a: __typename }", "{ b: __typename }")

    parses = []
    for query in (a, b, a, c, a, b):  # c drops b (a was used since); b comes back, dropping a
        before = calls.parse
        assert _run(schema, query).errors is None
        parses.append(calls.parse - before)

    assert parses == [1, 1, 0, 1, 0, 1]


def test_a_cache_of_size_zero_reads_every_document_anew(settings: Settings, calls: Calls) -> None:
    schema = _schema(settings, graphql_document_cache_size=0)

    for _ in range(3):
        assert _run(schema, "{ __typename }").errors is None

    assert (calls.parse, calls.validate) == (3, 3)


def test_the_cache_size_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEALBASE_GRAPHQL_DOCUMENT_CACHE_SIZE", "7")

    assert Settings().graphql_document_cache_size == 7


# --- the same errors as without a cache ----------------------------------------------------


class _CostAsBefore(SchemaExtension):
    """The cost guard as it was before the cache: a validation rule added per operation."""

    def __init__(self, budget: int) -> None:
        self.budget = budget

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        budget = self.budget

        class CostOverBudget(ValidationRule):
            def __init__(self, validation: ValidationContext) -> None:
                super().__init__(validation)
                estimate = estimate_cost(validation.schema, validation.document, context.variables)
                if estimate > budget:
                    validation.report_error(cost_refusal(estimate, budget))

        context.validation_rules = (*context.validation_rules, CostOverBudget)
        yield


def _uncached(settings: Settings) -> strawberry.Schema:
    """Strawberry's own pipeline with the limits as its extensions, as before the cache."""
    return DashboardSchema(
        query=Query,
        mutation=Mutation,
        extensions=[
            DomainErrors,
            lambda: QueryDepthLimiter(max_depth=settings.graphql_max_depth),
            lambda: MaxAliasesLimiter(max_alias_count=settings.graphql_max_aliases),
            lambda: MaxTokensLimiter(max_token_count=settings.graphql_max_tokens),
            DisableIntrospection,
            lambda: _CostAsBefore(settings.graphql_max_cost),
            _SkipExecution,
        ],
        config=StrawberryConfig(scalar_map={BigInt: BIG_INT_SCALAR}),
    )


def _many_unknown_arguments(count: int) -> str:
    return "{ __typename(" + ", ".join(f"a{n}: 1" for n in range(count)) + ") }"


COMPARED = [
    ("{ __typename }", None),
    (PAGE, {"n": 1}),
    (PAGE, {"n": 100}),
    ("{ deals(first: 1) { edges { node { customers { deals(first: 1) { id } } } } } }", None),
    ("{ a: __typename b: __typename c: __typename }", None),
    ("{ __schema { queryType { name } } }", None),
    ('{ __type(name: "Deal") { name } }', None),
    ("{ deals { nope } }", None),
    ("{ deals { ", None),
    ("{ " + "__typename " * 1001 + "}", None),
    ('mutation { createCustomer(input: {lastName: "x"}) { nope } }', None),
    ("query ($n: Int!) { deals(first: $n) { edges { node { id } } } }", {"n": "many"}),
    # Every limit at once, and an unknown field.
    (
        "query ($n: Int!) { a: deals(first: $n) { edges { node { customers { deals(first: 100)"
        " { id nope } } } } } b: __typename c: __typename __schema { types { name } } }",
        {"n": 100},
    ),
    # Validation gives up after 100 errors, the cost refusal counting as one of them.
    (_many_unknown_arguments(150), None),
    ("{ " + " ".join(f"f{n}" for n in range(150)) + " }", None),
]


@pytest.mark.parametrize(("query", "variables"), COMPARED)
def test_every_answer_is_the_one_strawberry_gives_without_the_cache(
    settings: Settings, query: str, variables: dict[str, Any] | None
) -> None:
    limited = settings.model_copy(
        update={**LIMITED, "graphql_max_tokens": 1000, "graphql_document_cache_size": 10}
    )
    cached = _schema(limited)
    expected = _run(_uncached(limited), query, variables)

    for _ in range(2):  # read, then from the cache
        result = _run(cached, query, variables)
        assert (result.data, _errors(result)) == (expected.data, _errors(expected))
