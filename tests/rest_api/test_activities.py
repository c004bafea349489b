"""POST, GET, PATCH, DELETE and list /activities: a customer's calls, emails, meetings, tasks
and notes, optionally about one of its department's deals and done by one of its employees."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.ops.admin import create_employee
from tests.support import Credentials, TenantWorld

API = "/api/v1/integration"
ACTIVITIES = f"{API}/activities"
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
ACTIVITY_FIELDS = {
    "id", "external_id", "type", "subject", "note", "due_at", "done_at", "customer_id", "deal_id",
    "employee_id", "created_at", "updated_at",
}  # fmt: skip
OPTIONAL_FIELDS = ("subject", "note", "due_at", "done_at", "deal_id", "employee_id")
REFERENCES = ("customer_id", "deal_id", "employee_id")


def new_customer(client: TestClient, key: Credentials, last_name: str = "Lovelace") -> str:
    response = client.post(f"{API}/customers", json={"last_name": last_name}, headers=key.headers)
    assert response.status_code == 201, response.text
    customer_id: str = response.json()["id"]
    return customer_id


def new_deal(client: TestClient, key: Credentials, name: str = "Engines") -> str:
    response = client.post(f"{API}/deals", json={"name": name}, headers=key.headers)
    assert response.status_code == 201, response.text
    deal_id: str = response.json()["id"]
    return deal_id


def new_employee(database: Database, world: TenantWorld, index: int = 0) -> str:
    department_id = world.departments[index].id
    employee = create_employee(database, world.tenant.id, department_id, "Grace Hopper", None)
    return str(employee.id)


def create(client: TestClient, key: Credentials, body: dict[str, Any]) -> Any:
    return client.post(ACTIVITIES, json=body, headers=key.headers)


def new_activity(client: TestClient, key: Credentials, **fields: Any) -> dict[str, Any]:
    response = create(client, key, {"type": "call", **fields})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def read(client: TestClient, key: Credentials, activity_id: str) -> Any:
    return client.get(f"{ACTIVITIES}/{activity_id}", headers=key.headers)


def patch(client: TestClient, key: Credentials, activity_id: str, body: dict[str, Any]) -> Any:
    return client.patch(f"{ACTIVITIES}/{activity_id}", json=body, headers=key.headers)


def listed_ids(client: TestClient, key: Credentials, **params: str) -> list[str]:
    response = client.get(ACTIVITIES, params=params, headers=key.headers)
    assert response.status_code == 200, response.text
    assert response.json()["next_cursor"] is None
    return [activity["id"] for activity in response.json()["data"]]


def field_codes(response: Any) -> list[tuple[str, str]]:
    return [(error["field"], error["code"]) for error in response.json()["errors"]]


@pytest.fixture(scope="module")
def shared_customer(client: TestClient, shared: TenantWorld) -> str:
    return new_customer(client, shared.key)


# --- POST -------------------------------------------------------------------------------------


def test_create_returns_201_with_location_etag_and_every_field_as_sent(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    customer_id = new_customer(client, world.key)
    deal_id = new_deal(client, world.key)
    employee_id = new_employee(database, world)
    sent = {
        "type": "meeting",
        "subject": "Quote review",
        "note": "Bring the drawings.",
        "due_at": "2026-12-01T10:00:00+01:00",
        "done_at": "2026-12-01T10:20:30.5+01:00",
        "customer_id": customer_id,
        "deal_id": deal_id,
        "employee_id": employee_id,
    }

    response = create(client, world.key, sent)

    assert response.status_code == 201, response.text
    body = response.json()
    assert set(body) == ACTIVITY_FIELDS
    assert response.headers["location"] == f"{ACTIVITIES}/{body['id']}"
    assert re.fullmatch(r'"\d+"', response.headers["etag"])
    assert {name: body[name] for name in sent} == {
        **sent,
        "due_at": "2026-12-01T09:00:00.000000Z",
        "done_at": "2026-12-01T09:20:30.500000Z",
    }
    uuid.UUID(body["id"])
    assert TIMESTAMP.match(body["created_at"]) and body["created_at"] == body["updated_at"]


def test_every_unsupplied_optional_field_is_null(client: TestClient, world: TenantWorld) -> None:
    customer_id = new_customer(client, world.key)

    body = new_activity(client, world.key, customer_id=customer_id)

    assert {name: body[name] for name in OPTIONAL_FIELDS} == dict.fromkeys(OPTIONAL_FIELDS)
    assert body["type"] == "call" and body["customer_id"] == customer_id


@pytest.mark.parametrize("activity_type", ["call", "email", "meeting", "task", "note"])
def test_each_documented_type_is_accepted(
    client: TestClient, shared: TenantWorld, shared_customer: str, activity_type: str
) -> None:
    response = create(client, shared.key, {"type": activity_type, "customer_id": shared_customer})

    assert response.status_code == 201, response.text
    assert response.json()["type"] == activity_type


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"type": "visit"}, "type", "invalid_choice"),
        ({"type": "CALL"}, "type", "invalid_choice"),
        ({"type": None}, "type", "invalid_choice"),
        ({"customer_id": None}, "customer_id", "invalid_id"),
        ({"customer_id": "not-a-uuid"}, "customer_id", "invalid_id"),
        ({"due_at": "2026-12-01T10:00:00"}, "due_at", "invalid_datetime"),
        ({"done_at": "tomorrow"}, "done_at", "invalid_datetime"),
        ({"subject": "x" * 256}, "subject", "too_long"),
        ({"id": str(uuid.uuid4())}, "id", "unknown_field"),
    ],
)
def test_bad_activity_field_is_422_naming_the_field(
    client: TestClient,
    shared: TenantWorld,
    shared_customer: str,
    body: dict[str, Any],
    field: str,
    code: str,
) -> None:
    response = create(client, shared.key, {"type": "call", "customer_id": shared_customer, **body})

    assert response.status_code == 422
    assert field_codes(response) == [(field, code)]


@pytest.mark.parametrize("missing", ["type", "customer_id"])
def test_type_and_customer_id_are_required(
    client: TestClient, shared: TenantWorld, shared_customer: str, missing: str
) -> None:
    body = {"type": "call", "customer_id": shared_customer}
    del body[missing]

    response = create(client, shared.key, body)

    assert response.status_code == 422
    assert field_codes(response) == [(missing, "missing")]


def test_ids_of_another_department_are_422_naming_each_field_not_found(
    client: TestClient, make_tenant: Callable[..., TenantWorld], database: Database
) -> None:
    world = make_tenant(departments=2)
    own, other = world.keys
    body = {
        "type": "call",
        "customer_id": new_customer(client, other),
        "deal_id": new_deal(client, other),
        "employee_id": new_employee(database, world, index=1),
    }

    response = create(client, own, body)

    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert field_codes(response) == [(name, "not_found") for name in REFERENCES]
    assert listed_ids(client, own) == []
    assert listed_ids(client, other) == []


def test_unknown_ids_are_422_naming_each_field_not_found(
    client: TestClient, world: TenantWorld
) -> None:
    body = {"type": "call", **{name: str(uuid.uuid4()) for name in REFERENCES}}

    response = create(client, world.key, body)

    assert response.status_code == 422
    assert field_codes(response) == [(name, "not_found") for name in REFERENCES]
    assert listed_ids(client, world.key) == []


def test_only_the_bad_reference_is_named(client: TestClient, world: TenantWorld) -> None:
    body = {
        "type": "call",
        "customer_id": new_customer(client, world.key),
        "deal_id": str(uuid.uuid4()),
    }

    response = create(client, world.key, body)

    assert response.status_code == 422
    assert field_codes(response) == [("deal_id", "not_found")]


# --- GET, PATCH, DELETE by id -----------------------------------------------------------------


def test_patch_changes_only_the_fields_it_carries(client: TestClient, world: TenantWorld) -> None:
    customer_id = new_customer(client, world.key)
    before = new_activity(
        client,
        world.key,
        customer_id=customer_id,
        subject="Quote",
        note="Keep",
        due_at="2026-12-01T09:00:00Z",
    )

    response = patch(
        client, world.key, before["id"], {"done_at": "2026-12-01T12:15:00+01:00", "type": "email"}
    )

    assert response.status_code == 200, response.text
    after = response.json()
    assert after["done_at"] == "2026-12-01T11:15:00.000000Z"
    assert after["type"] == "email"
    unchanged = ACTIVITY_FIELDS - {"done_at", "type", "updated_at"}
    assert {name: after[name] for name in unchanged} == {name: before[name] for name in unchanged}
    assert after["updated_at"] >= before["updated_at"]
    assert read(client, world.key, before["id"]).json() == after


def test_patch_with_null_clears_subject_due_at_and_deal_id(
    client: TestClient, world: TenantWorld
) -> None:
    customer_id = new_customer(client, world.key)
    deal_id = new_deal(client, world.key)
    before = new_activity(
        client,
        world.key,
        customer_id=customer_id,
        deal_id=deal_id,
        subject="Quote",
        note="Keep",
        due_at="2026-12-01T09:00:00Z",
    )

    response = patch(
        client, world.key, before["id"], {"subject": None, "due_at": None, "deal_id": None}
    )

    assert response.status_code == 200, response.text
    after = response.json()
    assert (after["subject"], after["due_at"], after["deal_id"]) == (None, None, None)
    assert (after["note"], after["customer_id"]) == ("Keep", customer_id)
    assert read(client, world.key, before["id"]).json() == after
    assert listed_ids(client, world.key, deal_id=deal_id) == []


def test_patch_can_move_an_activity_to_another_customer_and_deal_of_the_department(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    activity = new_activity(client, world.key, customer_id=new_customer(client, world.key))
    changes = {
        "customer_id": new_customer(client, world.key, "Babbage"),
        "deal_id": new_deal(client, world.key),
        "employee_id": new_employee(database, world),
    }

    response = patch(client, world.key, activity["id"], changes)

    assert response.status_code == 200, response.text
    assert {name: response.json()[name] for name in changes} == changes


@pytest.mark.parametrize("field", ["type", "customer_id"])
def test_required_field_cannot_be_cleared(
    client: TestClient, world: TenantWorld, field: str
) -> None:
    before = new_activity(client, world.key, customer_id=new_customer(client, world.key))

    response = patch(client, world.key, before["id"], {field: None, "subject": "changed"})

    assert response.status_code == 422
    assert field_codes(response) == [(field, "cannot_clear")]
    assert read(client, world.key, before["id"]).json() == before


def test_patch_naming_both_required_fields_as_null_names_both(
    client: TestClient, world: TenantWorld
) -> None:
    before = new_activity(client, world.key, customer_id=new_customer(client, world.key))

    response = patch(client, world.key, before["id"], {"type": None, "customer_id": None})

    assert response.status_code == 422
    assert sorted(field_codes(response)) == [
        ("customer_id", "cannot_clear"),
        ("type", "cannot_clear"),
    ]


def test_patch_to_ids_of_another_department_is_422_not_found_and_changes_nothing(
    client: TestClient, make_tenant: Callable[..., TenantWorld], database: Database
) -> None:
    world = make_tenant(departments=2)
    own, other = world.keys
    before = new_activity(client, own, customer_id=new_customer(client, own))
    body = {
        "customer_id": new_customer(client, other),
        "deal_id": new_deal(client, other),
        "employee_id": new_employee(database, world, index=1),
    }

    response = patch(client, own, before["id"], body)

    assert response.status_code == 422
    assert field_codes(response) == [(name, "not_found") for name in REFERENCES]
    assert read(client, own, before["id"]).json() == before


def test_patch_with_a_bad_type_is_422(client: TestClient, world: TenantWorld) -> None:
    before = new_activity(client, world.key, customer_id=new_customer(client, world.key))

    response = patch(client, world.key, before["id"], {"type": "visit"})

    assert response.status_code == 422
    assert field_codes(response) == [("type", "invalid_choice")]


def test_patch_of_unknown_activity_is_404(client: TestClient, world: TenantWorld) -> None:
    response = patch(client, world.key, str(uuid.uuid4()), {"subject": "x"})

    assert response.status_code == 404


def test_list_filters_by_customer_by_deal_and_by_both(
    client: TestClient, world: TenantWorld
) -> None:
    key = world.key
    ada, bob = new_customer(client, key, "Ada"), new_customer(client, key, "Bob")
    engines, looms = new_deal(client, key, "Engines"), new_deal(client, key, "Looms")
    ada_call = new_activity(client, key, customer_id=ada)["id"]
    ada_engines = new_activity(client, key, customer_id=ada, deal_id=engines)["id"]
    bob_engines = new_activity(client, key, customer_id=bob, deal_id=engines)["id"]
    bob_looms = new_activity(client, key, customer_id=bob, deal_id=looms)["id"]

    assert listed_ids(client, key) == [ada_call, ada_engines, bob_engines, bob_looms]
    assert listed_ids(client, key, customer_id=ada) == [ada_call, ada_engines]
    assert listed_ids(client, key, customer_id=bob) == [bob_engines, bob_looms]
    assert listed_ids(client, key, deal_id=engines) == [ada_engines, bob_engines]
    assert listed_ids(client, key, customer_id=bob, deal_id=engines) == [bob_engines]
    assert listed_ids(client, key, customer_id=ada, deal_id=looms) == []
    assert listed_ids(client, key, customer_id=str(uuid.uuid4())) == []


def test_list_shows_only_the_callers_departments_activities(
    client: TestClient, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant(departments=2)
    own, other = world.keys
    mine = new_activity(client, own, customer_id=new_customer(client, own))["id"]
    theirs_customer = new_customer(client, other)
    new_activity(client, other, customer_id=theirs_customer)

    assert listed_ids(client, own) == [mine]
    assert listed_ids(client, own, customer_id=theirs_customer) == []


# --- what deleting a deal or a customer does to its activities -----------------------------------


def test_deleting_a_deal_keeps_its_activities_with_deal_id_null(
    client: TestClient, world: TenantWorld
) -> None:
    customer_id = new_customer(client, world.key)
    deal_id = new_deal(client, world.key)
    activity = new_activity(client, world.key, customer_id=customer_id, deal_id=deal_id)

    deleted = client.delete(f"{API}/deals/{deal_id}", headers=world.key.headers)

    assert deleted.status_code == 204
    response = read(client, world.key, activity["id"])
    assert response.status_code == 200
    kept = response.json()
    assert kept["deal_id"] is None
    assert {k: v for k, v in kept.items() if k not in ("deal_id", "updated_at")} == {
        k: v for k, v in activity.items() if k not in ("deal_id", "updated_at")
    }
    assert listed_ids(client, world.key, customer_id=customer_id) == [activity["id"]]
    assert listed_ids(client, world.key, deal_id=deal_id) == []


def test_deleting_a_customer_deletes_its_activities_and_only_those(
    client: TestClient, world: TenantWorld
) -> None:
    ada, bob = new_customer(client, world.key, "Ada"), new_customer(client, world.key, "Bob")
    deal_id = new_deal(client, world.key)
    ada_activities = [
        new_activity(client, world.key, customer_id=ada)["id"],
        new_activity(client, world.key, customer_id=ada, deal_id=deal_id)["id"],
    ]
    bob_activity = new_activity(client, world.key, customer_id=bob, deal_id=deal_id)["id"]

    deleted = client.delete(f"{API}/customers/{ada}", headers=world.key.headers)

    assert deleted.status_code == 204
    for activity_id in ada_activities:
        assert read(client, world.key, activity_id).status_code == 404
    assert listed_ids(client, world.key, customer_id=ada) == []
    assert listed_ids(client, world.key) == [bob_activity]
    assert listed_ids(client, world.key, deal_id=deal_id) == [bob_activity]


@pytest.mark.parametrize("moment", ["9999-12-31T23:00:00-05:00", "0001-01-01T00:30:00+01:00"])
def test_a_moment_outside_the_utc_years_1_to_9999_is_422_not_an_error(
    client: TestClient, world: TenantWorld, moment: str
) -> None:
    customer_id = new_customer(client, world.key, "A")

    response = create(
        client, world.key, {"type": "task", "customer_id": customer_id, "due_at": moment}
    )
    listed = client.get(
        f"{API}/customers", params={"updated_since": moment}, headers=world.key.headers
    )

    assert (response.status_code, response.json()["errors"][0]["field"]) == (422, "due_at")
    assert (listed.status_code, listed.json()["errors"][0]["field"]) == (422, "updated_since")


def test_moments_before_the_year_1000_keep_four_year_digits(
    client: TestClient, world: TenantWorld
) -> None:
    customer_id = new_customer(client, world.key, "A")

    response = create(
        client,
        world.key,
        {
            "type": "meeting",
            "customer_id": customer_id,
            "due_at": "0188-01-26T03:16:18.289-12:25",
        },
    )

    assert response.json()["due_at"] == "0188-01-26T15:41:18.289000Z"


@pytest.mark.parametrize("moment", [0, 1700000000, 1.5, True, "1700000000"])
def test_a_number_is_not_a_moment(client: TestClient, world: TenantWorld, moment: object) -> None:
    customer_id = new_customer(client, world.key, "A")

    response = create(
        client, world.key, {"type": "call", "customer_id": customer_id, "done_at": moment}
    )

    assert (response.status_code, response.json()["errors"][0]["code"]) == (422, "invalid_datetime")
