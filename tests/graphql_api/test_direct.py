"""A query whose document is kept is answered without Strawberry's request machinery
(``graphql_api.direct``), with the very bytes Strawberry answers, a field's error included,
each field run once; what it does not take (a refusal before anything runs) goes through
Strawberry, counted once."""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from dealbase.db.database import Database
from dealbase.graphql_api.compiled import PreparedRead
from dealbase.graphql_api.context import GraphQLContext
from dealbase.graphql_api.execution import CompilingExecutionContext
from dealbase.graphql_api.schema import DashboardSchema
from tests.depth import SHARED_FIXTURES
from tests.graphql_api.support import GRAPHQL
from tests.graphql_api.test_compiled_reads import API, Shop, operations, shop
from tests.support import build_tenant

__all__ = ["shop"]

PAGE = """
query Page($first: Int!) {
  customers(first: $first) {
    pageInfo { hasNextPage endCursor }
    edges { cursor node { id lastName deals(first: 2) { id name } } }
  }
}"""


class StrawberryRuns:
    """How many operations Strawberry's schema executed while counting."""

    def __init__(self) -> None:
        self.count = 0


@pytest.fixture
def strawberry_runs(monkeypatch: pytest.MonkeyPatch) -> StrawberryRuns:
    runs = StrawberryRuns()
    execute = DashboardSchema.execute

    async def counted(self: DashboardSchema, *args: Any, **kwargs: Any) -> Any:
        runs.count += 1
        return await execute(self, *args, **kwargs)

    monkeypatch.setattr(DashboardSchema, "execute", counted)
    return runs


def _counter(metrics: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{key}="{value}"' for key, value in labels.items())
    found = re.search(rf"^{name}\{{{re.escape(wanted)}\}} (\S+)$", metrics, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


@given(data=st.data())
@SHARED_FIXTURES
def test_a_kept_document_is_answered_as_strawberry_answers_it(
    data: st.DataObject, client: TestClient, shop: Shop, strawberry_runs: StrawberryRuns
) -> None:
    document, variables = data.draw(operations(shop))
    headers = data.draw(st.sampled_from([shop.world.keys[0].headers, shop.tenant_wide]))
    body = {"query": document, "variables": variables}

    first = client.post(GRAPHQL, json=body, headers=headers)
    runs_before = strawberry_runs.count
    again = client.post(GRAPHQL, json=body, headers=headers)

    assert (again.status_code, again.headers["content-type"]) == (
        first.status_code,
        first.headers["content-type"],
    )
    assert again.content == first.content, document
    # Only a request refused before anything runs (no data) goes through Strawberry again.
    answered_directly = "data" in first.json()
    assert strawberry_runs.count - runs_before == (0 if answered_directly else 1), document


@given(data=st.data())
@SHARED_FIXTURES
def test_a_planned_body_answers_each_caller_as_the_same_request_parsed_anew(
    data: st.DataObject, client: TestClient, shop: Shop
) -> None:
    """A body answered whole by compiled reads keeps its plan (its reads with its arguments);
    the same bytes from another caller run that plan for that caller, and answer what the
    same request in other bytes, parsed and executed anew, answers that caller."""
    document, variables = data.draw(operations(shop))
    callers = [shop.world.keys[0].headers, shop.world.keys[1].headers, shop.tenant_wide]
    planning, asking = data.draw(st.permutations(callers))[:2]
    body = orjson.dumps({"query": document, "variables": variables})
    spaced = json.dumps({"query": document, "variables": variables}, indent=1).encode()
    as_json = {"Content-Type": "application/json"}

    client.post(GRAPHQL, content=body, headers={**planning, **as_json})
    client.post(GRAPHQL, content=spaced, headers={**asking, **as_json})  # the document kept
    planned = client.post(GRAPHQL, content=body, headers={**asking, **as_json})
    parsed = client.post(GRAPHQL, content=spaced, headers={**asking, **as_json})

    assert (planned.status_code, planned.headers["content-type"]) == (
        parsed.status_code,
        parsed.headers["content-type"],
    )
    assert planned.content == parsed.content, document


def test_a_planned_body_is_answered_without_parsing_or_executing_it_again(
    client: TestClient,
    shop: Shop,
    strawberry_runs: StrawberryRuns,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = {"query": PAGE, "variables": {"first": 3}, "operationName": "Page"}
    headers = shop.world.keys[0].headers
    first = client.post(GRAPHQL, json=body, headers=headers)  # the document kept
    assert client.post(GRAPHQL, json=body, headers=headers).content == first.content  # planned
    builds = []
    build = CompilingExecutionContext.build

    def counted(*args: Any, **kwargs: Any) -> Any:
        builds.append(args)
        return build(*args, **kwargs)

    monkeypatch.setattr(CompilingExecutionContext, "build", counted)
    monkeypatch.setattr(orjson, "loads", lambda *_: pytest.fail("the body parsed again"))
    runs_before = strawberry_runs.count

    again = client.post(GRAPHQL, json=body, headers=headers)

    assert again.content == first.content
    assert (builds, strawberry_runs.count) == ([], runs_before)


def test_a_planned_body_naming_a_department_the_caller_cannot_see_is_refused_as_before(
    client: TestClient, shop: Shop, strawberry_runs: StrawberryRuns
) -> None:
    own, other = shop.world.keys[0].headers, shop.world.keys[1].headers
    department = str(shop.world.departments[0].id)
    body = {
        "query": "query($d: UUID) { customers(filter: {departmentId: $d}) "
        "{ totalCount edges { node { lastName } } } }",
        "variables": {"d": department},
    }
    for _ in range(3):  # the document kept, the body planned, the plan run
        seen = client.post(GRAPHQL, json=body, headers=own)
        assert seen.json()["data"]["customers"]["totalCount"] > 0, seen.text
    runs_before = strawberry_runs.count

    refused = client.post(GRAPHQL, json=body, headers=other)

    assert refused.json()["data"] is None
    assert [error["extensions"]["code"] for error in refused.json()["errors"]] == ["not_found"]
    assert strawberry_runs.count == runs_before


def test_a_direct_answer_is_counted_once_as_an_operation_and_by_root_field(
    client: TestClient, shop: Shop, strawberry_runs: StrawberryRuns
) -> None:
    body = {"query": PAGE, "variables": {"first": 3}, "operationName": "Page"}
    headers = shop.world.keys[0].headers
    client.post(GRAPHQL, json=body, headers=headers)  # the document kept
    metrics = client.get("/metrics").text
    operations_before = _counter(
        metrics, "dealbase_graphql_operations_total", operation="Page", type="query"
    )
    fields_before = _counter(
        metrics, "dealbase_graphql_root_fields_total", field="customers", path="compiled"
    )
    runs_before = strawberry_runs.count

    for _ in range(3):
        assert client.post(GRAPHQL, json=body, headers=headers).status_code == 200

    metrics = client.get("/metrics").text
    assert strawberry_runs.count == runs_before
    assert (
        _counter(metrics, "dealbase_graphql_operations_total", operation="Page", type="query")
        == operations_before + 3
    )
    assert (
        _counter(metrics, "dealbase_graphql_root_fields_total", field="customers", path="compiled")
        == fields_before + 3
    )


def test_a_direct_answer_takes_the_media_type_the_client_prefers(
    client: TestClient, shop: Shop, strawberry_runs: StrawberryRuns
) -> None:
    body = {"query": PAGE, "variables": {"first": 2}}
    headers = {**shop.world.keys[0].headers, "Accept": "application/graphql-response+json"}
    first = client.post(GRAPHQL, json=body, headers=headers)
    runs_before = strawberry_runs.count
    again = client.post(GRAPHQL, json=body, headers=headers)

    assert strawberry_runs.count == runs_before
    assert again.headers["content-type"] == "application/graphql-response+json"
    assert again.headers["vary"] == "Accept"
    assert again.content == first.content


class Runs:
    """How many reads the request's context ran (resolvers' and compiled ones alike), and how
    many compiled reads ran."""

    def __init__(self) -> None:
        self.reads = 0
        self.compiled = 0


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> Runs:
    counted = Runs()
    run, compiled = GraphQLContext.run, PreparedRead.run

    async def counted_run(self: GraphQLContext, *args: Any, **kwargs: Any) -> Any:
        counted.reads += 1
        return await run(self, *args, **kwargs)

    async def counted_compiled(self: PreparedRead, *args: Any, **kwargs: Any) -> Any:
        counted.compiled += 1
        return await compiled(self, *args, **kwargs)

    monkeypatch.setattr(GraphQLContext, "run", counted_run)
    monkeypatch.setattr(PreparedRead, "run", counted_compiled)
    return counted


def _field_errors() -> list[dict[str, Any]]:
    unknown = "00000000-0000-4000-8000-000000000000"
    return [
        # A compiled field refused for its cursor, beside one that answers.
        {
            "query": "query($after: String) { deals(after: $after) { totalCount }"
            " customers(first: 1) { totalCount } }",
            "variables": {"after": "not-a-cursor"},
        },
        # A compiled lookup of a row the caller cannot see (non-null: the data is null).
        {"query": "query($id: UUID!) { customer(id: $id) { id } }", "variables": {"id": unknown}},
        # A resolver's error (a department not known) beside a compiled field.
        {
            "query": "query($d: UUID) { steps(departmentId: $d) { id } deals { totalCount } }",
            "variables": {"d": unknown},
        },
    ]


def test_a_kept_document_with_a_field_error_is_answered_once_as_strawberry_answers_it(
    client: TestClient, shop: Shop, strawberry_runs: StrawberryRuns, runs: Runs
) -> None:
    """Each field runs once, one way: an error of one is its answer, not a reason to run the
    request again through Strawberry."""
    headers = shop.world.keys[0].headers
    for body in _field_errors():
        reads, compiled = runs.reads, runs.compiled
        first = client.post(GRAPHQL, json=body, headers=headers)  # a new text: Strawberry's
        by_strawberry = (runs.reads - reads, runs.compiled - compiled)
        runs_before, reads, compiled = strawberry_runs.count, runs.reads, runs.compiled

        again = client.post(GRAPHQL, json=body, headers=headers)

        assert "errors" in again.json(), again.text
        assert (again.status_code, again.content) == (first.status_code, first.content)
        assert strawberry_runs.count == runs_before
        assert (runs.reads - reads, runs.compiled - compiled) == by_strawberry


def test_an_unexpected_failure_of_a_compiled_read_is_answered_once(
    client: TestClient,
    shop: Shop,
    strawberry_runs: StrawberryRuns,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Directly, planned or through Strawberry: one INTERNAL error at the field, its read run
    once, no resolver asked instead (it would answer the page: the data would not be null)."""
    body = {"query": PAGE, "variables": {"first": 2}}
    headers = shop.world.keys[0].headers
    client.post(GRAPHQL, json=body, headers=headers)  # the document kept
    client.post(GRAPHQL, json=body, headers=headers)  # the body planned
    failures = []

    async def failing(self: PreparedRead, *args: Any, **kwargs: Any) -> str:
        failures.append(self)
        raise RuntimeError("the database went away")

    monkeypatch.setattr(PreparedRead, "run", failing)
    runs_before = strawberry_runs.count
    planned = client.post(GRAPHQL, json=body, headers=headers)
    direct = client.post(GRAPHQL, json={**body, "operationName": None}, headers=headers)
    through_strawberry = client.post(GRAPHQL, json={**body, "query": f"{PAGE} "}, headers=headers)

    for answered in (planned, direct, through_strawberry):
        assert answered.status_code == 200
        assert answered.json()["data"] is None
        errors = answered.json()["errors"]
        assert [(e["path"], e["extensions"]["code"]) for e in errors] == [
            (["customers"], "INTERNAL")
        ]
    assert len(failures) == 3
    assert strawberry_runs.count == runs_before + 1


def test_a_kept_document_over_its_budget_goes_through_strawberry(
    client: TestClient, shop: Shop, strawberry_runs: StrawberryRuns
) -> None:
    headers = shop.world.keys[0].headers
    over_budget = {"query": PAGE, "variables": {"first": 100_000}}
    first = client.post(GRAPHQL, json=over_budget, headers=headers)
    runs_before = strawberry_runs.count
    again = client.post(GRAPHQL, json=over_budget, headers=headers)

    assert "errors" in again.json()
    assert again.content == first.content
    assert strawberry_runs.count == runs_before + 1


def test_a_kept_document_in_a_body_strawberry_refuses_is_refused_as_before(
    client: TestClient, shop: Shop, strawberry_runs: StrawberryRuns
) -> None:
    body = {"query": PAGE, "variables": {"first": 2}}
    headers = shop.world.keys[0].headers
    assert client.post(GRAPHQL, json=body, headers=headers).status_code == 200
    runs_before = strawberry_runs.count

    as_text = client.post(
        GRAPHQL,
        content=orjson.dumps(body),
        headers={**headers, "Content-Type": "text/plain"},
    )

    assert as_text.status_code == 400
    assert as_text.headers["content-type"] == "application/problem+json"
    assert strawberry_runs.count == runs_before


def test_an_integer_past_64_bits_is_written_as_strawberry_writes_it(
    resolvers_only: TestClient, database: Database, strawberry_runs: StrawberryRuns
) -> None:
    """orjson refuses an integer past 64 bits (here a step's total volume, summed by a
    resolver): the answer is written as Strawberry's router writes it, and not run again."""
    world = build_tenant(database)
    headers = world.key.headers
    for _ in range(5):
        created = resolvers_only.post(
            f"{API}/deals", json={"name": "Big", "volume": 2**62}, headers=headers
        )
        assert created.status_code == 201, created.text
    body = {"query": "{ pipeline { steps { totalVolume } } }"}
    first = resolvers_only.post(GRAPHQL, json=body, headers=headers)
    runs_before = strawberry_runs.count
    again = resolvers_only.post(GRAPHQL, json=body, headers=headers)

    assert again.content == first.content
    steps = again.json()["data"]["pipeline"]["steps"]
    assert sum(step["totalVolume"] for step in steps) == 5 * 2**62
    assert strawberry_runs.count == runs_before
