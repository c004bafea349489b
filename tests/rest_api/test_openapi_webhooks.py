"""The OpenAPI document's ``webhooks``: one per event type, each the events feed's event with the
resource's REST schema as ``data``, and the Standard Webhooks headers; and the signature check
docs/webhooks.md gives receivers, run as written there."""

from __future__ import annotations

import base64
import hmac
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.ops.admin import create_employee
from dealbase.platform.event_types import EVENT_TYPES
from dealbase.platform.webhooks.delivery_models import TEST_EVENT_TYPE
from dealbase.rest_api.openapi_webhooks import carries_changes
from tests.support import TenantWorld

API = "/api/v1/integration"
GUIDE = Path(__file__).parents[2] / "docs" / "webhooks.md"
HEADERS = ["webhook-id", "webhook-timestamp", "webhook-signature"]
RESOURCE_SCHEMAS = {
    "customer": "#/components/schemas/CustomerOut",
    "deal": "#/components/schemas/DealOut",
    "activity": "#/components/schemas/ActivityOut",
}
# The updates: the types whose events carry changed_fields and previous (docs/api.md#events).
UPDATES = {
    "customer.updated",
    "deal.updated",
    "deal.step_changed",
    "deal.assigned",
    "activity.updated",
}


@pytest.fixture(scope="module")
def document(client: TestClient) -> dict[str, Any]:
    served: dict[str, Any] = client.get("/openapi.json").json()
    return served


def operation(document: dict[str, Any], event_type: str) -> dict[str, Any]:
    found: dict[str, Any] = document["webhooks"][event_type]["post"]
    return found


def payload_validator(document: dict[str, Any], event_type: str) -> jsonschema_rs.Validator:
    """The event type's request body schema, its ``$ref`` resolved in the document's components,
    checking formats (uuid, date-time) too."""
    body = operation(document, event_type)["requestBody"]["content"]["application/json"]
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": document["components"],
        **body["schema"],
    }
    return jsonschema_rs.validator_for(schema, validate_formats=True)


# The document


def test_every_event_type_and_the_test_event_is_a_webhook(document: dict[str, Any]) -> None:
    assert list(document["webhooks"]) == [*EVENT_TYPES, TEST_EVENT_TYPE]
    for entry in document["webhooks"].values():
        assert list(entry) == ["post"]
    operation_ids = [
        item["operationId"]
        for section in ("paths", "webhooks")
        for path_item in document[section].values()
        for item in path_item.values()
    ]
    assert len(operation_ids) == len(set(operation_ids))


def test_each_webhook_documents_the_signature_headers_and_how_answers_count(
    document: dict[str, Any],
) -> None:
    for event_type in document["webhooks"]:
        webhook = operation(document, event_type)
        parameters = webhook["parameters"]
        assert [parameter["name"] for parameter in parameters] == HEADERS
        assert all(parameter["in"] == "header" for parameter in parameters)
        assert all(parameter["required"] for parameter in parameters)
        assert webhook["requestBody"]["required"] is True
        assert list(webhook["requestBody"]["content"]) == ["application/json"]
        responses = webhook["responses"]
        assert set(responses) == {"2XX", "410", "default"}
        assert "10 seconds" in responses["2XX"]["description"]
        assert "disabled" in responses["410"]["description"]
        assert "retried" in responses["default"]["description"]
        # No API key: the signature is the credential (a linter's security-defined rule).
        assert webhook["security"] == []


def test_the_document_names_its_server(document: dict[str, Any]) -> None:
    assert document["servers"] == [{"url": "/", "description": "The server this document is from."}]


def test_a_webhook_body_is_the_feed_event_narrowed_to_its_type(document: dict[str, Any]) -> None:
    for event_type in EVENT_TYPES:
        schema = operation(document, event_type)["requestBody"]["content"]["application/json"][
            "schema"
        ]
        # The feed's event schema, referred to rather than defined again.
        feed, narrowed = schema["allOf"]
        assert feed == {"$ref": "#/components/schemas/EventOut"}
        assert narrowed["properties"]["type"] == {"const": event_type}
        resource = event_type.partition(".")[0]
        assert narrowed["properties"]["data"] == {"$ref": RESOURCE_SCHEMAS[resource]}
        carries = set(narrowed.get("required", [])) == {"changed_fields", "previous"}
        assert carries is (event_type in UPDATES) is carries_changes(event_type)


# Real events against the schemas


def every_kind_of_event(client: TestClient, world: TenantWorld, database: Database) -> None:
    """Makes the department record at least one event of each type."""

    def call(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = client.request(method, f"{API}{path}", json=body, headers=world.key.headers)
        assert response.status_code < 300, response.text
        return response.json() if response.content else None

    customer = call("POST", "/customers", {"last_name": "Lovelace", "city": "London"})
    call("PATCH", f"/customers/{customer['id']}", {"city": "Paris"})
    deal = call("POST", "/deals", {"name": "Engine", "customers": [{"last_name": "Babbage"}]})
    steps = call("GET", "/steps")["data"]
    employee = create_employee(database, world.tenant.id, world.department.id, "Grace", None)
    call(
        "PATCH",
        f"/deals/{deal['id']}",
        {"step_id": steps[1]["id"], "employee_id": str(employee.id), "volume": 7},
    )
    call("POST", f"/deals/{deal['id']}/customers", {"customer_id": customer["id"]})
    activity = call(
        "POST",
        "/activities",
        {"type": "call", "customer_id": customer["id"], "deal_id": deal["id"]},
    )
    call("PATCH", f"/activities/{activity['id']}", {"subject": "Quote"})
    call("DELETE", f"/activities/{activity['id']}")
    call("DELETE", f"/deals/{deal['id']}")
    call("DELETE", f"/customers/{customer['id']}")


def feed_events(client: TestClient, world: TenantWorld) -> list[dict[str, Any]]:
    response = client.get(f"{API}/events", params={"limit": 100}, headers=world.key.headers)
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()["data"]
    return events


def test_every_real_event_is_valid_under_its_webhook_schema(
    client: TestClient, world: TenantWorld, database: Database, document: dict[str, Any]
) -> None:
    every_kind_of_event(client, world, database)
    events = feed_events(client, world)

    assert {event["type"] for event in events} == set(EVENT_TYPES)
    for event in events:
        event_type = event["type"]
        errors = [
            error.message for error in payload_validator(document, event_type).iter_errors(event)
        ]
        assert errors == [], (event_type, errors)
        assert ("changed_fields" in event) is ("previous" in event) is (event_type in UPDATES)


def test_the_webhook_schemas_are_not_vacuous(
    client: TestClient, world: TenantWorld, database: Database, document: dict[str, Any]
) -> None:
    every_kind_of_event(client, world, database)
    by_type = {event["type"]: event for event in feed_events(client, world)}
    created, updated = by_type["customer.created"], by_type["customer.updated"]

    def valid(event_type: str, event: dict[str, Any]) -> bool:
        return payload_validator(document, event_type).is_valid(event)

    # Another type, or another resource as data.
    assert not valid("customer.updated", created)
    assert not valid("deal.created", {**by_type["deal.created"], "data": created["data"]})
    assert not valid("activity.created", {**by_type["activity.created"], "data": {}})
    # An update without what it changed.
    assert not valid("customer.updated", {k: v for k, v in updated.items() if k != "previous"})
    # The wire's timestamps and ids.
    assert not valid("customer.created", {**created, "created_at": "2026-11-21T09:40:00Z"})
    assert not valid("customer.created", {**created, "id": "not-a-uuid"})
    assert not valid("customer.created", {k: v for k, v in created.items() if k != "tenant_id"})


def test_the_test_event_of_the_guide_is_valid_under_its_schema(document: dict[str, Any]) -> None:
    body = json.loads(guide_request()[1])
    validator = payload_validator(document, TEST_EVENT_TYPE)

    assert body["type"] == TEST_EVENT_TYPE
    assert validator.is_valid(body)
    assert not validator.is_valid({**body, "data": {}})
    assert not validator.is_valid({**body, "type": "customer.created"})


# The guide's signature check


def guide_python_block(containing: str) -> str:
    blocks: list[str] = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    [block] = [block for block in blocks if containing in block]
    return block


def guide_request() -> tuple[dict[str, str], bytes]:
    """The headers and the body of the example request in the guide."""
    requests: list[str] = re.findall(r"```http\n(.*?)\n```", GUIDE.read_text(), flags=re.DOTALL)
    [request] = requests
    head, _, body = request.partition("\n\n")
    lines = head.splitlines()[1:]  # after the request line
    headers = dict(line.split(": ", 1) for line in lines)
    return {name.lower(): value for name, value in headers.items()}, body.encode()


Verifier = Callable[[str, bytes, dict[str, str]], bool]


@pytest.fixture(scope="module")
def verify_signature() -> Verifier:
    """``verify_signature`` exactly as docs/webhooks.md shows it."""
    namespace: dict[str, Any] = {}
    # The guide's own code, so the snippet receivers copy is the one tested.
    exec(compile(guide_python_block("def verify_signature"), str(GUIDE), "exec"), namespace)  # noqa: S102
    verifier: Verifier = namespace["verify_signature"]
    return verifier


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """A signature made as the Standard Webhooks specification says, independently of the
    guide's code."""
    key = base64.b64decode(secret[len("whsec_") :])
    content = b"%s.%d.%s" % (msg_id.encode(), timestamp, body)
    return "v1," + base64.b64encode(hmac.digest(key, content, "sha256")).decode()


# The specification's own test vector (its Python library's test_sign_function).
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TIMESTAMP = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def vector_headers(**changes: str) -> dict[str, str]:
    headers = {
        "webhook-id": VECTOR_ID,
        "webhook-timestamp": str(VECTOR_TIMESTAMP),
        "webhook-signature": VECTOR_SIGNATURE,
    }
    return {**headers, **changes}


@pytest.fixture
def at_vector_time(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    def at(offset: float) -> None:
        monkeypatch.setattr(time, "time", lambda: VECTOR_TIMESTAMP + offset)

    at(0)
    return at


def test_the_independent_signer_reproduces_the_specification_vector() -> None:
    assert sign(VECTOR_SECRET, VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY) == VECTOR_SIGNATURE


@pytest.mark.usefixtures("at_vector_time")
def test_the_guide_verifier_accepts_the_specification_vector_and_nothing_altered(
    verify_signature: Verifier,
) -> None:
    assert verify_signature(VECTOR_SECRET, VECTOR_BODY, vector_headers())

    assert not verify_signature(VECTOR_SECRET, b'{"test": 2432232315}', vector_headers())
    assert not verify_signature(VECTOR_SECRET, VECTOR_BODY, vector_headers(**{"webhook-id": "x"}))
    later = str(VECTOR_TIMESTAMP + 1)
    assert not verify_signature(
        VECTOR_SECRET, VECTOR_BODY, vector_headers(**{"webhook-timestamp": later})
    )
    v2 = VECTOR_SIGNATURE.replace("v1,", "v2,")
    assert not verify_signature(
        VECTOR_SECRET, VECTOR_BODY, vector_headers(**{"webhook-signature": v2})
    )
    other_secret = "whsec_" + base64.b64encode(b"k" * 32).decode()
    assert not verify_signature(other_secret, VECTOR_BODY, vector_headers())
    for header in HEADERS:
        headers = vector_headers()
        del headers[header]
        assert not verify_signature(VECTOR_SECRET, VECTOR_BODY, headers)
    for garbage in ("", "soon", "1.5e9", "١٦١٤٢٦٥٣٣٠"):
        assert not verify_signature(
            VECTOR_SECRET, VECTOR_BODY, vector_headers(**{"webhook-timestamp": garbage})
        )
    non_ascii = vector_headers(**{"webhook-signature": "v1,é"})
    assert not verify_signature(VECTOR_SECRET, VECTOR_BODY, non_ascii)


def test_the_guide_verifier_refuses_a_timestamp_more_than_5_minutes_off(
    verify_signature: Verifier, at_vector_time: Callable[[float], None]
) -> None:
    for offset in (-300, 300):
        at_vector_time(offset)
        assert verify_signature(VECTOR_SECRET, VECTOR_BODY, vector_headers())
    for offset in (-301, 301):
        at_vector_time(offset)
        assert not verify_signature(VECTOR_SECRET, VECTOR_BODY, vector_headers())


def test_during_a_rotation_either_secret_verifies_both_signatures(
    client: TestClient, world: TenantWorld, verify_signature: Verifier
) -> None:
    created = client.post(
        f"{API}/webhooks",
        json={"url": "https://8.8.8.8/hooks", "events": ["*"]},
        headers=world.key.headers,
    )
    assert created.status_code == 201, created.text
    old = created.json()["secret"]
    rotated = client.post(
        f"{API}/webhooks/{created.json()['id']}/rotate-secret", headers=world.key.headers
    )
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["secret"]
    event = feed_body(client, world)
    now = int(time.time())
    msg_id = json.loads(event)["id"]
    both = f"{sign(new, msg_id, now, event)} {sign(old, msg_id, now, event)}"
    headers = {"webhook-id": msg_id, "webhook-timestamp": str(now), "webhook-signature": both}

    assert verify_signature(new, event, headers)
    assert verify_signature(old, event, headers)
    assert not verify_signature(VECTOR_SECRET, event, headers)
    assert not verify_signature(new, event.replace(b"Lovelace", b"Lovelaze"), headers)


def feed_body(client: TestClient, world: TenantWorld) -> bytes:
    """One real event's JSON, as bytes."""
    client.post(f"{API}/customers", json={"last_name": "Lovelace"}, headers=world.key.headers)
    [event] = feed_events(client, world)
    return json.dumps(event, separators=(",", ":")).encode()


def test_the_guide_example_request_is_signed_with_the_guide_example_secret(
    verify_signature: Verifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    headers, body = guide_request()
    monkeypatch.setattr(time, "time", lambda: int(headers["webhook-timestamp"]))

    assert headers["webhook-signature"] == sign(
        VECTOR_SECRET, headers["webhook-id"], int(headers["webhook-timestamp"]), body
    )
    assert verify_signature(VECTOR_SECRET, body, headers)
    assert f"`{VECTOR_SECRET}`" in GUIDE.read_text()


def test_signatures_match_the_documented_header_pattern(document: dict[str, Any]) -> None:
    [pattern] = [
        parameter["schema"]["pattern"]
        for parameter in operation(document, "customer.created")["parameters"]
        if parameter["name"] == "webhook-signature"
    ]
    rotated = f"{VECTOR_SIGNATURE} {sign(VECTOR_SECRET, 'other', 1, b'{}')}"

    assert re.fullmatch(pattern, VECTOR_SIGNATURE)
    assert re.fullmatch(pattern, rotated)
    assert not re.fullmatch(pattern, VECTOR_SIGNATURE.replace("v1,", "v2,"))
