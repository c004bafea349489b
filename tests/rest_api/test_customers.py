"""POST and GET /customers, field for field as the integration document says."""

from __future__ import annotations

import re
import uuid
from datetime import date, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.platform.tables import CUSTOMER_TEXT_FIELDS
from tests.rest_api.records_support import refused_fields
from tests.support import TenantWorld

CUSTOMERS = "/api/v1/integration/customers"
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
OPTIONAL_FIELDS = [name for name in CUSTOMER_TEXT_FIELDS if name != "last_name"] + ["birthday"]


def create(client: TestClient, world: TenantWorld, body: dict[str, Any]) -> Any:
    return client.post(CUSTOMERS, json=body, headers=world.key.headers)


def test_every_unsupplied_optional_field_is_null(client: TestClient, world: TenantWorld) -> None:
    body = create(client, world, {"last_name": "Lovelace"}).json()

    for name in OPTIONAL_FIELDS:
        assert name in body and body[name] is None, name
    assert body["address_addition"] is None


def test_every_supplied_field_comes_back_as_sent(client: TestClient, world: TenantWorld) -> None:
    sent: dict[str, Any] = {name: f"{name} value" for name in CUSTOMER_TEXT_FIELDS}
    sent["email"] = "ada@example.com"
    sent["birthday"] = "1990-12-10"

    body = create(client, world, sent).json()

    assert {name: body[name] for name in sent} == sent


def test_server_managed_fields_are_set_by_the_server(
    client: TestClient, world: TenantWorld
) -> None:
    body = create(client, world, {"last_name": "Lovelace"}).json()

    uuid.UUID(body["id"])
    assert body["tenant_id"] == str(world.tenant.id)
    assert TIMESTAMP.match(body["created_at"]) and TIMESTAMP.match(body["updated_at"])
    assert body["created_at"] == body["updated_at"]


@pytest.mark.parametrize("field", ["id", "tenant_id", "created_at", "updated_at"])
def test_server_managed_fields_cannot_be_sent(
    client: TestClient, world: TenantWorld, field: str
) -> None:
    response = create(client, world, {"last_name": "Lovelace", field: str(uuid.uuid4())})

    assert response.status_code == 422
    assert [e["field"] for e in response.json()["errors"]] == [field]
    assert response.json()["errors"][0]["code"] == "unknown_field"


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({}, "last_name", "missing"),
        ({"last_name": ""}, "last_name", "blank"),
        ({"last_name": "   "}, "last_name", "blank"),
        ({"last_name": None}, "last_name", "wrong_type"),
        ({"last_name": 42}, "last_name", "wrong_type"),
        ({"last_name": "x" * 256}, "last_name", "too_long"),
        ({"last_name": "x", "note": "x" * 10_001}, "note", "too_long"),
        ({"last_name": "x", "phone_1": "1" * 65}, "phone_1", "too_long"),
        ({"last_name": "x", "email": "not an email"}, "email", "invalid_format"),
        # The document's patterns end at the end of the text: Python's $ also before a last \n.
        ({"last_name": "x", "email": "ada@example.com\n"}, "email", "invalid_format"),
        ({"last_name": "x", "external_id": "abc\n"}, "external_id", "invalid_format"),
        ({"last_name": "x", "birthday": "1990-02-30"}, "birthday", "invalid_date"),
        ({"last_name": "x", "birthday": "yesterday"}, "birthday", "invalid_date"),
        ({"last_name": "x", "birthday": 19900101}, "birthday", "invalid_date"),
        ({"last_name": "x", "birthday": "1700-01-01"}, "birthday", "out_of_range"),
        ({"last_name": "x", "company": ["a"]}, "company", "wrong_type"),
        ({"last_name": "nul\u0000byte"}, "last_name", "invalid_character"),
        ({"last_name": "x", "nickname": "y"}, "nickname", "unknown_field"),
    ],
)
def test_bad_field_is_422_naming_the_field(
    client: TestClient, world: TenantWorld, body: dict[str, Any], field: str, code: str
) -> None:
    assert refused_fields(create(client, world, body)) == [(field, code)]


def test_birthday_in_the_future_is_rejected(client: TestClient, world: TenantWorld) -> None:
    tomorrow = (date.today() + timedelta(days=1)).isoformat()

    response = create(client, world, {"last_name": "x", "birthday": tomorrow})

    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "birthday"


def test_every_bad_field_is_named_at_once(client: TestClient, world: TenantWorld) -> None:
    response = create(client, world, {"first_name": 1, "extra": True})

    fields = {e["field"] for e in response.json()["errors"]}
    assert fields == {"last_name", "first_name", "extra"}
