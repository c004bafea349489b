"""GET /openapi.json under the integration API: the caller's tenant's own OpenAPI document, the
public one with each record's ``custom_fields`` typed by the tenant's live fields, and only its
own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.platform.custom_fields.values import WHOLE_LIMIT
from dealbase.rest_api.tenant_openapi import DECIMAL_PATTERN
from tests.rest_api.test_custom_fields import FIELDS, define, tenant_wide
from tests.support import TenantWorld

DOCUMENT = "/api/v1/integration/openapi.json"
CUSTOMERS = "/api/v1/integration/customers"
NULL = {"type": "null"}


def tenant_document(client: TestClient, headers: dict[str, str]) -> dict[str, Any]:
    response = client.get(DOCUMENT, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    document: dict[str, Any] = response.json()
    return document


def schemas(document: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = document["components"]["schemas"]
    return found


def typed_values(document: dict[str, Any], schema: str) -> dict[str, Any]:
    """The object ``custom_fields`` of ``schema`` holds (its non-null branch in a body)."""
    shown: dict[str, Any] = schemas(document)[schema]["properties"]["custom_fields"]
    branches: list[dict[str, Any]] = shown.get("anyOf", [shown])
    (values,) = [branch for branch in branches if branch != NULL]
    return values


def value_of(property_schema: dict[str, Any]) -> dict[str, Any]:
    """A field's schema without its words and null: the type a value has."""
    (value,) = [
        branch for branch in property_schema.get("anyOf", [property_schema]) if branch != NULL
    ]
    return {key: item for key, item in value.items() if key not in ("title", "description")}


@pytest.fixture
def admin_headers(database: Database, world: TenantWorld) -> dict[str, str]:
    return tenant_wide(database, world)


def test_each_field_type_is_typed_in_the_customer_bodies_and_responses(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, name="contract", label="Contract", max_length=40)
    for name, kind in (
        ("contact", "email"),
        ("home", "url"),
        ("seats", "integer"),
        ("revenue", "decimal"),
        ("vip", "boolean"),
        ("renewal", "date"),
        ("signed_at", "timestamp"),
    ):
        define(client, admin_headers, name=name, label=name.title(), type=kind)
    options = [{"label": "Gold"}, {"label": "Silver"}]
    tier = define(
        client, admin_headers, name="tier", label="Tier", type="single_select", options=options
    )
    tags = define(
        client, admin_headers, name="tags", label="Tags", type="multi_select", options=options
    )

    document = tenant_document(client, world.key.headers)

    fields = typed_values(document, "CustomerFields")
    assert fields["type"] == "object" and fields["additionalProperties"] is False
    types = {name: value_of(schema) for name, schema in fields["properties"].items()}
    tier_ids = [option["id"] for option in tier["options"]]
    tag_ids = [option["id"] for option in tags["options"]]
    assert types["contract"] == {"type": "string", "maxLength": 40, "pattern": "^[^\\u0000]*$"}
    assert types["contact"]["type"] == "string" and types["contact"]["maxLength"] == 320
    assert "@" in types["contact"]["pattern"]
    assert types["home"] == {"type": "string", "maxLength": 2048, "pattern": "^[^\\u0000]*$"}
    assert types["seats"] == {"type": "integer", "minimum": -WHOLE_LIMIT, "maximum": WHOLE_LIMIT}
    assert types["revenue"] == {"type": "string", "pattern": DECIMAL_PATTERN}
    assert "a JSON number is accepted too" in fields["properties"]["revenue"]["description"]
    assert types["vip"] == {"type": "boolean"}
    assert types["renewal"] == {"type": "string", "format": "date"}
    assert types["signed_at"] == {"type": "string", "format": "date-time"}
    assert types["tier"] == {"type": "string", "enum": tier_ids}
    assert "Gold" in fields["properties"]["tier"]["description"]
    assert types["tags"] == {
        "type": "array",
        "items": {"type": "string", "enum": tag_ids},
        "uniqueItems": True,
        "maxItems": 2,
    }
    # Each optional field takes null; none is required, nor is custom_fields.
    assert all(NULL in schema["anyOf"] for schema in fields["properties"].values())
    assert "required" not in fields
    assert "custom_fields" not in schemas(document)["CustomerFields"].get("required", [])
    # A PATCH and a response type the same fields alike.
    assert typed_values(document, "CustomerPatch")["properties"] == fields["properties"]
    shown = typed_values(document, "CustomerOut")
    assert {name: value_of(schema) for name, schema in shown["properties"].items()} == types


def test_a_required_field_is_required_of_creates_and_upserts_never_of_a_patch(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, name="seats", label="Seats", type="integer", required=True)
    define(client, admin_headers, name="note_two", label="Note")

    document = tenant_document(client, world.key.headers)

    create = schemas(document)["CustomerFields"]
    assert "custom_fields" in create["required"]
    values = create["properties"]["custom_fields"]
    assert values["required"] == ["seats"]
    assert values["properties"]["seats"]["type"] == "integer"  # never null
    assert NULL in values["properties"]["note_two"]["anyOf"]
    patch = schemas(document)["CustomerPatch"]
    assert "custom_fields" not in patch.get("required", [])
    patched = typed_values(document, "CustomerPatch")
    assert "required" not in patched
    assert patched["properties"]["seats"]["type"] == "integer"  # left out, never null
    # A response shows every live field, each possibly null (a record older than the rule).
    out = schemas(document)["CustomerOut"]
    assert "custom_fields" in out["required"]
    shown = out["properties"]["custom_fields"]
    assert shown["required"] == ["seats", "note_two"]
    assert all(NULL in schema["anyOf"] for schema in shown["properties"].values())
    # The examples are the typed schemas': a create's gives the required field.
    content = document["paths"][CUSTOMERS]["post"]["requestBody"]["content"]
    assert content["application/json"]["example"]["custom_fields"] == {"seats": 12}


def test_a_record_kind_without_fields_shows_none_and_takes_only_an_empty_object(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, name="contract", label="Contract")

    document = tenant_document(client, world.key.headers)

    activity = schemas(document)["ActivityOut"]
    assert "custom_fields" not in activity["properties"]
    assert all("custom_fields" not in example for example in activity["examples"])
    body = typed_values(document, "ActivityFields")
    assert body == {"type": "object", "additionalProperties": False, "properties": {}}
    assert "custom_fields" not in schemas(document)["DealOut"]["properties"]
    # The examples show the tenant's fields, each with a value of its type.
    (example,) = schemas(document)["CustomerOut"]["examples"]
    assert example["custom_fields"] == {"contract": "Text"}


def test_the_server_answers_as_the_tenant_document_types_the_values(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, name="seats", label="Seats", type="integer")
    document = tenant_document(client, world.key.headers)
    seats = typed_values(document, "CustomerFields")["properties"]["seats"]
    assert value_of(seats)["type"] == "integer"

    accepted = client.post(
        CUSTOMERS, json={"last_name": "A", "custom_fields": {"seats": 3}}, headers=world.key.headers
    )
    refused = client.post(
        CUSTOMERS,
        json={"last_name": "A", "custom_fields": {"seats": "3"}},
        headers=world.key.headers,
    )

    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["custom_fields"] == {"seats": 3}
    assert refused.status_code == 422, refused.text


def test_another_tenants_fields_never_appear(
    client: TestClient,
    database: Database,
    world: TenantWorld,
    make_tenant: Callable[..., TenantWorld],
    admin_headers: dict[str, str],
) -> None:
    other: TenantWorld = make_tenant()
    define(client, admin_headers, name="ours", label="Ours")
    define(client, tenant_wide(database, other), name="theirs", label="Theirs")

    ours = tenant_document(client, world.key.headers)
    theirs = tenant_document(client, other.key.headers)

    assert list(typed_values(ours, "CustomerOut")["properties"]) == ["ours"]
    assert list(typed_values(theirs, "CustomerOut")["properties"]) == ["theirs"]
    assert str(world.tenant.id) in ours["info"]["title"]
    assert str(other.tenant.id) in theirs["info"]["title"]
    assert "Theirs" not in client.get(DOCUMENT, headers=world.key.headers).text


def test_archived_fields_and_options_are_left_out(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    kept = define(client, admin_headers, name="kept", label="Kept")
    gone = define(client, admin_headers, name="gone", label="Gone")
    tier = define(
        client,
        admin_headers,
        name="tier",
        label="Tier",
        type="single_select",
        options=[{"label": "Gold"}, {"label": "Lead"}],
    )
    gold, lead = tier["options"]
    for path, body in (
        (f"{FIELDS}/{gone['id']}", {"archived": True}),
        (f"{FIELDS}/{tier['id']}", {"options": [gold, {**lead, "archived": True}]}),
    ):
        changed = client.patch(path, json=body, headers=admin_headers)
        assert changed.status_code == 200, changed.text

    document = tenant_document(client, world.key.headers)

    properties = typed_values(document, "CustomerFields")["properties"]
    assert list(properties) == [kept["name"], "tier"]
    assert value_of(properties["tier"])["enum"] == [gold["id"]]
    assert "Lead" not in properties["tier"]["description"]


def test_a_change_of_the_definitions_shows_in_the_next_document(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    field = define(client, admin_headers, name="seats", label="Seats", type="integer")
    before = tenant_document(client, world.key.headers)
    assert tenant_document(client, world.key.headers) == before  # kept, the same

    relabelled = client.patch(
        f"{FIELDS}/{field['id']}", json={"label": "Places"}, headers=admin_headers
    )
    assert relabelled.status_code == 200, relabelled.text
    define(client, admin_headers, name="vip", label="VIP", type="boolean")
    after = tenant_document(client, world.key.headers)

    assert list(typed_values(before, "CustomerOut")["properties"]) == ["seats"]
    properties = typed_values(after, "CustomerOut")["properties"]
    assert list(properties) == ["seats", "vip"]
    assert properties["seats"]["title"] == "Places"


def test_any_key_of_the_tenant_reads_it_and_none_other(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, name="seats", label="Seats", type="integer")

    without = client.get(DOCUMENT)
    wrong = client.get(DOCUMENT, headers={**world.key.headers, "X-Api-Key": "dbk_wrong"})
    tenant_wide_key = tenant_document(client, admin_headers)

    assert without.status_code == 401, without.text
    assert without.headers["content-type"] == "application/problem+json"
    assert wrong.status_code == 401, wrong.text
    assert tenant_wide_key == tenant_document(client, world.key.headers)


def test_the_public_document_stays_free_of_any_tenants_fields(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, name="seats", label="Seats", type="integer")
    public_before = client.get("/openapi.json").json()

    tenant_document(client, world.key.headers)
    public = client.get("/openapi.json").json()

    assert public == public_before
    shown = public["components"]["schemas"]["CustomerOut"]["properties"]["custom_fields"]
    assert "properties" not in shown and "custom_fields" not in shown.get("required", [])
    assert "seats" not in client.get("/openapi.json").text


def test_a_created_activity_shows_every_custom_field_as_the_document_requires(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, record="activity", name="minutes", label="M", type="integer")
    define(client, admin_headers, record="activity", name="outcome", label="Outcome")
    document = tenant_document(client, world.key.headers)
    assert "custom_fields" in schemas(document)["ActivityOut"]["required"]
    customer = client.post(CUSTOMERS, json={"last_name": "A"}, headers=world.key.headers).json()

    created = client.post(
        "/api/v1/integration/activities",
        json={"type": "call", "customer_id": customer["id"], "custom_fields": {"minutes": 3}},
        headers=world.key.headers,
    )

    assert created.status_code == 201, created.text
    assert created.json()["custom_fields"] == {"minutes": 3, "outcome": None}


@pytest.mark.parametrize("seats", [-(2**63) - 1, 2**64])
def test_a_custom_integer_past_64_bits_is_refused_as_out_of_range(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str], seats: int
) -> None:
    # The document bounds an integer field to a signed 64-bit integer: past that is 422.
    define(client, admin_headers, name="seats", label="Seats", type="integer")

    response = client.post(
        CUSTOMERS,
        json={"last_name": "A", "custom_fields": {"seats": seats}},
        headers=world.key.headers,
    )

    assert response.status_code == 422, response.text


def test_a_deals_fields_are_typed_and_its_customers_show_none_of_theirs(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers, name="seats", label="Seats", type="integer")
    define(client, admin_headers, record="deal", name="closes_on", label="Closes", type="date")

    document = tenant_document(client, world.key.headers)

    for schema in ("DealCreate", "DealUpsert", "DealPatch", "DealOut"):
        assert list(typed_values(document, schema)["properties"]) == ["closes_on"], schema
    deal_out = schemas(document)["DealOut"]
    assert "custom_fields" in deal_out["required"]
    # A deal's new customers take the customer's fields; its customers show none.
    new_customers = schemas(document)["DealCreate"]["properties"]["customers"]["items"]
    assert new_customers == {"$ref": "#/components/schemas/CustomerFields"}
    assert deal_out["properties"]["customers"]["items"] == {
        "$ref": "#/components/schemas/DealCustomerOut"
    }
    assert "custom_fields" not in schemas(document)["DealCustomerOut"]["properties"]
    created = client.post(
        "/api/v1/integration/deals",
        json={
            "name": "D",
            "custom_fields": {"closes_on": "2027-06-30"},
            "customers": [{"last_name": "A", "custom_fields": {"seats": 3}}],
        },
        headers=world.key.headers,
    )
    assert created.status_code == 201, created.text
    assert created.json()["custom_fields"] == {"closes_on": "2027-06-30"}
    assert "custom_fields" not in created.json()["customers"][0]
