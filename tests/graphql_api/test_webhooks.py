"""Webhook endpoints through GraphQL: the operations REST has, for a tenant-wide dashboard key
naming the department, with the same rules and error codes."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from dealbase.tenancy.database import Database
from tests.graphql_api.support import codes_of, data_of, gql, tenant_wide_headers
from tests.support import TenantWorld

WEBHOOKS = "/api/v1/integration/webhooks"
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
