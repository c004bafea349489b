"""GraphQL carries the tenant's custom fields: written through every mutation's
``customFields`` (judged by the platform, each bad field named as REST's 422 names it), read
back as REST's JSON shows them by the resolvers (a record read whole, by a loader or in a
nested list) and by the compiled reads alike, null for a tenant without fields; the
definitions read by ``customFieldDefinitions``; and the live changes and boards carry them."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.graphql_api.custom_fields import CustomFieldType
from dealbase.platform.custom_fields.models import FieldType
from tests.custom_field_support import define_scalars, define_select
from tests.graphql_api.live_support import BOARD, CHANGES, live_socket
from tests.graphql_api.support import codes_of, data_of, field_errors, gql
from tests.rest_api.test_custom_fields import define, tenant_wide
from tests.support import TenantWorld

API = "/api/v1/integration"
CREATE = """
mutation ($input: CustomerInput!) { createCustomer(input: $input) { id customFields } }
"""
CUSTOMER = "query ($id: UUID!) { customer(id: $id) { id lastName customFields } }"
CUSTOMERS = "{ customers { edges { node { id customFields } } } }"
VALUES = {
    "contract": "C-1",
    "seats": 12,
    "revenue": "1234.50",
    "vip": True,
    "renewal": "2027-01-31",
    "signed_at": "2026-12-01T10:00:00Z",
}


@pytest.fixture
def admin_headers(database: Database, world: TenantWorld) -> dict[str, str]:
    return tenant_wide(database, world)


@pytest.fixture
def options(client: TestClient, admin_headers: dict[str, str]) -> dict[str, str]:
    """A customer field of each type worth telling apart, an activity field, and the selects'
    option ids by label."""
    define_scalars(client, admin_headers, "customer")
    tier = define_select(client, admin_headers, "customer", "tier", ["Gold", "Silver"])
    tags = define_select(client, admin_headers, "customer", "tags", ["a", "b"], multi=True)
    define(client, admin_headers, record="activity", name="outcome", label="Outcome", type="text")
    return {**tier, **tags}


def _shown(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` as REST shows them back: every field of the tenant, a timestamp's six
    fractional digits."""
    every = dict.fromkeys((*VALUES, "tier", "tags"))
    shown = {**every, **values}
    if shown["signed_at"] is not None:
        shown["signed_at"] = shown["signed_at"].replace(":00Z", ":00.000000Z")
    return shown


def _created(client: TestClient, world: TenantWorld, values: dict[str, Any]) -> dict[str, Any]:
    variables = {"input": {"lastName": "Ada", "customFields": values}}
    created: dict[str, Any] = data_of(client, CREATE, variables, world.key.headers)[
        "createCustomer"
    ]
    return created


def _both(
    client: TestClient,
    resolvers_only: TestClient,
    query: str,
    variables: dict[str, Any],
    headers: dict[str, str],
) -> dict[str, Any]:
    """The data of ``query`` compiled, which must be what the resolvers answer."""
    compiled = data_of(client, query, variables, headers)
    assert data_of(resolvers_only, query, variables, headers) == compiled
    return compiled


def _compiled_count(client: TestClient, field: str) -> float:
    """How many times the root field ``field`` was answered by its compiled read."""
    line = f'dealbase_graphql_root_fields_total{{field="{field}",path="compiled"}} '
    found = [each for each in client.get("/metrics").text.splitlines() if each.startswith(line)]
    return float(found[0][len(line) :]) if found else 0.0


def test_a_customer_created_with_custom_fields_reads_back_as_rest_shows_it_both_ways(
    client: TestClient,
    resolvers_only: TestClient,
    world: TenantWorld,
    options: dict[str, str],
) -> None:
    values = {**VALUES, "tier": options["Gold"], "tags": [options["b"], options["a"]]}
    headers = world.key.headers

    created = _created(client, world, values)

    rest = client.get(f"{API}/customers/{created['id']}", headers=headers).json()
    assert created["customFields"] == rest["custom_fields"] == _shown(values)
    compiled = _compiled_count(client, "customer")
    one = _both(client, resolvers_only, CUSTOMER, {"id": created["id"]}, headers)
    assert one["customer"]["customFields"] == _shown(values)
    assert _compiled_count(client, "customer") == compiled + 1
    listed = _both(client, resolvers_only, CUSTOMERS, {}, headers)
    assert listed["customers"]["edges"] == [{"node": created}]


def test_an_update_changes_the_custom_fields_it_gives_and_keeps_the_others(
    client: TestClient, world: TenantWorld, options: dict[str, str]
) -> None:
    created = _created(client, world, {"seats": 1, "contract": "C"})

    updated = data_of(
        client,
        "mutation ($id: UUID!, $changes: CustomerChanges!) {"
        " updateCustomer(id: $id, changes: $changes) { customFields } }",
        {"id": created["id"], "changes": {"customFields": {"seats": 2, "vip": False}}},
        world.key.headers,
    )["updateCustomer"]

    assert updated["customFields"] == _shown({"seats": 2, "contract": "C", "vip": False})


def test_upserts_and_batches_write_custom_fields_and_name_a_bad_one_in_their_errors(
    client: TestClient, world: TenantWorld, options: dict[str, str]
) -> None:
    headers = world.key.headers
    upserted = data_of(
        client,
        'mutation ($input: CustomerInput!) { upsertCustomer(externalId: "x-1", input: $input)'
        " { outcome customer { customFields } } }",
        {"input": {"lastName": "Ada", "customFields": {"seats": 3}}},
        headers,
    )["upsertCustomer"]
    batch = data_of(
        client,
        "mutation ($operations: [CustomerOperationInput!]!) {"
        " batchCustomers(operations: $operations) { results { outcome customer { customFields }"
        " error { code errors { field code } } } } }",
        {
            "operations": [
                {
                    "op": "UPSERT",
                    "externalId": "x-1",
                    "data": {"lastName": "Ada", "customFields": {"seats": 4}},
                },
                {"op": "CREATE", "data": {"lastName": "B", "customFields": {"signed_at": 5}}},
            ]
        },
        headers,
    )["batchCustomers"]

    assert upserted == {"outcome": "CREATED", "customer": {"customFields": _shown({"seats": 3})}}
    done, failed = batch["results"]
    assert (done["outcome"], done["customer"]) == (
        "UPDATED",
        {"customFields": _shown({"seats": 4})},
    )
    assert failed["outcome"] == "FAILED"
    assert field_errors(failed["error"]["errors"]) == [
        ("operations[1].data.customFields.signed_at", failed["error"]["errors"][0]["code"])
    ]


def test_every_bad_custom_value_is_a_validation_error_naming_the_field_as_rest_does(
    client: TestClient, world: TenantWorld, options: dict[str, str]
) -> None:
    bad = {"seats": "12", "vip": 1, "tier": options["a"], "signed_at": "soon", "nope": 1}

    body = gql(
        client, CREATE, {"input": {"lastName": "Ada", "customFields": bad}}, world.key.headers
    )
    rest = client.post(
        f"{API}/customers",
        json={"last_name": "Ada", "custom_fields": bad},
        headers=world.key.headers,
    )

    assert codes_of(body) == ["validation_failed"]
    shown = {(e["field"], e["code"]) for e in body["errors"][0]["extensions"]["errors"]}
    assert rest.status_code == 422, rest.text
    assert shown == {
        (error["field"].replace("custom_fields.", "customFields."), error["code"])
        for error in rest.json()["errors"]
    }
    assert {field for field, _ in shown} == {
        "customFields.seats",
        "customFields.vip",
        "customFields.tier",
        "customFields.signed_at",
        "customFields.nope",
    }
    listed = data_of(client, CUSTOMERS, {}, world.key.headers)
    assert listed["customers"]["edges"] == []


def test_a_record_read_by_a_loader_or_in_a_nested_list_shows_its_custom_fields_both_ways(
    client: TestClient,
    resolvers_only: TestClient,
    world: TenantWorld,
    options: dict[str, str],
) -> None:
    headers = world.key.headers
    customer = _created(client, world, {"seats": 7, "tier": options["Silver"]})
    activity = data_of(
        client,
        "mutation ($input: ActivityInput!) { createActivity(input: $input) { id customFields } }",
        {
            "input": {
                "type": "CALL",
                "customerId": customer["id"],
                "customFields": {"outcome": "won"},
            }
        },
        headers,
    )["createActivity"]
    deal = data_of(
        client,
        'mutation { createDeal(input: {name: "D"}) { id } }',
        {},
        headers,
    )["createDeal"]
    data_of(
        client,
        "mutation ($d: UUID!, $c: UUID!) { linkCustomer(dealId: $d, customerId: $c) { id } }",
        {"d": deal["id"], "c": customer["id"]},
        headers,
    )

    activity_read = _both(
        client,
        resolvers_only,
        "query ($id: UUID!) { activity(id: $id) { customFields customer { id customFields } } }",
        {"id": activity["id"]},
        headers,
    )
    nested = _both(
        client,
        resolvers_only,
        "query ($id: UUID!, $c: UUID!) { deal(id: $id) { customFields customers { id"
        " customFields } activities { customFields } } customer(id: $c) { activities {"
        " customFields } deals { customers { customFields } } } }",
        {"id": deal["id"], "c": customer["id"]},
        headers,
    )

    assert activity["customFields"] == {"outcome": "won"}
    assert activity_read["activity"] == {
        "customFields": {"outcome": "won"},
        "customer": customer,
    }
    assert nested["deal"] == {
        "customFields": None,
        "customers": [customer],
        "activities": [],
    }
    assert nested["customer"] == {
        "activities": [{"customFields": {"outcome": "won"}}],
        "deals": [{"customers": [{"customFields": customer["customFields"]}]}],
    }


def test_a_tenant_without_fields_shows_null_and_cannot_give_another_tenants_field(
    client: TestClient,
    resolvers_only: TestClient,
    world: TenantWorld,
    make_tenant: Any,
    options: dict[str, str],
) -> None:
    other = make_tenant()
    headers = other.key.headers
    created = data_of(client, CREATE, {"input": {"lastName": "B"}}, headers)["createCustomer"]

    refused = gql(
        client, CREATE, {"input": {"lastName": "B", "customFields": {"seats": 1}}}, headers
    )

    assert created["customFields"] is None
    one = _both(client, resolvers_only, CUSTOMER, {"id": created["id"]}, headers)
    assert one["customer"]["customFields"] is None
    listed = _both(client, resolvers_only, CUSTOMERS, {}, headers)
    assert listed["customers"]["edges"] == [{"node": created}]
    assert codes_of(refused) == ["validation_failed"]
    assert [e["field"] for e in refused["errors"][0]["extensions"]["errors"]] == [
        "customFields.seats"
    ]
    definitions = data_of(client, "{ customFieldDefinitions { name } }", {}, headers)
    assert definitions == {"customFieldDefinitions": []}


def test_a_deals_custom_fields_are_its_tenants_deal_fields(
    client: TestClient,
    resolvers_only: TestClient,
    world: TenantWorld,
    admin_headers: dict[str, str],
) -> None:
    define(client, admin_headers, record="deal", name="region", label="Region", type="text")
    deal = client.post(f"{API}/deals", json={"name": "D"}, headers=world.key.headers).json()

    read = _both(
        client,
        resolvers_only,
        "query ($id: UUID!) { deal(id: $id) { customFields } deals { edges { node {"
        " customFields } } } }",
        {"id": deal["id"]},
        world.key.headers,
    )

    assert read["deal"] == {"customFields": {"region": None}}
    assert read["deals"]["edges"] == [{"node": {"customFields": {"region": None}}}]


def test_the_definitions_query_gives_each_fields_typed_shape_to_any_key_of_the_tenant(
    client: TestClient, world: TenantWorld, options: dict[str, str], admin_headers: dict[str, str]
) -> None:
    query = """
    query ($record: CustomFieldRecord) {
      customFieldDefinitions(record: $record) {
        id record name label type maxLength required unique filterable archived
        options { id label archived }
      }
    }"""

    every = data_of(client, query, {}, world.key.headers)["customFieldDefinitions"]
    customers = data_of(client, query, {"record": "CUSTOMER"}, admin_headers)
    activities = data_of(client, query, {"record": "ACTIVITY"}, world.key.headers)

    assert [field["name"] for field in every] == [*VALUES, "tier", "tags", "outcome"]
    assert customers["customFieldDefinitions"] == every[:-1]
    assert [field["name"] for field in activities["customFieldDefinitions"]] == ["outcome"]
    tier = every[6]
    assert (tier["record"], tier["type"], tier["label"]) == ("CUSTOMER", "SINGLE_SELECT", "Tier")
    assert tier["options"] == [
        {"id": options["Gold"], "label": "Gold", "archived": False},
        {"id": options["Silver"], "label": "Silver", "archived": False},
    ]
    assert (every[0]["type"], every[0]["maxLength"], every[0]["options"]) == ("TEXT", 255, None)
    assert {field["type"] for field in every} == {
        "TEXT",
        "INTEGER",
        "DECIMAL",
        "BOOLEAN",
        "DATE",
        "TIMESTAMP",
        "SINGLE_SELECT",
        "MULTI_SELECT",
    }


def test_the_graphql_field_types_are_the_platforms() -> None:
    assert [member.value for member in CustomFieldType] == [member.value for member in FieldType]


def test_a_live_change_carries_the_records_custom_fields(
    client: TestClient, world: TenantWorld, options: dict[str, str]
) -> None:
    headers = world.key.headers
    with live_socket(client, init=headers) as socket:
        socket.subscribe("1", CHANGES)
        # In place once the board, subscribed after it, has answered (test_websocket.py).
        socket.subscribe("board", BOARD)
        socket.next_data("board")
        created = _created(client, world, {"seats": 5, "tags": [options["a"]]})
        change = socket.next_data("1")["changes"]

    assert change["recordId"] == created["id"]
    assert change["record"]["custom_fields"] == _shown({"seats": 5, "tags": [options["a"]]})


def test_each_result_of_a_board_subscription_shows_the_deal_fields_the_tenant_has_then(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, record="deal", name="region", label="Region", type="text")
    board = "subscription { pipelineBoard { steps { deals { name customFields } } } }"
    headers = world.key.headers
    with live_socket(client, init=headers) as socket:
        socket.subscribe("1", board)
        # The board now, before any deal: the subscription is in place.
        assert socket.next_data("1")["pipelineBoard"]["steps"][0]["deals"] == []
        client.post(f"{API}/deals", json={"name": "A"}, headers=headers)
        first = socket.next_data("1")
        define(client, admin_headers, record="deal", name="zone", label="Zone", type="text")
        client.post(f"{API}/deals", json={"name": "B"}, headers=headers)
        later = socket.next_data("1")

    assert first["pipelineBoard"]["steps"][0]["deals"] == [
        {"name": "A", "customFields": {"region": None}}
    ]
    assert later["pipelineBoard"]["steps"][0]["deals"] == [
        {"name": "A", "customFields": {"region": None, "zone": None}},
        {"name": "B", "customFields": {"region": None, "zone": None}},
    ]
