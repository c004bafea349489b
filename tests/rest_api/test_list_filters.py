"""GET /customers and GET /deals: each filter, filters combined, page sizes and cursors."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.ops.admin import create_employee
from tests.support import TenantWorld

API = "/api/v1/integration"
CUSTOMERS = f"{API}/customers"
DEALS = f"{API}/deals"


def post(client: TestClient, world: TenantWorld, url: str, body: dict[str, Any]) -> Any:
    response = client.post(url, json=body, headers=world.key.headers)
    assert response.status_code in (200, 201), response.text
    return response.json()


def customer(client: TestClient, world: TenantWorld, **fields: str) -> str:
    customer_id: str = post(client, world, CUSTOMERS, {"last_name": "Doe", **fields})["id"]
    return customer_id


def deal(client: TestClient, world: TenantWorld, name: str = "d", **fields: Any) -> Any:
    return post(client, world, DEALS, {"name": name, **fields})


def change_deal(client: TestClient, world: TenantWorld, deal_id: str, body: dict[str, Any]) -> Any:
    response = client.patch(f"{DEALS}/{deal_id}", json=body, headers=world.key.headers)
    assert response.status_code == 200, response.text
    return response.json()


def page(client: TestClient, world: TenantWorld, url: str, **params: str) -> Any:
    response = client.get(url, params=params, headers=world.key.headers)
    assert response.status_code == 200, response.text
    return response.json()


def ids(client: TestClient, world: TenantWorld, url: str, **params: str) -> list[str]:
    body = page(client, world, url, **params)
    assert body["next_cursor"] is None
    return [item["id"] for item in body["data"]]


def everything(client: TestClient, world: TenantWorld, url: str, **params: str) -> list[str]:
    """Every id of the list, following next_cursor to the end."""
    seen: list[str] = []
    for _ in range(100):
        body = page(client, world, url, **params)
        seen += [item["id"] for item in body["data"]]
        if body["next_cursor"] is None:
            return seen
        params = {**params, "cursor": body["next_cursor"]}
    raise AssertionError("the list never ended")


def refused(
    client: TestClient, world: TenantWorld, url: str, **params: str
) -> list[tuple[str, str]]:
    response = client.get(url, params=params, headers=world.key.headers)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    return [(error["field"], error["code"]) for error in response.json()["errors"]]


def with_offset(timestamp: str, hours: float) -> str:
    """The same instant as the API's ``...Z`` timestamp, written with another UTC offset."""
    offset = timezone(timedelta(hours=hours))
    return datetime.fromisoformat(timestamp).astimezone(offset).isoformat()


# --- customers ----------------------------------------------------------------------------------


def test_customers_by_email_match_exactly_in_any_letter_case(
    client: TestClient, world: TenantWorld
) -> None:
    ada = customer(client, world, email="Ada.Lovelace@Example.com")
    customer(client, world, email="ada.lovelace@example.com.au")
    customer(client, world, email="lovelace@example.com")
    customer(client, world)

    assert ids(client, world, CUSTOMERS, email="ada.lovelace@example.com") == [ada]
    assert ids(client, world, CUSTOMERS, email="ADA.LOVELACE@EXAMPLE.COM") == [ada]
    assert ids(client, world, CUSTOMERS, email="ada.lovelace@example") == []


def test_customers_by_q_contain_it_in_last_name_first_name_or_company(
    client: TestClient, world: TenantWorld
) -> None:
    by_last = customer(client, world, last_name="Adams")
    by_first = customer(client, world, last_name="Smith", first_name="Ada")
    by_company = customer(client, world, last_name="Jones", company="Nevada Mining")
    customer(client, world, last_name="Babbage", email="ada@example.com", city="Adelaide")

    assert ids(client, world, CUSTOMERS, q="ada") == [by_last, by_first, by_company]
    assert ids(client, world, CUSTOMERS, q="ADA") == [by_last, by_first, by_company]
    assert ids(client, world, CUSTOMERS, q="vAdA") == [by_company]


def test_customers_by_q_fold_non_ascii_letter_case(client: TestClient, world: TenantWorld) -> None:
    mueller = customer(client, world, last_name="Müller")

    assert ids(client, world, CUSTOMERS, q="MÜLL") == [mueller]


@pytest.mark.parametrize(
    ("q", "matching", "not_matching"),
    [
        ("100%", "100% Cotton", "100 Cotton"),
        ("%", "50% off", "Half off"),
        ("a_b", "a_b Ltd", "axb Ltd"),
        ("_", "snake_case", "camelCase"),
        ("a\\b", "a\\b Ltd", "ab Ltd"),
    ],
)
def test_customers_by_q_match_percent_underscore_and_backslash_literally(
    client: TestClient, world: TenantWorld, q: str, matching: str, not_matching: str
) -> None:
    wanted = customer(client, world, company=matching)
    customer(client, world, company=not_matching)

    assert ids(client, world, CUSTOMERS, q=q) == [wanted]


def test_customers_by_updated_since_with_an_offset(client: TestClient, world: TenantWorld) -> None:
    first = customer(client, world, last_name="First")
    second = post(client, world, CUSTOMERS, {"last_name": "Second"})
    since = with_offset(second["updated_at"], 5.5)
    assert "+05:30" in since

    assert ids(client, world, CUSTOMERS, updated_since=since) == [second["id"]]

    client.patch(f"{CUSTOMERS}/{first}", json={"note": "touched"}, headers=world.key.headers)
    assert ids(client, world, CUSTOMERS, updated_since=since) == [first, second["id"]]
    later = with_offset(second["updated_at"], -3)
    assert ids(client, world, CUSTOMERS, updated_since=later) == [first, second["id"]]


def test_customer_filters_combine(client: TestClient, world: TenantWorld) -> None:
    customer(client, world, last_name="Lovelace", email="ada@example.com")
    customer(client, world, last_name="Byron", email="ada@example.com")
    customer(client, world, last_name="Lovelace", email="ada@example.org")
    wanted = post(client, world, CUSTOMERS, {"last_name": "Lovelace", "email": "ADA@example.com"})
    since = with_offset(wanted["updated_at"], 1)

    assert ids(
        client, world, CUSTOMERS, q="love", email="ada@example.com", updated_since=since
    ) == [wanted["id"]]
    assert len(ids(client, world, CUSTOMERS, q="love", email="ada@example.com")) == 2


def test_customer_filters_page_every_match_exactly_once(
    client: TestClient, world: TenantWorld
) -> None:
    matching = []
    for index in range(7):
        matching.append(customer(client, world, last_name=f"Match {index}"))
        customer(client, world, last_name=f"Other {index}")

    assert everything(client, world, CUSTOMERS, q="match", limit="2") == matching


# --- deals --------------------------------------------------------------------------------------


def test_deals_by_step_id_after_moving_one(client: TestClient, world: TenantWorld) -> None:
    first_step, second_step = (str(step.id) for step in world.department.steps[:2])
    stays, moves = deal(client, world, "stays")["id"], deal(client, world, "moves")["id"]
    change_deal(client, world, moves, {"step_id": second_step})

    assert ids(client, world, DEALS, step_id=second_step) == [moves]
    assert ids(client, world, DEALS, step_id=first_step) == [stays]
    assert ids(client, world, DEALS, step_id=str(world.department.steps[2].id)) == []


def test_deals_by_employee_id_after_assigning_via_patch(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    ada, grace = (
        str(create_employee(database, world.tenant.id, world.department.id, name, None).id)
        for name in ("Ada", "Grace")
    )
    one, two, three = (deal(client, world, name)["id"] for name in ("one", "two", "three"))
    change_deal(client, world, one, {"employee_id": ada})
    change_deal(client, world, two, {"employee_id": grace})
    change_deal(client, world, three, {"employee_id": ada})

    assigned = page(client, world, DEALS, employee_id=ada)["data"]
    assert [d["id"] for d in assigned] == [one, three]
    assert {d["employee_name"] for d in assigned} == {"Ada"}
    assert ids(client, world, DEALS, employee_id=grace) == [two]

    change_deal(client, world, three, {"employee_id": None})
    assert ids(client, world, DEALS, employee_id=ada) == [one]


def test_deals_by_customer_id_include_created_and_linked_customers(
    client: TestClient, world: TenantWorld
) -> None:
    created_with = deal(client, world, "with", customers=[{"last_name": "Lovelace"}])
    ada = created_with["customers"][0]["id"]
    linked = deal(client, world, "linked")["id"]
    deal(client, world, "without", customers=[{"last_name": "Babbage"}])
    post(client, world, f"{DEALS}/{linked}/customers", {"customer_id": ada})

    assert ids(client, world, DEALS, customer_id=ada) == [created_with["id"], linked]

    client.delete(f"{DEALS}/{linked}/customers/{ada}", headers=world.key.headers)
    assert ids(client, world, DEALS, customer_id=ada) == [created_with["id"]]


def test_deals_by_updated_since_with_an_offset(client: TestClient, world: TenantWorld) -> None:
    first = deal(client, world, "first")["id"]
    second = deal(client, world, "second")
    since = with_offset(second["updated_at"], -7)

    assert ids(client, world, DEALS, updated_since=since) == [second["id"]]

    change_deal(client, world, first, {"volume": 5})
    assert ids(client, world, DEALS, updated_since=since) == [first, second["id"]]


def test_deal_filters_combine(client: TestClient, world: TenantWorld, database: Database) -> None:
    employee = str(create_employee(database, world.tenant.id, world.department.id, "Ada", None).id)
    second_step = str(world.department.steps[1].id)
    target = deal(client, world, "target", customers=[{"last_name": "Lovelace"}])
    ada = target["customers"][0]["id"]
    decoys = [deal(client, world, f"decoy {i}")["id"] for i in range(3)]
    change_deal(client, world, target["id"], {"step_id": second_step, "employee_id": employee})
    change_deal(client, world, decoys[0], {"step_id": second_step})
    change_deal(client, world, decoys[1], {"employee_id": employee})
    post(client, world, f"{DEALS}/{decoys[2]}/customers", {"customer_id": ada})
    changed = change_deal(
        client, world, decoys[2], {"step_id": second_step, "employee_id": employee}
    )
    post(client, world, f"{DEALS}/{decoys[0]}/customers", {"customer_id": ada})

    both = {"step_id": second_step, "employee_id": employee}
    assert ids(client, world, DEALS, **both) == [target["id"], decoys[2]]
    assert ids(client, world, DEALS, **both, customer_id=ada) == [target["id"], decoys[2]]
    assert ids(client, world, DEALS, step_id=second_step, customer_id=ada) == [
        target["id"], decoys[0], decoys[2],
    ]  # fmt: skip
    since = with_offset(changed["updated_at"], 2)
    assert ids(client, world, DEALS, **both, updated_since=since) == [decoys[2]]


@pytest.mark.parametrize(
    ("name", "value", "code"),
    [
        ("step_id", "not-a-uuid", "invalid_id"),
        ("employee_id", "42", "invalid_id"),
        ("customer_id", "x", "invalid_id"),
    ],
)
def test_malformed_deal_filter_is_422_naming_it(
    client: TestClient, shared: TenantWorld, name: str, value: str, code: str
) -> None:
    assert refused(client, shared, DEALS, **{name: value}) == [(name, code)]


def test_deal_filters_naming_another_departments_ids_find_nothing(
    client: TestClient, make_tenant: Callable[..., TenantWorld]
) -> None:
    world = make_tenant(departments=2)
    own, other = world.keys[0].headers, world.keys[1].headers
    theirs = client.post(
        DEALS, json={"name": "theirs", "customers": [{"last_name": "X"}]}, headers=other
    ).json()
    client.post(DEALS, json={"name": "mine"}, headers=own)
    their_customer = theirs["customers"][0]["id"]
    their_step = str(world.departments[1].steps[0].id)

    for params in ({"customer_id": their_customer}, {"step_id": their_step}):
        response = client.get(DEALS, params=params, headers=own)
        assert response.status_code == 200
        assert response.json() == {"data": [], "next_cursor": None}


# --- limit --------------------------------------------------------------------------------------


def test_limit_defaults_to_25_and_goes_up_to_100(client: TestClient, world: TenantWorld) -> None:
    deal(client, world, customers=[{"last_name": f"c{i:03}"} for i in range(100)])
    last = customer(client, world, last_name="c100")

    default = page(client, world, CUSTOMERS)
    largest = page(client, world, CUSTOMERS, limit="100")
    rest = page(client, world, CUSTOMERS, limit="100", cursor=largest["next_cursor"])

    assert len(default["data"]) == 25 and default["next_cursor"] is not None
    assert len(largest["data"]) == 100 and largest["next_cursor"] is not None
    assert [c["id"] for c in rest["data"]] == [last] and rest["next_cursor"] is None
    assert largest["data"][:25] == default["data"]


def test_default_page_follows_to_the_end(client: TestClient, world: TenantWorld) -> None:
    created = deal(client, world, customers=[{"last_name": f"c{i}"} for i in range(26)])

    pages = [page(client, world, CUSTOMERS)]
    pages.append(page(client, world, CUSTOMERS, cursor=pages[0]["next_cursor"]))

    assert [len(p["data"]) for p in pages] == [25, 1]
    assert pages[1]["next_cursor"] is None
    assert [c["id"] for p in pages for c in p["data"]] == [c["id"] for c in created["customers"]]


@pytest.mark.parametrize("url", [CUSTOMERS, DEALS, f"{API}/activities", f"{API}/employees"])
@pytest.mark.parametrize("limit", ["101", "0", "-5", "1000000", "2.5", "many"])
def test_limit_outside_1_to_100_is_422_naming_limit(
    client: TestClient, shared: TenantWorld, url: str, limit: str
) -> None:
    assert [field for field, _ in refused(client, shared, url, limit=limit)] == ["limit"]


# --- cursors ------------------------------------------------------------------------------------


def test_customer_cursor_reused_with_other_filters_is_422_invalid_cursor(
    client: TestClient, world: TenantWorld
) -> None:
    for name in ("Ann", "Anna", "Bob", "Bobby"):
        customer(client, world, last_name=name)
    cursor = page(client, world, CUSTOMERS, q="ann", limit="1")["next_cursor"]
    assert cursor is not None

    assert refused(client, world, CUSTOMERS, q="bob", limit="1", cursor=cursor) == [
        ("cursor", "invalid_cursor")
    ]
    assert refused(client, world, CUSTOMERS, limit="1", cursor=cursor) == [
        ("cursor", "invalid_cursor")
    ]
    assert len(page(client, world, CUSTOMERS, q="ann", limit="1", cursor=cursor)["data"]) == 1


def test_deal_cursor_reused_with_other_filters_is_422_invalid_cursor(
    client: TestClient, world: TenantWorld
) -> None:
    first_step, second_step = (str(step.id) for step in world.department.steps[:2])
    for _ in range(2):
        deal(client, world)
    cursor = page(client, world, DEALS, step_id=first_step, limit="1")["next_cursor"]
    assert cursor is not None

    assert refused(client, world, DEALS, step_id=second_step, limit="1", cursor=cursor) == [
        ("cursor", "invalid_cursor")
    ]
    updated_since = "2000-01-01T00:00:00+00:00"
    assert refused(
        client, world, DEALS, step_id=first_step, updated_since=updated_since, cursor=cursor
    ) == [("cursor", "invalid_cursor")]


def test_cursor_of_one_list_is_refused_by_another(client: TestClient, world: TenantWorld) -> None:
    deal(client, world, customers=[{"last_name": "a"}, {"last_name": "b"}])
    deal(client, world)
    customer_cursor = page(client, world, CUSTOMERS, limit="1")["next_cursor"]
    deal_cursor = page(client, world, DEALS, limit="1")["next_cursor"]

    assert refused(client, world, DEALS, cursor=customer_cursor) == [("cursor", "invalid_cursor")]
    assert refused(client, world, CUSTOMERS, cursor=deal_cursor) == [("cursor", "invalid_cursor")]


@pytest.mark.parametrize("url", [CUSTOMERS, DEALS])
@pytest.mark.parametrize("cursor", ["garbage", "A" * 30, "A" * 29 + "=", "A" * 31])
def test_garbage_cursor_is_422_naming_cursor(
    client: TestClient, shared: TenantWorld, url: str, cursor: str
) -> None:
    assert [field for field, _ in refused(client, shared, url, cursor=cursor)] == ["cursor"]


def test_deleting_a_linked_customer_counts_as_a_change_of_its_deals(
    client: TestClient, world: TenantWorld
) -> None:
    """A deal's `customers` change when a linked customer is deleted, as when one is unlinked
    (which does count as a change), so a sync by updated_since must see the deal again."""
    before = deal(client, world, "with", customers=[{"last_name": "Gone"}, {"last_name": "Kept"}])
    untouched = deal(client, world, "untouched")
    since = with_offset(untouched["updated_at"], 1)
    assert ids(client, world, DEALS, updated_since=since) == [untouched["id"]]

    gone = before["customers"][0]["id"]
    assert client.delete(f"{CUSTOMERS}/{gone}", headers=world.key.headers).status_code == 204

    after = page(client, world, DEALS, updated_since=since)["data"]
    assert [d["id"] for d in after] == [before["id"], untouched["id"]]
    assert [c["last_name"] for c in after[0]["customers"]] == ["Kept"]
