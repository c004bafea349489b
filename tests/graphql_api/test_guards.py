"""What GraphQL refuses before running a query (depth, aliases, tokens, estimated cost), the page
size cap, the cost reported on every response, masked unexpected errors, and the switches for
introspection and the GraphiQL page."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import Database
from dealbase.platform.tables import customers, deals
from tests.graphql_api import support
from tests.support import TenantWorld

GRAPHQL = "/graphql"
API = "/api/v1/integration"

AppWith = Callable[..., TestClient]


@pytest.fixture(scope="module")
def app_with(settings: Settings) -> Iterator[AppWith]:
    """A client of an app built from the test settings with ``update`` applied, one per update."""
    made: dict[tuple[tuple[str, Any], ...], TestClient] = {}
    with ExitStack() as stack:

        def build(**update: Any) -> TestClient:
            token = tuple(sorted(update.items()))
            if token not in made:
                app = create_app(settings.model_copy(update=update))
                made[token] = stack.enter_context(TestClient(app, raise_server_exceptions=False))
            return made[token]

        yield build


def gql(
    client: TestClient,
    world: TenantWorld,
    query: str,
    variables: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    return support.gql(client, query, variables, {**world.key.headers, **(headers or {})})


def data_of(result: dict[str, Any]) -> dict[str, Any]:
    assert "errors" not in result, result["errors"]
    data: dict[str, Any] = result["data"]
    return data


def refusal(result: dict[str, Any]) -> dict[str, Any]:
    """The one error of an operation refused before it ran: no ``data`` entry at all."""
    assert "data" not in result, result
    (error,) = result["errors"]
    found: dict[str, Any] = error
    return found


def row_counts(database: Database, world: TenantWorld) -> tuple[int, int]:
    with database.unit_of_work(world.tenant.scope) as uow:
        count = uow.connection.execute
        return (
            count(select(func.count()).select_from(deals)).scalar_one(),
            count(select(func.count()).select_from(customers)).scalar_one(),
        )


# --- depth -------------------------------------------------------------------------------

# Depth counts the levels below the operation's root fields: 3 here (customers, deals, id) ...
AT_THE_LIMIT = (
    'mutation { createDeal(input: {name: "d", customers: [{lastName: "c"}]})'
    " { customers { deals(first: 1) { id } } } }"
)
# ... and 4 here (customers, deals, step, id).
OVER_THE_LIMIT = (
    'mutation { createDeal(input: {name: "d", customers: [{lastName: "c"}]})'
    " { customers { deals(first: 1) { step { id } } } } }"
)


def test_a_query_deeper_than_the_limit_is_refused_before_it_runs(
    app_with: AppWith, database: Database, world: TenantWorld
) -> None:
    limited = app_with(graphql_max_depth=3)

    assert data_of(gql(limited, world, AT_THE_LIMIT))["createDeal"]["customers"][0]["deals"]
    before = row_counts(database, world)
    error = refusal(gql(limited, world, OVER_THE_LIMIT))

    assert "exceeds maximum operation depth of 3" in error["message"]
    assert error["extensions"]["code"] == "invalid_query"
    assert row_counts(database, world) == before


def test_the_default_depth_admits_ordinary_dashboard_queries(
    client: TestClient, world: TenantWorld
) -> None:
    query = "{ deals { edges { node { customers { deals(first: 1) { step { id } } } } } } }"

    assert data_of(gql(client, world, query))["deals"]["edges"] == []


# --- aliases -----------------------------------------------------------------------------


def aliased_customers(count: int) -> str:
    return (
        "mutation { "
        + " ".join(
            f'c{n}: createCustomer(input: {{lastName: "n{n}"}}) {{ id }}' for n in range(count)
        )
        + " }"
    )


def test_more_aliases_than_the_limit_are_refused_before_running(
    app_with: AppWith, database: Database, world: TenantWorld
) -> None:
    limited = app_with(graphql_max_aliases=2)

    assert set(data_of(gql(limited, world, aliased_customers(2)))) == {"c0", "c1"}
    before = row_counts(database, world)
    error = refusal(gql(limited, world, aliased_customers(3)))

    assert error["message"] == "3 aliases found. Allowed: 2"
    assert error["extensions"]["code"] == "invalid_query"
    assert row_counts(database, world) == before


# --- tokens ------------------------------------------------------------------------------


def with_tokens(count: int) -> str:
    """A mutation of exactly ``count`` tokens (at least 16) creating one customer."""
    fields = count - 16
    assert fields >= 0
    return 'mutation { createCustomer(input: {lastName: "t"}) { id ' + "lastName " * fields + "} }"


def test_a_document_of_more_tokens_than_the_limit_is_refused_before_running(
    app_with: AppWith, database: Database, world: TenantWorld
) -> None:
    limited = app_with(graphql_max_tokens=100)

    assert data_of(gql(limited, world, with_tokens(100)))["createCustomer"]["lastName"] == "t"
    before = row_counts(database, world)
    error = refusal(gql(limited, world, with_tokens(101)))

    assert "more than 100 tokens" in error["message"]
    assert error["extensions"]["code"] == "invalid_query"
    assert row_counts(database, world) == before


# --- page size ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "path"),
    [
        ("{ customers(first: 101) { totalCount } }", ["customers"]),
        ("{ deals(first: 101) { totalCount } }", ["deals"]),
        ("{ activities(first: 101) { totalCount } }", ["activities"]),
        ("{ employees(first: 101) { totalCount } }", ["employees"]),
        ("{ deals(first: 0) { totalCount } }", ["deals"]),
        ("{ pipeline { steps { deals(first: 101) { id } } } }", ["pipeline", "steps", 0, "deals"]),
    ],
)
def test_first_over_100_is_validation_failed_naming_first(
    client: TestClient, world: TenantWorld, query: str, path: list[Any]
) -> None:
    result = gql(client, world, query)

    (error, *_) = result["errors"]
    assert error["path"] == path
    assert error["extensions"]["code"] == "validation_failed"
    assert [(item["field"], item["code"]) for item in error["extensions"]["errors"]] == [
        ("first", "out_of_range")
    ]
    assert "limit" not in error["message"]
    assert error["extensions"]["errors"][0]["message"] == "first is 1 to 100."


def test_first_of_100_is_served(client: TestClient, world: TenantWorld) -> None:
    result = data_of(gql(client, world, "{ deals(first: 100) { totalCount } }"))

    assert result == {"deals": {"totalCount": 0}}


# --- cost --------------------------------------------------------------------------------

PAGE = "query ($n: Int!) { deals(first: $n) { edges { node { id customers { id } } } } }"


def cost_of(result: dict[str, Any]) -> dict[str, Any]:
    cost: dict[str, Any] = result["extensions"]["cost"]
    return cost


def test_every_response_reports_the_estimated_cost_and_the_budget(
    client: TestClient, settings: Settings, world: TenantWorld
) -> None:
    results = [
        gql(client, world, "{ departments { id } }"),
        gql(client, world, 'mutation { createCustomer(input: {lastName: "x"}) { id } }'),
        gql(client, world, f'{{ deal(id: "{uuid.uuid4()}") {{ id }} }}'),  # an error
        gql(client, world, "{ deals(first: 101) { totalCount } }"),
    ]

    for result in results:
        cost = cost_of(result)
        assert set(cost) == {"estimated", "budget"}
        assert cost["budget"] == settings.graphql_max_cost
        assert isinstance(cost["estimated"], int) and cost["estimated"] > 0


def test_the_estimate_grows_with_the_page_size_and_the_fields_asked(
    client: TestClient, world: TenantWorld
) -> None:
    def estimate(query: str, variables: dict[str, Any] | None = None) -> int:
        result = gql(client, world, query, variables)
        assert "errors" not in result, result["errors"]
        estimated: int = cost_of(result)["estimated"]
        return estimated

    one = estimate(PAGE, {"n": 1})
    ten = estimate(PAGE, {"n": 10})
    hundred = estimate(PAGE, {"n": 100})
    just_ids = estimate("{ deals(first: 100) { edges { node { id } } } }")
    with_more = estimate(
        "{ deals(first: 100) { edges { node { id step { id name } employee { id name } } } } }"
    )

    assert one < ten < hundred
    assert just_ids < with_more
    assert estimate("{ departments { id } }") < one


def test_a_query_over_the_budget_is_refused_before_running(
    app_with: AppWith, world: TenantWorld
) -> None:
    limited = app_with(graphql_max_cost=100)

    cheap = gql(limited, world, PAGE, {"n": 1})
    expensive = gql(limited, world, PAGE, {"n": 100})

    assert data_of(cheap) == {"deals": {"edges": []}}
    assert cost_of(cheap)["estimated"] <= 100
    error = refusal(expensive)
    assert error["extensions"]["code"] == "query_too_costly"
    cost = cost_of(expensive)
    assert cost["budget"] == 100 and cost["estimated"] > 100
    assert str(cost["estimated"]) in error["message"] and "100" in error["message"]


def test_an_estimate_past_64_bits_is_reported_whole(client: TestClient, world: TenantWorld) -> None:
    # JSON numbers have no size limit; the estimate of nested pages of 2^31 items has 94 bits.
    huge = "first: 2147483647"
    result = gql(
        client,
        world,
        f"{{ deals({huge}) {{ edges {{ node {{ customers {{ deals({huge}) {{"
        f" activities({huge}) {{ id }} }} }} }} }} }} }}",
    )
    assert refusal(result)["extensions"]["code"] == "query_too_costly"
    assert cost_of(result)["estimated"] >= 2**64


def test_a_mutation_over_the_budget_writes_nothing(
    client: TestClient, database: Database, world: TenantWorld
) -> None:
    before = row_counts(database, world)
    mutation = (
        'mutation { createDeal(input: {name: "d", customers: [{lastName: "c"}]}) {'
        " customers { deals(first: 100) { customers { deals(first: 100) { id } } } } } }"
    )

    result = gql(client, world, mutation)

    assert refusal(result)["extensions"]["code"] == "query_too_costly"
    assert cost_of(result)["estimated"] > cost_of(result)["budget"]
    assert row_counts(database, world) == before


def test_the_budget_counts_every_alias(app_with: AppWith, world: TenantWorld) -> None:
    limited = app_with(graphql_max_cost=100)
    page = "deals(first: 30) { edges { node { id } } }"

    assert "errors" not in gql(limited, world, f"{{ a: {page} }}")
    result = gql(limited, world, f"{{ a: {page} b: {page} c: {page} d: {page} }}")

    assert refusal(result)["extensions"]["code"] == "query_too_costly"


def test_the_budget_counts_fragments(app_with: AppWith, world: TenantWorld) -> None:
    limited = app_with(graphql_max_cost=100)
    query = (
        "query { deals(first: 100) { ...Page } }"
        " fragment Page on DealConnection { edges { node { id name } } }"
    )

    assert refusal(gql(limited, world, query))["extensions"]["code"] == "query_too_costly"


# --- unexpected errors -------------------------------------------------------------------


def test_unexpected_errors_are_masked_as_internal_with_the_request_id(
    client: TestClient, database: Database, world: TenantWorld
) -> None:
    customer = client.post(
        f"{API}/customers", json={"last_name": "Lovelace"}, headers=world.key.headers
    )
    assert customer.status_code == 201
    # The tenant's schema vanishes under a valid key: a failure no client input can cause.
    with database.engine.begin() as connection:
        connection.execute(text(f'DROP SCHEMA "{world.tenant.schema}" CASCADE'))
    rest = client.get(f"{API}/customers", headers=world.key.headers)
    assert (rest.status_code, rest.json()["code"]) == (500, "internal_error")
    request_id = f"masking-{uuid.uuid4().hex}"

    response = client.post(
        GRAPHQL,
        json={"query": "{ customers { totalCount edges { node { id lastName } } } }"},
        headers={**world.key.headers, "X-Request-Id": request_id},
    )

    assert response.status_code == 200
    assert response.headers["x-request-id"] == request_id
    result = response.json()
    assert result["data"] is None
    (error,) = result["errors"]
    assert error["extensions"] == {"code": "INTERNAL", "request_id": request_id}
    assert error["path"] == ["customers"]
    shown = str(result).lower()
    for detail in (world.tenant.schema, "relation", "does not exist", "select", "psycopg", "sql"):
        assert detail.lower() not in shown, detail


# --- introspection and GraphiQL ----------------------------------------------------------

INTROSPECTION = "{ __schema { queryType { name } } }"


def test_introspection_is_on_by_default(client: TestClient, world: TenantWorld) -> None:
    result = gql(client, world, INTROSPECTION)

    assert data_of(result) == {"__schema": {"queryType": {"name": "Query"}}}
    deal = data_of(gql(client, world, '{ __type(name: "Deal") { name } }'))
    assert deal == {"__type": {"name": "Deal"}}


def test_introspection_can_be_switched_off(app_with: AppWith, world: TenantWorld) -> None:
    closed = app_with(graphql_introspection=False)

    for query, field in (
        (INTROSPECTION, "__schema"),
        ('{ __type(name: "Deal") { name } }', "__type"),
    ):
        result = gql(closed, world, query)
        assert "data" not in result
        assert f"'{field}'" in result["errors"][0]["message"]
        for error in result["errors"]:
            assert "introspection has been disabled" in error["message"]
            assert error["extensions"]["code"] == "invalid_query"
    assert data_of(gql(closed, world, "{ __typename }")) == {"__typename": "Query"}
    assert data_of(gql(closed, world, "{ departments { name } }"))["departments"]


def graphiql(client: TestClient, headers: dict[str, str]) -> Any:
    return client.get(GRAPHQL, headers={"Accept": "text/html", **headers})


def test_the_graphiql_page_is_served_by_default(client: TestClient, world: TenantWorld) -> None:
    response = graphiql(client, world.key.headers)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert "graphiql" in response.text.lower()


def test_the_graphiql_page_opens_in_a_browser_without_a_key(client: TestClient) -> None:
    """A browser cannot send X-Api-Key when it opens the page; the IDE sends it with queries."""
    response = graphiql(client, {})

    assert response.status_code == 200, response.text
    assert "graphiql" in response.text.lower()


def test_the_graphiql_page_can_be_switched_off(app_with: AppWith, world: TenantWorld) -> None:
    closed = app_with(graphql_ide=False)

    response = graphiql(closed, world.key.headers)

    assert response.status_code == 404
    assert "graphiql" not in response.text.lower()
    served = closed.get(
        GRAPHQL,
        params={"query": "{ __typename }"},
        headers={"Accept": "application/json", **world.key.headers},
    )
    assert served.status_code == 200
    assert served.json()["data"] == {"__typename": "Query"}
