"""The lists of customers, deals and activities filter on the tenant's custom fields through
their filter's ``customFields``, as REST's lists do through ``custom_fields.*``: the same
parameters without that prefix, judged by the same rules, narrowing the page, its cursors and
its ``totalCount``; the compiled reads and the resolvers answer the same, errors included."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from tests.graphql_api.support import codes_of, data_of, field_errors, gql
from tests.rest_api.test_custom_fields import define, tenant_wide
from tests.support import TenantWorld, build_tenant

API = "/api/v1/integration"
CUSTOMERS = """
query ($filter: CustomerFilter, $first: Int = 25, $after: String) {
  customers(filter: $filter, first: $first, after: $after) {
    totalCount
    pageInfo { hasNextPage endCursor }
    edges { cursor node { lastName customFields } }
  }
}"""
DEALS = """
query ($filter: DealFilter, $order: DealOrder = CREATED_ASC) {
  deals(filter: $filter, orderBy: $order) { totalCount edges { node { name } } }
}"""
ACTIVITIES = """
query ($filter: ActivityFilter) {
  activities(filter: $filter) { totalCount edges { node { subject } } }
}"""


@dataclass(frozen=True)
class Catalog:
    """A tenant's filterable fields of each record, its records, and the selects' options."""

    world: TenantWorld
    options: dict[str, str]  # option id by label


@pytest.fixture(scope="module")
def catalog(client: TestClient, database: Database) -> Catalog:
    """Six customers N1..N6 with seats 1..6, codes C-1..C-6 (unique), tiers Gold, Silver,
    Bronze, Gold, Silver, Bronze, tags, revenues, renewals and a remark that no index serves;
    deals D1..D3 by region, activities A1..A3 by score. Read only."""
    world = build_tenant(database)
    options = _defined(client, tenant_wide(database, world))
    post = _poster(client, world)
    for number, tier in enumerate(("Gold", "Silver", "Bronze") * 2, start=1):
        values = {
            "seats": number,
            "code": f"C-{number}",
            "tier": options[tier],
            "tags": [options["a"] if number % 2 else options["b"]],
            "revenue": f"{number}00.50",
            "renewal": f"2027-0{number}-15",
            "signed_at": f"2026-0{number}-01T10:00:00Z",
            "remark": "same",
        }
        post("customers", {"last_name": f"N{number}", "custom_fields": values})
    customer = post("customers", {"last_name": "Activities' own"})
    for number, region in enumerate(("north", "south", "east"), start=1):
        post("deals", {"name": f"D{number}", "custom_fields": {"region": region}})
        activity = {"type": "call", "customer_id": customer["id"], "subject": f"A{number}"}
        post("activities", {**activity, "custom_fields": {"score": number * 10}})
    return Catalog(world, options)


def _defined(client: TestClient, admin: dict[str, str]) -> dict[str, str]:
    """The catalog's fields; the selects' option ids by label."""
    for name, kind in (
        ("seats", "integer"),
        ("revenue", "decimal"),
        ("renewal", "date"),
        ("signed_at", "timestamp"),
    ):
        define(client, admin, name=name, label=name, type=kind, filterable=True)
    define(client, admin, name="code", label="Code", type="text", unique=True)
    define(client, admin, name="remark", label="Remark", type="text")
    define(client, admin, record="deal", name="region", label="Region", type="text", unique=True)
    score = {"name": "score", "label": "Score", "type": "integer", "filterable": True}
    define(client, admin, record="activity", **score)
    options = {}
    for name, kind, labels in (
        ("tier", "single_select", ("Gold", "Silver", "Bronze")),
        ("tags", "multi_select", ("a", "b")),
    ):
        chosen = [{"label": label} for label in labels]
        select = define(
            client, admin, name=name, label=name, type=kind, options=chosen, filterable=True
        )
        options.update({option["label"]: option["id"] for option in select["options"]})
    return options


def _poster(client: TestClient, world: TenantWorld) -> Callable[[str, dict[str, Any]], Any]:
    def post(plural: str, body: dict[str, Any]) -> Any:
        response = client.post(f"{API}/{plural}", json=body, headers=world.key.headers)
        assert response.status_code == 201, response.text
        return response.json()

    return post


def _compiled_count(client: TestClient, field: str) -> float:
    """How many times the root field ``field`` was answered by its compiled read."""
    line = f'dealbase_graphql_root_fields_total{{field="{field}",path="compiled"}} '
    found = [each for each in client.get("/metrics").text.splitlines() if each.startswith(line)]
    return float(found[0][len(line) :]) if found else 0.0


def _both(
    client: TestClient,
    resolvers_only: TestClient,
    query: str,
    variables: dict[str, Any],
    headers: dict[str, str],
    field: str,
) -> dict[str, Any]:
    """The body of ``query``, answered by its compiled read, which must be what the resolvers
    answer."""
    before = _compiled_count(client, field)
    compiled = gql(client, query, variables, headers)
    assert _compiled_count(client, field) == before + 1
    assert gql(resolvers_only, query, variables, headers) == compiled
    return compiled


def _names(body: dict[str, Any], field: str = "customers") -> tuple[int, list[str]]:
    assert "errors" not in body, body["errors"]
    listed = body["data"][field]
    nodes = [edge["node"] for edge in listed["edges"]]
    return listed["totalCount"], [
        node.get("lastName") or node.get("name") or node["subject"] for node in nodes
    ]


@pytest.mark.parametrize(
    ("custom", "expected"),
    [
        ({"code": "C-3"}, ["N3"]),
        ({"seats.gte": 2, "seats.lte": 4}, ["N2", "N3", "N4"]),
        ({"seats": "5"}, ["N5"]),  # as REST's query parameter gives it
        ({"tier": ["Gold", "Bronze"]}, ["N1", "N3", "N4", "N6"]),
        ({"tier": "Silver", "seats.gte": 3}, ["N5"]),
        ({"tags": ["b"]}, ["N2", "N4", "N6"]),
        ({"revenue.gte": "200.50", "revenue.lte": 400.5}, ["N2", "N3", "N4"]),
        ({"renewal.lte": "2027-02-15"}, ["N1", "N2"]),
        ({"signed_at.gte": "2026-06-01T10:00:00Z"}, ["N6"]),
        ({"seats.gte": 7}, []),
        ({}, ["N1", "N2", "N3", "N4", "N5", "N6", "Activities' own"]),
    ],
)
def test_customers_are_filtered_by_equality_ranges_and_membership_counted_alike(
    client: TestClient,
    resolvers_only: TestClient,
    catalog: Catalog,
    custom: dict[str, Any],
    expected: list[str],
) -> None:
    def ids(value: Any) -> Any:
        if isinstance(value, list):
            return [catalog.options[label] for label in value]
        return catalog.options.get(value, value) if isinstance(value, str) else value

    variables = {"filter": {"customFields": {key: ids(value) for key, value in custom.items()}}}

    body = _both(
        client, resolvers_only, CUSTOMERS, variables, catalog.world.key.headers, "customers"
    )

    assert _names(body) == (len(expected), expected)


def test_deals_and_activities_are_filtered_on_their_own_fields_both_ways(
    client: TestClient, resolvers_only: TestClient, catalog: Catalog
) -> None:
    headers = catalog.world.key.headers
    deals = {"filter": {"customFields": {"region": "south"}}, "order": "VOLUME_DESC"}
    activities = {"filter": {"customFields": {"score.gte": 15}, "externalId": None}}

    found_deals = _both(client, resolvers_only, DEALS, deals, headers, "deals")
    found_activities = _both(client, resolvers_only, ACTIVITIES, activities, headers, "activities")

    assert _names(found_deals, "deals") == (1, ["D2"])
    assert _names(found_activities, "activities") == (2, ["A2", "A3"])


def test_a_literal_filter_in_the_document_filters_as_a_variable_does(
    client: TestClient, resolvers_only: TestClient, catalog: Catalog
) -> None:
    query = '{ customers(filter: {customFields: {code: "C-4"}}) { totalCount edges { node { lastName } } } }'

    body = _both(client, resolvers_only, query, {}, catalog.world.key.headers, "customers")

    assert _names(body) == (1, ["N4"])


@pytest.mark.parametrize("path", ["compiled", "resolvers"])
def test_a_filtered_list_pages_on_under_the_same_custom_filters_only(
    client: TestClient, resolvers_only: TestClient, catalog: Catalog, path: str
) -> None:
    sender = client if path == "compiled" else resolvers_only
    headers = catalog.world.key.headers
    gold_or_bronze = [catalog.options["Gold"], catalog.options["Bronze"]]
    variables: dict[str, Any] = {"filter": {"customFields": {"tier": gold_or_bronze}}, "first": 3}
    first = data_of(sender, CUSTOMERS, variables, headers)["customers"]
    after = first["pageInfo"]["endCursor"]

    same = data_of(sender, CUSTOMERS, {**variables, "after": after}, headers)["customers"]
    other_filter = {"filter": {"customFields": {"tier": [catalog.options["Gold"]]}}}
    other = gql(sender, CUSTOMERS, {**other_filter, "first": 3, "after": after}, headers)
    unfiltered = gql(sender, CUSTOMERS, {"first": 3, "after": after}, headers)

    assert [edge["node"]["lastName"] for edge in first["edges"]] == ["N1", "N3", "N4"]
    assert (first["totalCount"], first["pageInfo"]["hasNextPage"]) == (4, True)
    assert [edge["node"]["lastName"] for edge in same["edges"]] == ["N6"]
    assert (same["totalCount"], same["pageInfo"]["hasNextPage"]) == (4, False)
    for refused in (other, unfiltered):
        assert codes_of(refused) == ["validation_failed"]
        assert field_errors(refused["errors"][0]["extensions"]["errors"]) == [
            ("after", "invalid_cursor")
        ]


def test_both_paths_make_the_same_cursors_of_a_filtered_list(
    client: TestClient, resolvers_only: TestClient, catalog: Catalog
) -> None:
    variables = {"filter": {"customFields": {"seats.gte": 2}}, "first": 2}
    headers = catalog.world.key.headers

    compiled = data_of(client, CUSTOMERS, variables, headers)["customers"]
    cursor = compiled["pageInfo"]["endCursor"]
    resolved_next = data_of(resolvers_only, CUSTOMERS, {**variables, "after": cursor}, headers)

    assert compiled == data_of(resolvers_only, CUSTOMERS, variables, headers)["customers"]
    assert [e["node"]["lastName"] for e in resolved_next["customers"]["edges"]] == ["N4", "N5"]


@pytest.mark.parametrize(
    ("custom", "expected"),
    [
        ({"nope": 1}, {("customFields.nope", "unknown_field")}),
        ({"remark": "same"}, {("customFields.remark", "not_filterable")}),
        ({"remark.gte": "a"}, {("customFields.remark.gte", "not_filterable")}),
        (
            {"seats.gte": "many", "seats.between": 1, "code.gte": "C"},
            {
                ("customFields.seats.gte", "wrong_type"),
                ("customFields.seats.between", "unknown_field"),
                ("customFields.code.gte", "unknown_field"),
            },
        ),
        ({"seats": 2.5}, {("customFields.seats", "invalid")}),
        # JSON's number past 64 bits arrives as a float, which no integer is.
        ({"seats": 123456789012345678901234567890}, {("customFields.seats", "invalid")}),
        ({"tier": ["not-an-id"]}, {("customFields.tier[0]", "invalid_id")}),
        ({"tier": []}, {("customFields.tier", "too_few_items")}),
        ({"renewal.gte": "2027-02-30"}, {("customFields.renewal.gte", "invalid_date")}),
        ([{"seats": 1}], {("customFields", "wrong_type")}),
    ],
)
def test_a_bad_custom_filter_is_refused_naming_it_as_rest_does_both_ways(
    client: TestClient,
    resolvers_only: TestClient,
    catalog: Catalog,
    custom: Any,
    expected: set[tuple[str, str]],
) -> None:
    variables = {"filter": {"customFields": custom}}
    headers = catalog.world.key.headers

    compiled = gql(client, CUSTOMERS, variables, headers)
    resolved = gql(resolvers_only, CUSTOMERS, variables, headers)

    assert compiled == resolved
    assert compiled["data"] is None
    assert codes_of(compiled) == ["validation_failed"]
    assert set(field_errors(compiled["errors"][0]["extensions"]["errors"])) == expected


def test_a_literal_integer_past_64_bits_is_refused_as_out_of_range(
    client: TestClient, catalog: Catalog
) -> None:
    query = "{ customers(filter: {customFields: {seats: 123456789012345678901234567890}}) { totalCount } }"

    body = gql(client, query, {}, catalog.world.key.headers)

    assert codes_of(body) == ["validation_failed"]
    assert field_errors(body["errors"][0]["extensions"]["errors"]) == [
        ("customFields.seats", "out_of_range")
    ]


@pytest.mark.parametrize("path", ["compiled", "resolvers"])
def test_another_tenants_field_is_unknown_to_the_same_document(
    client: TestClient,
    resolvers_only: TestClient,
    catalog: Catalog,
    make_tenant: Callable[..., TenantWorld],
    path: str,
) -> None:
    sender = client if path == "compiled" else resolvers_only
    other = make_tenant()
    variables = {"filter": {"customFields": {"code": "C-1"}}}

    own = data_of(sender, CUSTOMERS, variables, catalog.world.key.headers)
    foreign = gql(sender, CUSTOMERS, variables, other.key.headers)

    assert own["customers"]["totalCount"] == 1
    assert codes_of(foreign) == ["validation_failed"]
    assert field_errors(foreign["errors"][0]["extensions"]["errors"]) == [
        ("customFields.code", "unknown_field")
    ]
