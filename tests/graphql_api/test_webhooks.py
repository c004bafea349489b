"""Webhook endpoints and their deliveries through GraphQL: the operations REST has, for a
tenant-wide dashboard key naming the department, with the same rules and error codes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient
from strawberry.utils.str_converters import to_camel_case

from dealbase.db.database import Database
from dealbase.platform.webhooks.delivery_models import Response
from tests.delivery_support import lease, new_endpoint, one_event_delivery, record
from tests.graphql_api.support import codes_of, data_of, gql, tenant_wide_headers
from tests.support import TenantWorld

API = "/api/v1/integration"
WEBHOOKS = f"{API}/webhooks"
ENDPOINT = "id departmentId url events enabled disabledReason description ordered version"
CREATE = f"""
mutation($input: WebhookEndpointInput!, $departmentId: UUID) {{
  createWebhookEndpoint(input: $input, departmentId: $departmentId) {{
    secret endpoint {{ {ENDPOINT} }}
  }}
}}
"""
PUBLIC_URL = "https://8.8.8.8/hooks"


def create(
    client: TestClient, headers: dict[str, str], department_id: str | None, **fields: Any
) -> dict[str, Any]:
    variables = {"input": {"url": PUBLIC_URL, "events": ["*"], **fields}}
    return gql(client, CREATE, {**variables, "departmentId": department_id}, headers)


def test_a_tenant_wide_key_manages_a_departments_endpoint(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    headers = tenant_wide_headers(database, world)
    department_id = str(world.department.id)

    issued = data_of(
        client,
        CREATE,
        {"input": {"url": PUBLIC_URL, "events": ["deal.created"]}, "departmentId": department_id},
        headers,
    )["createWebhookEndpoint"]
    endpoint = issued["endpoint"]
    assert issued["secret"].startswith("whsec_")
    assert endpoint["departmentId"] == department_id and endpoint["events"] == ["deal.created"]
    # What GraphQL wrote, REST reads (without the secret).
    rest = client.get(f"{WEBHOOKS}/{endpoint['id']}", headers=world.key.headers)
    assert rest.status_code == 200 and "secret" not in rest.json()

    listed = data_of(
        client,
        "query { webhookEndpoints { totalCount edges { node { id } } } }",
        headers=headers,
    )["webhookEndpoints"]
    assert listed["totalCount"] == 1 and listed["edges"][0]["node"]["id"] == endpoint["id"]

    updated = data_of(
        client,
        f"mutation($id: UUID!) {{ updateWebhookEndpoint(id: $id, changes: {{enabled: false,"
        f' description: "Board"}}) {{ {ENDPOINT} }} }}',
        {"id": endpoint["id"]},
        headers,
    )["updateWebhookEndpoint"]
    assert (updated["enabled"], updated["description"], updated["version"]) == (False, "Board", 2)

    rotated = data_of(
        client,
        "mutation($id: UUID!) { rotateWebhookSecret(id: $id) {"
        " secret endpoint { previousSecretExpiresAt } } }",
        {"id": endpoint["id"]},
        headers,
    )["rotateWebhookSecret"]
    assert rotated["secret"] != issued["secret"]
    assert rotated["endpoint"]["previousSecretExpiresAt"] is not None

    deleted = data_of(
        client,
        "mutation($id: UUID!) { deleteWebhookEndpoint(id: $id) }",
        {"id": endpoint["id"]},
        headers,
    )
    assert deleted == {"deleteWebhookEndpoint": endpoint["id"]}
    assert client.get(f"{WEBHOOKS}/{endpoint['id']}", headers=world.key.headers).status_code == 404


def test_a_tenant_wide_key_must_name_the_department_to_create(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    result = create(client, tenant_wide_headers(database, world), None)

    assert codes_of(result) == ["validation_failed"]
    assert [e["field"] for e in result["errors"][0]["extensions"]["errors"]] == ["departmentId"]


def test_an_inward_url_is_refused_naming_url(client: TestClient, world: TenantWorld) -> None:
    result = create(client, world.key.headers, None, url="https://localhost/hook")

    assert codes_of(result) == ["validation_failed"]
    assert [(e["field"], e["code"]) for e in result["errors"][0]["extensions"]["errors"]] == [
        ("url", "address_not_allowed")
    ]


def test_bad_events_are_refused_as_on_rest(client: TestClient, world: TenantWorld) -> None:
    result = create(client, world.key.headers, None, events=["*", "deal.created"])

    assert codes_of(result) == ["validation_failed"]
    assert [(e["field"], e["code"]) for e in result["errors"][0]["extensions"]["errors"]] == [
        ("events", "invalid_choice")
    ]


def test_another_departments_endpoint_is_not_found(client: TestClient, make_tenant: Any) -> None:
    owner = make_tenant(departments=2)
    endpoint_id = data_of(
        client,
        CREATE,
        {"input": {"url": PUBLIC_URL, "events": ["*"]}, "departmentId": None},
        owner.key.headers,
    )["createWebhookEndpoint"]["endpoint"]["id"]

    result = gql(
        client,
        "mutation($id: UUID!) { rotateWebhookSecret(id: $id) { secret } }",
        {"id": endpoint_id},
        owner.keys[1].headers,
    )

    assert codes_of(result) == ["not_found"]


# --- deliveries -------------------------------------------------------------------------------

DELIVERY = (
    "id webhookEndpointId eventId eventType state attemptCount nextAttemptAt createdAt"
    " deliveredAt attempts { attemptedAt statusCode durationMs error }"
)
DELIVERIES = f"""
query($endpointId: UUID!, $first: Int!, $after: String) {{
  webhookDeliveries(endpointId: $endpointId, first: $first, after: $after) {{
    totalCount pageInfo {{ hasNextPage endCursor }} edges {{ node {{ {DELIVERY} }} }}
  }}
}}
"""
SEND_TEST = (
    f"mutation($endpointId: UUID!) {{ sendTestWebhook(endpointId: $endpointId) {{ {DELIVERY} }} }}"
)
REDELIVER = f"""
mutation($endpointId: UUID!, $deliveryId: UUID!) {{
  redeliverWebhookDelivery(endpointId: $endpointId, deliveryId: $deliveryId) {{ {DELIVERY} }}
}}
"""


def moment(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def test_a_tenant_wide_key_sends_tests_and_pages_the_log_newest_first(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    headers = tenant_wide_headers(database, world)
    endpoint_id = new_endpoint(client, world.key, events=["deal.created"])

    sent = [
        data_of(client, SEND_TEST, {"endpointId": endpoint_id}, headers)["sendTestWebhook"]
        for _ in range(3)
    ]
    first = data_of(client, DELIVERIES, {"endpointId": endpoint_id, "first": 2}, headers)
    after = first["webhookDeliveries"]["pageInfo"]["endCursor"]
    second = data_of(
        client, DELIVERIES, {"endpointId": endpoint_id, "first": 2, "after": after}, headers
    )

    test = sent[0]
    assert (test["eventType"], test["eventId"], test["webhookEndpointId"]) == (
        "webhook.test",
        None,
        endpoint_id,
    )
    assert (test["state"], test["attemptCount"], test["attempts"]) == ("PENDING", 0, [])
    assert test["deliveredAt"] is None
    assert abs(moment(test["nextAttemptAt"]) - datetime.now(UTC)) < timedelta(minutes=1)
    pages = [first["webhookDeliveries"], second["webhookDeliveries"]]
    assert [page["totalCount"] for page in pages] == [3, 3]
    assert [page["pageInfo"]["hasNextPage"] for page in pages] == [True, False]
    assert [edge["node"] for page in pages for edge in page["edges"]] == sent[::-1]


def in_graphql_terms(rest: dict[str, Any]) -> dict[str, Any]:
    """REST's delivery as GraphQL names and types it: camelCase, the state an enum, moments as
    datetimes (GraphQL's DateTime is written otherwise)."""
    shown: dict[str, Any] = {}
    for name, value in rest.items():
        if name == "attempts":
            value = [in_graphql_terms(attempt) for attempt in value]
        elif name == "state":
            value = value.upper()
        elif name.endswith("_at") and value is not None:
            value = moment(value)
        shown[to_camel_case(name)] = value
    return shown


def with_moments(node: dict[str, Any]) -> dict[str, Any]:
    """A GraphQL delivery with its moments as datetimes."""
    shown: dict[str, Any] = {}
    for name, value in node.items():
        if name == "attempts":
            value = [with_moments(attempt) for attempt in value]
        elif name.endswith("At") and value is not None:
            value = moment(value)
        shown[name] = value
    return shown


def test_the_log_shows_what_rest_shows(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    start = datetime.now(UTC)
    endpoint_id, outgoing = one_event_delivery(client, database, world, start)
    record(database, world, outgoing, Response(503, 40, "The endpoint answered 503."), start)
    data_of(client, SEND_TEST, {"endpointId": endpoint_id}, world.key.headers)

    connection = data_of(
        client, DELIVERIES, {"endpointId": endpoint_id, "first": 5}, world.key.headers
    )["webhookDeliveries"]
    rest = client.get(f"{WEBHOOKS}/{endpoint_id}/deliveries", headers=world.key.headers).json()

    nodes = [with_moments(edge["node"]) for edge in connection["edges"]]
    assert nodes == [in_graphql_terms(delivery) for delivery in rest["data"]]
    assert [node["eventType"] for node in nodes] == ["webhook.test", "customer.created"]
    assert nodes[1]["attempts"] == [
        {
            "attemptedAt": start,
            "statusCode": 503,
            "durationMs": 40,
            "error": "The endpoint answered 503.",
        }
    ]


def test_redeliver_makes_a_failed_delivery_pending_and_due_now(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    start = datetime.now(UTC)
    endpoint_id, outgoing = one_event_delivery(client, database, world, start)
    # Answered 410: the delivery fails at once (and the endpoint is disabled).
    record(database, world, outgoing, Response(410, 9, "The endpoint answered 410."), start)
    client.patch(f"{WEBHOOKS}/{endpoint_id}", json={"enabled": True}, headers=world.key.headers)
    variables = {"endpointId": endpoint_id, "deliveryId": str(outgoing.delivery_id)}

    redelivered = data_of(client, REDELIVER, variables, world.key.headers)[
        "redeliverWebhookDelivery"
    ]

    assert redelivered["id"] == str(outgoing.delivery_id)
    assert (redelivered["state"], redelivered["deliveredAt"]) == ("PENDING", None)
    assert abs(moment(redelivered["nextAttemptAt"]) - datetime.now(UTC)) < timedelta(minutes=1)
    assert [a["statusCode"] for a in redelivered["attempts"]] == [410]
    (again,) = lease(database, world, datetime.now(UTC))
    assert again.delivery_id == outgoing.delivery_id


def test_another_departments_or_tenants_deliveries_are_not_found(
    client: TestClient, make_tenant: Any, database: Database
) -> None:
    owner = make_tenant(departments=2)
    other_tenant = make_tenant()
    endpoint_id = new_endpoint(client, owner.key)
    delivery_id = data_of(client, SEND_TEST, {"endpointId": endpoint_id}, owner.key.headers)[
        "sendTestWebhook"
    ]["id"]
    own_variables = {"endpointId": endpoint_id, "deliveryId": delivery_id, "first": 5}

    for headers in (owner.keys[1].headers, tenant_wide_headers(database, other_tenant)):
        for operation in (DELIVERIES, SEND_TEST, REDELIVER):
            result = gql(client, operation, own_variables, headers)
            assert codes_of(result) == ["not_found"], operation
            assert result["data"] is None
    # A delivery of the other department's endpoint, under the caller's own endpoint.
    theirs = new_endpoint(client, owner.keys[1])
    result = gql(
        client, REDELIVER, {"endpointId": theirs, "deliveryId": delivery_id}, owner.keys[1].headers
    )
    assert codes_of(result) == ["not_found"]
    log = data_of(client, DELIVERIES, own_variables, owner.key.headers)["webhookDeliveries"]
    assert log["totalCount"] == 1
