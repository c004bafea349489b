"""POST, GET, PATCH, DELETE and list /webhooks, and rotate-secret: a department's webhook
endpoints, their secret shown only when issued, and the URL rules."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import Database
from dealbase.platform.event_types import EVENT_TYPES
from dealbase.platform.tables import webhook_endpoints
from tests.support import Credentials, TenantWorld

API = "/api/v1/integration"
WEBHOOKS = f"{API}/webhooks"
PUBLIC_URL = "https://8.8.8.8/hooks/dealbase"
ENDPOINT_FIELDS = {
    "id", "url", "events", "enabled", "disabled_reason", "description", "ordered",
    "previous_secret_expires_at", "created_at", "updated_at",
}  # fmt: skip
SECRET = re.compile(r"^whsec_[A-Za-z0-9+/]+={0,2}$")


def create(client: TestClient, key: Credentials, **body: Any) -> Any:
    return client.post(
        WEBHOOKS, json={"url": PUBLIC_URL, "events": ["*"], **body}, headers=key.headers
    )


def new_endpoint(client: TestClient, key: Credentials, **body: Any) -> dict[str, Any]:
    response = create(client, key, **body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def field_codes(response: Any) -> list[tuple[str, str]]:
    return [(error["field"], error["code"]) for error in response.json()["errors"]]


def stored_secrets(database: Database, world: TenantWorld, endpoint_id: str) -> Any:
    with database.unit_of_work(world.tenant.scope) as uow:
        return (
            uow.connection.execute(
                select(
                    webhook_endpoints.c.secret,
                    webhook_endpoints.c.previous_secret,
                    webhook_endpoints.c.previous_secret_expires_at,
                ).where(webhook_endpoints.c.id == endpoint_id)
            )
            .mappings()
            .one()
        )


# --- POST -------------------------------------------------------------------------------------


def test_create_returns_201_with_location_etag_and_the_secret_once(
    client: TestClient, world: TenantWorld
) -> None:
    response = create(
        client, world.key, events=["deal.created", "customer.deleted"], description="Board"
    )

    assert response.status_code == 201, response.text
    body = response.json()
    assert set(body) == ENDPOINT_FIELDS | {"secret"}
    assert response.headers["location"] == f"{WEBHOOKS}/{body['id']}"
    assert response.headers["etag"] == '"1"'
    assert body["url"] == PUBLIC_URL and body["events"] == ["deal.created", "customer.deleted"]
    assert body["enabled"] is True and body["ordered"] is True and body["description"] == "Board"
    assert body["disabled_reason"] is None and body["previous_secret_expires_at"] is None
    assert SECRET.match(body["secret"])
    assert 24 <= len(base64.b64decode(body["secret"].removeprefix("whsec_"))) <= 64


def test_the_secret_is_never_shown_again(client: TestClient, world: TenantWorld) -> None:
    created = new_endpoint(client, world.key)
    location = f"{WEBHOOKS}/{created['id']}"

    read = client.get(location, headers=world.key.headers)
    listed = client.get(WEBHOOKS, headers=world.key.headers)
    patched = client.patch(location, json={"description": "x"}, headers=world.key.headers)

    for response in (read, listed, patched):
        assert response.status_code == 200
        assert created["secret"] not in response.text and 'secret"' not in response.text
    assert {k: v for k, v in created.items() if k != "secret"} == read.json()


def test_each_endpoint_gets_its_own_secret(client: TestClient, world: TenantWorld) -> None:
    assert new_endpoint(client, world.key)["secret"] != new_endpoint(client, world.key)["secret"]


def test_ordered_can_be_turned_off_and_an_endpoint_created_disabled(
    client: TestClient, world: TenantWorld
) -> None:
    body = new_endpoint(client, world.key, ordered=False, enabled=False)

    assert body["ordered"] is False and body["enabled"] is False


def test_every_event_type_may_be_subscribed(client: TestClient, world: TenantWorld) -> None:
    assert new_endpoint(client, world.key, events=list(EVENT_TYPES))["events"] == list(EVENT_TYPES)


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"events": []}, "events", "too_few_items"),
        ({"events": ["deal.won"]}, "events[0]", "invalid_choice"),
        ({"events": ["deal.created", "deal.created"]}, "events", "duplicate_item"),
        ({"events": ["*", "deal.created"]}, "events", "invalid_choice"),
        ({"events": "*"}, "events", "wrong_type"),
        ({"url": "ftp://8.8.8.8/x"}, "url", "invalid_format"),
        ({"url": "https://user:pw@8.8.8.8/x"}, "url", "invalid_format"),
        ({"url": "https:///x"}, "url", "invalid_format"),
        ({"url": "https://8.8.8.8:70000/x"}, "url", "invalid_format"),
        ({"url": "https://[::1/x"}, "url", "invalid_format"),
        ({"url": "https://8.8.8.8/" + "x" * 2048}, "url", "too_long"),
        ({"url": "https://8.8.8.8/\u0000"}, "url", "invalid_character"),
        ({"enabled": "yes"}, "enabled", "wrong_type"),
        ({"ordered": 1}, "ordered", "wrong_type"),
        ({"description": "x" * 256}, "description", "too_long"),
        ({"secret": "whsec_AAAA"}, "secret", "unknown_field"),
    ],
)
def test_bad_field_is_422_naming_it(
    client: TestClient, world: TenantWorld, body: dict[str, Any], field: str, code: str
) -> None:
    response = create(client, world.key, **body)

    assert response.status_code == 422, response.text
    assert field_codes(response) == [(field, code)]


@pytest.mark.parametrize("missing", ["url", "events"])
def test_url_and_events_are_required(client: TestClient, world: TenantWorld, missing: str) -> None:
    body = {"url": PUBLIC_URL, "events": ["*"]}
    del body[missing]

    response = client.post(WEBHOOKS, json=body, headers=world.key.headers)

    assert response.status_code == 422
    assert field_codes(response) == [(missing, "missing")]


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("https://localhost:8443/hook", "address_not_allowed"),
        ("https://127.0.0.1/hook", "address_not_allowed"),
        ("https://10.0.0.7/hook", "address_not_allowed"),
        ("https://[fd00::1]/hook", "address_not_allowed"),
        ("https://169.254.169.254/latest", "address_not_allowed"),
        ("http://8.8.8.8/hook", "invalid_format"),
        ("https://no-such-host.invalid/hook", "unresolvable"),
    ],
)
def test_urls_to_inward_or_unknown_hosts_are_422_naming_url(
    client: TestClient, world: TenantWorld, url: str, code: str
) -> None:
    response = create(client, world.key, url=url)

    assert response.status_code == 422, response.text
    assert field_codes(response) == [("url", code)]
    assert client.get(WEBHOOKS, headers=world.key.headers).json()["data"] == []


@pytest.fixture(scope="module")
def private_client(settings: Settings) -> Iterator[TestClient]:
    allowing = settings.model_copy(update={"webhooks_allow_private": True})
    with TestClient(create_app(allowing), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.mark.parametrize("url", ["http://localhost:9000/hook", "https://10.0.0.7/hook"])
def test_allowing_private_addresses_admits_http_and_loopback(
    private_client: TestClient, world: TenantWorld, url: str
) -> None:
    response = create(private_client, world.key, url=url)

    assert response.status_code == 201, response.text
    assert response.json()["url"] == url


def test_an_idempotent_retry_replays_the_same_endpoint_and_secret(
    client: TestClient, world: TenantWorld
) -> None:
    headers = {**world.key.headers, "Idempotency-Key": "hook-1"}
    body = {"url": PUBLIC_URL, "events": ["*"]}

    first = client.post(WEBHOOKS, json=body, headers=headers)
    again = client.post(WEBHOOKS, json=body, headers=headers)

    assert first.status_code == again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert len(client.get(WEBHOOKS, headers=world.key.headers).json()["data"]) == 1


# --- GET, list ----------------------------------------------------------------------------------


def test_list_pages_the_departments_endpoints_oldest_first(
    client: TestClient, world: TenantWorld
) -> None:
    ids = [new_endpoint(client, world.key)["id"] for _ in range(3)]

    first = client.get(WEBHOOKS, params={"limit": 2}, headers=world.key.headers).json()
    second = client.get(
        WEBHOOKS, params={"limit": 2, "cursor": first["next_cursor"]}, headers=world.key.headers
    ).json()

    assert [e["id"] for e in first["data"] + second["data"]] == ids
    assert second["next_cursor"] is None
    assert all(set(endpoint) == ENDPOINT_FIELDS for endpoint in first["data"])


def test_another_departments_or_tenants_endpoint_is_404(
    client: TestClient, make_tenant: Callable[..., TenantWorld]
) -> None:
    owner = make_tenant(departments=2)
    other_tenant = make_tenant()
    endpoint_id = new_endpoint(client, owner.key)["id"]
    location = f"{WEBHOOKS}/{endpoint_id}"

    for key in (owner.keys[1], other_tenant.key):
        assert client.get(location, headers=key.headers).status_code == 404
        assert client.patch(location, json={}, headers=key.headers).status_code == 404
        assert client.delete(location, headers=key.headers).status_code == 404
        assert client.post(f"{location}/rotate-secret", headers=key.headers).status_code == 404
        assert client.get(WEBHOOKS, headers=key.headers).json()["data"] == []
    assert client.get(location, headers=owner.key.headers).status_code == 200


def test_an_unknown_id_is_404(client: TestClient, world: TenantWorld) -> None:
    response = client.get(
        f"{WEBHOOKS}/01a2008b-3c00-7000-8a4e-5f0f3c9d2a11", headers=world.key.headers
    )

    assert response.status_code == 404 and response.json()["code"] == "not_found"


# --- PATCH ------------------------------------------------------------------------------------


def test_patch_changes_the_fields_it_carries_as_a_new_version(
    client: TestClient, world: TenantWorld
) -> None:
    created = new_endpoint(client, world.key, description="Board")
    location = f"{WEBHOOKS}/{created['id']}"
    changes = {
        "url": "https://1.1.1.1/other",
        "events": ["activity.created"],
        "enabled": False,
        "ordered": False,
    }

    response = client.patch(location, json=changes, headers=world.key.headers)

    assert response.status_code == 200, response.text
    assert response.headers["etag"] == '"2"'
    assert {name: response.json()[name] for name in changes} == changes
    assert response.json()["description"] == "Board"
    cleared = client.patch(location, json={"description": None}, headers=world.key.headers)
    assert cleared.json()["description"] is None


@pytest.mark.parametrize("field", ["url", "events", "enabled", "ordered"])
def test_patch_cannot_clear_a_field_other_than_description(
    client: TestClient, world: TenantWorld, field: str
) -> None:
    location = f"{WEBHOOKS}/{new_endpoint(client, world.key)['id']}"

    response = client.patch(location, json={field: None}, headers=world.key.headers)

    assert response.status_code == 422
    assert field_codes(response) == [(field, "cannot_clear")]


def test_patch_checks_the_new_url_like_create(client: TestClient, world: TenantWorld) -> None:
    location = f"{WEBHOOKS}/{new_endpoint(client, world.key)['id']}"

    response = client.patch(
        location, json={"url": "https://localhost/hook"}, headers=world.key.headers
    )

    assert response.status_code == 422
    assert field_codes(response) == [("url", "address_not_allowed")]
    assert client.get(location, headers=world.key.headers).json()["url"] == PUBLIC_URL


def test_enabling_again_clears_the_reason_delivery_disabled_it(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    endpoint_id = new_endpoint(client, world.key)["id"]
    with database.unit_of_work(world.tenant.scope) as uow:
        uow.connection.execute(
            webhook_endpoints.update()
            .where(webhook_endpoints.c.id == endpoint_id)
            .values(enabled=False, disabled_reason="The endpoint answered 410 Gone.")
        )
    location = f"{WEBHOOKS}/{endpoint_id}"
    assert client.get(location, headers=world.key.headers).json()["disabled_reason"]

    response = client.patch(location, json={"enabled": True}, headers=world.key.headers)

    assert response.json()["enabled"] is True and response.json()["disabled_reason"] is None


def test_patch_and_delete_with_a_stale_if_match_are_412(
    client: TestClient, world: TenantWorld
) -> None:
    location = f"{WEBHOOKS}/{new_endpoint(client, world.key)['id']}"
    client.patch(location, json={"description": "moved on"}, headers=world.key.headers)
    stale = {**world.key.headers, "If-Match": '"1"'}

    assert client.patch(location, json={"enabled": False}, headers=stale).status_code == 412
    assert client.delete(location, headers=stale).status_code == 412
    current = {**world.key.headers, "If-Match": '"2"'}
    assert client.patch(location, json={"enabled": False}, headers=current).status_code == 200


# --- DELETE -----------------------------------------------------------------------------------


def test_delete_is_204_and_the_endpoint_is_gone(client: TestClient, world: TenantWorld) -> None:
    location = f"{WEBHOOKS}/{new_endpoint(client, world.key)['id']}"

    assert client.delete(location, headers=world.key.headers).status_code == 204
    assert client.get(location, headers=world.key.headers).status_code == 404
    assert client.delete(location, headers=world.key.headers).status_code == 404


# --- rotate-secret ----------------------------------------------------------------------------


def test_rotation_issues_a_new_secret_and_keeps_the_old_one_for_24_hours(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    created = new_endpoint(client, world.key)

    response = client.post(f"{WEBHOOKS}/{created['id']}/rotate-secret", headers=world.key.headers)

    assert response.status_code == 200, response.text
    rotated = response.json()
    assert SECRET.match(rotated["secret"]) and rotated["secret"] != created["secret"]
    assert response.headers["etag"] == '"2"'
    stored = stored_secrets(database, world, created["id"])
    assert stored["secret"] == rotated["secret"]
    assert stored["previous_secret"] == created["secret"]
    expires = stored["previous_secret_expires_at"]
    assert abs(expires - datetime.now(UTC) - timedelta(hours=24)) < timedelta(minutes=1)
    assert rotated["previous_secret_expires_at"] is not None


def test_a_second_rotation_drops_the_first_secret(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    endpoint_id = new_endpoint(client, world.key)["id"]
    rotate = f"{WEBHOOKS}/{endpoint_id}/rotate-secret"
    first = client.post(rotate, headers=world.key.headers).json()["secret"]

    second = client.post(rotate, headers=world.key.headers).json()["secret"]

    stored = stored_secrets(database, world, endpoint_id)
    assert (stored["secret"], stored["previous_secret"]) == (second, first)
