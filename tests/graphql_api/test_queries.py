"""Every GraphQL query over one department's data: connections, filters, orders, nested fields,
the pipeline board and its summary, and a board of 1,000 deals in one request."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.ops.admin import create_employee
from dealbase.platform.deals import service as deals_service
from dealbase.platform.deals.models import DealCreate, DealPatch
from dealbase.platform.pipeline.models import DEFAULT_STEPS
from dealbase.platform.validation import validated
from tests.graphql_api.support import codes_of, data_of, gql, tenant_wide_headers
from tests.support import TenantWorld, build_tenant

API = "/api/v1/integration"

# Deals of the shop, in creation order: (name, volume, customers' last names).
DEALS: list[tuple[str, int | None, list[str]]] = [
    ("Alpha", 500, ["Zed", "Abel"]),
    ("Beta", None, []),
    ("Gamma", 100, ["Moss"]),
    ("Delta", 300, []),
    ("Epsilon", None, ["Kim"]),
    ("Zeta", 300, []),
    ("Eta", 900, []),
    ("Theta", 50, []),
]


def moment(value: str) -> datetime:
    return datetime.fromisoformat(value)


@dataclass(frozen=True)
class Shop:
    """One tenant of two departments, its data made through REST; the tests only read it."""

    world: TenantWorld
    headers: dict[str, str]
    wide: dict[str, str]
    steps: dict[str, str]
    employees: dict[str, str]
    deals: list[dict[str, Any]]
    customers: dict[str, dict[str, Any]]
    activities: list[dict[str, Any]]
    foreign_deal: dict[str, Any]

    def deal_ids(self, indexes: list[int]) -> list[str]:
        return [self.deals[index]["id"] for index in indexes]


@pytest.fixture(scope="module")
def shop(client: TestClient, database: Database) -> Shop:
    world = build_tenant(database, departments=2)
    headers = world.key.headers

    def post(path: str, body: dict[str, Any], key: dict[str, str] = headers) -> dict[str, Any]:
        response = client.post(f"{API}{path}", json=body, headers=key)
        assert response.status_code in (200, 201), response.text
        found: dict[str, Any] = response.json()
        return found

    def patch(path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = client.patch(f"{API}{path}", json=body, headers=headers)
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()
        return found

    department = world.department
    steps = {step.name: str(step.id) for step in department.steps}
    employees = {
        name: str(create_employee(database, world.tenant.id, department.id, name, None).id)
        for name in ("Ann", "Bob")
    }
    create_employee(database, world.tenant.id, world.departments[1].id, "Foreigner", None)
    customers = {
        "Lovelace": post(
            "/customers",
            {
                "last_name": "Lovelace",
                "first_name": "Ada",
                "email": "Ada@Example.com",
                "company": "Analytical Engines",
            },
        ),
        "Hopper": post(
            "/customers", {"last_name": "Hopper", "first_name": "Grace", "email": "g@example.com"}
        ),
        "Turing": post("/customers", {"last_name": "Turing", "first_name": "Alan"}),
    }
    made = [
        post(
            "/deals",
            {"name": name, "volume": volume, "customers": [{"last_name": n} for n in names]},
        )
        for name, volume, names in DEALS
    ]
    for deal in made:
        for customer in deal["customers"]:
            customers[customer["last_name"]] = customer
    for index, employee in ((0, "Ann"), (2, "Ann"), (5, "Ann"), (3, "Bob")):
        patch(f"/deals/{made[index]['id']}", {"employee_id": employees[employee]})
    for index, step in ((0, "Qualified"), (3, "Qualified"), (6, "Won"), (7, "Lost")):
        patch(f"/deals/{made[index]['id']}", {"step_id": steps[step]})
    for index in (3, 5):
        post(f"/deals/{made[index]['id']}/customers", {"customer_id": customers["Lovelace"]["id"]})
    activities = [
        post(
            "/activities",
            {
                "type": "call",
                "customer_id": customers["Lovelace"]["id"],
                "deal_id": made[3]["id"],
                "employee_id": employees["Bob"],
                "subject": "first call",
            },
        ),
        post("/activities", {"type": "note", "customer_id": customers["Lovelace"]["id"]}),
        post(
            "/activities",
            {"type": "meeting", "customer_id": customers["Zed"]["id"], "deal_id": made[0]["id"]},
        ),
        post("/activities", {"type": "task", "customer_id": customers["Hopper"]["id"]}),
    ]
    foreign_key = world.keys[1].headers
    foreign_deal = post(
        "/deals",
        {"name": "Foreign", "volume": 999, "customers": [{"last_name": "Far"}]},
        foreign_key,
    )
    post(
        "/activities",
        {"type": "call", "customer_id": foreign_deal["customers"][0]["id"]},
        foreign_key,
    )
    # Last, so updatedSince of this change finds Hopper alone.
    customers["Hopper"] = patch(f"/customers/{customers['Hopper']['id']}", {"title": "RAdm"})
    final = [client.get(f"{API}/deals/{deal['id']}", headers=headers).json() for deal in made]
    return Shop(
        world=world,
        headers=headers,
        wide=tenant_wide_headers(database, world),
        steps=steps,
        employees=employees,
        deals=final,
        customers=customers,
        activities=activities,
        foreign_deal=foreign_deal,
    )


DEAL_PAGE = """
query Deals($filter: DealFilter, $orderBy: DealOrder! = CREATED_ASC, $first: Int! = 25,
            $after: String) {
  deals(filter: $filter, orderBy: $orderBy, first: $first, after: $after) {
    totalCount
    edges { cursor node { id name volume } }
    pageInfo { hasNextPage endCursor }
  }
}
"""


def deal_names(client: TestClient, headers: dict[str, str], **variables: Any) -> list[str]:
    found = data_of(client, DEAL_PAGE, variables, headers)["deals"]
    assert found["totalCount"] == len(found["edges"])
    assert found["pageInfo"]["hasNextPage"] is False
    return [edge["node"]["name"] for edge in found["edges"]]


def names(indexes: list[int]) -> list[str]:
    return [DEALS[index][0] for index in indexes]


def walk(
    client: TestClient, headers: dict[str, str], first: int, **variables: Any
) -> tuple[list[str], set[int]]:
    """Every page of a deal list: the ids in order and the totalCounts the pages reported."""
    seen: list[str] = []
    totals: set[int] = set()
    after = None
    for _ in range(100):
        found = data_of(client, DEAL_PAGE, {**variables, "first": first, "after": after}, headers)
        connection = found["deals"]
        totals.add(connection["totalCount"])
        edges = connection["edges"]
        assert len(edges) <= first
        seen.extend(edge["node"]["id"] for edge in edges)
        info = connection["pageInfo"]
        assert info["endCursor"] == (edges[-1]["cursor"] if edges else None)
        if not info["hasNextPage"]:
            return seen, totals
        assert len(edges) == first
        after = info["endCursor"]
    raise AssertionError("paging did not end")


# --- deals ---------------------------------------------------------------------------------


def test_deals_are_a_connection_in_creation_order_with_a_total_count(
    client: TestClient, shop: Shop
) -> None:
    found = data_of(client, DEAL_PAGE, {}, shop.headers)["deals"]

    assert [edge["node"]["id"] for edge in found["edges"]] == shop.deal_ids(list(range(8)))
    assert [edge["node"]["volume"] for edge in found["edges"]] == [v for _, v, _ in DEALS]
    assert found["totalCount"] == 8
    assert found["pageInfo"] == {
        "hasNextPage": False,
        "endCursor": found["edges"][-1]["cursor"],
    }
    assert len({edge["cursor"] for edge in found["edges"]}) == 8


def test_a_page_reports_more_and_its_edge_cursors_resume_after_their_node(
    client: TestClient, shop: Shop
) -> None:
    first = data_of(client, DEAL_PAGE, {"first": 3}, shop.headers)["deals"]

    assert [edge["node"]["name"] for edge in first["edges"]] == names([0, 1, 2])
    assert first["pageInfo"]["hasNextPage"] is True
    assert first["totalCount"] == 8
    middle = first["edges"][1]["cursor"]
    resumed = data_of(client, DEAL_PAGE, {"first": 2, "after": middle}, shop.headers)["deals"]
    assert [edge["node"]["name"] for edge in resumed["edges"]] == names([2, 3])
    assert resumed["totalCount"] == 8


def test_an_empty_list_has_no_end_cursor(client: TestClient, shop: Shop) -> None:
    found = data_of(client, DEAL_PAGE, {"filter": {"volumeMin": 10**12}}, shop.headers)["deals"]

    assert found == {
        "totalCount": 0,
        "edges": [],
        "pageInfo": {"hasNextPage": False, "endCursor": None},
    }


@pytest.mark.parametrize(
    ("filter_of", "expected"),
    [
        (lambda shop: {"stepId": shop.steps["Qualified"]}, [0, 3]),
        (lambda shop: {"stepId": shop.steps["Won"]}, [6]),
        (lambda shop: {"stepId": shop.steps["Proposal"]}, []),
        (lambda shop: {"employeeId": shop.employees["Ann"]}, [0, 2, 5]),
        (lambda shop: {"employeeId": shop.employees["Bob"]}, [3]),
        (lambda shop: {"customerId": shop.customers["Lovelace"]["id"]}, [3, 5]),
        (lambda shop: {"customerId": shop.customers["Abel"]["id"]}, [0]),
        (lambda shop: {"customerId": shop.customers["Turing"]["id"]}, []),
        (lambda shop: {"createdAfter": shop.deals[2]["created_at"]}, [2, 3, 4, 5, 6, 7]),
        (lambda shop: {"createdBefore": shop.deals[2]["created_at"]}, [0, 1]),
        (
            lambda shop: {
                "createdAfter": shop.deals[2]["created_at"],
                "createdBefore": shop.deals[6]["created_at"],
            },
            [2, 3, 4, 5],
        ),
        (lambda shop: {"volumeMin": 300}, [0, 3, 5, 6]),
        (lambda shop: {"volumeMax": 300}, [2, 3, 5, 7]),
        (lambda shop: {"volumeMin": 100, "volumeMax": 500}, [0, 2, 3, 5]),
        (lambda shop: {"volumeMin": 0}, [0, 2, 3, 5, 6, 7]),
        (
            lambda shop: {"employeeId": shop.employees["Ann"], "stepId": shop.steps["Lead"]},
            [2, 5],
        ),
        (lambda shop: {"departmentId": str(shop.world.department.id)}, list(range(8))),
    ],
    ids=[
        "step",
        "step-won",
        "step-empty",
        "employee",
        "employee-2",
        "customer",
        "customer-in-deal",
        "customer-without-deals",
        "created-after",
        "created-before",
        "created-range",
        "volume-min",
        "volume-max",
        "volume-range",
        "volume-min-0-drops-nulls",
        "employee-and-step",
        "own-department",
    ],
)
def test_each_deal_filter_and_its_total_count(
    client: TestClient, shop: Shop, filter_of: Callable[[Shop], dict[str, Any]], expected: list[int]
) -> None:
    assert deal_names(client, shop.headers, filter=filter_of(shop)) == names(expected)


def volume_order(shop: Shop, descending: bool) -> list[str]:
    """Deals as the volume orders sort them: by (volume, id), a missing volume the smallest."""
    keyed = sorted(
        shop.deals,
        key=lambda deal: (-1 if deal["volume"] is None else deal["volume"], uuid.UUID(deal["id"])),
        reverse=descending,
    )
    return [deal["id"] for deal in keyed]


def test_deal_orders_sort_by_creation_or_by_volume_with_nulls_smallest(
    client: TestClient, shop: Shop
) -> None:
    by = {
        order: deal_names(client, shop.headers, orderBy=order)
        for order in ("CREATED_ASC", "CREATED_DESC", "VOLUME_ASC", "VOLUME_DESC")
    }

    assert by["CREATED_ASC"] == names(list(range(8)))
    assert by["CREATED_DESC"] == names(list(range(7, -1, -1)))
    # Beta and Epsilon have no volume; Delta and Zeta tie on 300 and keep their creation order.
    assert by["VOLUME_ASC"] == [
        "Beta",
        "Epsilon",
        "Theta",
        "Gamma",
        "Delta",
        "Zeta",
        "Alpha",
        "Eta",
    ]
    assert by["VOLUME_DESC"] == [
        "Eta",
        "Alpha",
        "Zeta",
        "Delta",
        "Gamma",
        "Theta",
        "Epsilon",
        "Beta",
    ]


@pytest.mark.parametrize("order", ["CREATED_ASC", "CREATED_DESC", "VOLUME_ASC", "VOLUME_DESC"])
@pytest.mark.parametrize("first", [1, 2, 3])
def test_paging_returns_every_deal_exactly_once_in_each_order(
    client: TestClient, shop: Shop, order: str, first: int
) -> None:
    seen, totals = walk(client, shop.headers, first, orderBy=order)

    expected = {
        "CREATED_ASC": shop.deal_ids(list(range(8))),
        "CREATED_DESC": shop.deal_ids(list(range(7, -1, -1))),
        "VOLUME_ASC": volume_order(shop, descending=False),
        "VOLUME_DESC": volume_order(shop, descending=True),
    }[order]
    assert seen == expected
    assert totals == {8}


@pytest.mark.parametrize("order", ["VOLUME_ASC", "VOLUME_DESC", "CREATED_DESC"])
def test_paging_a_filtered_list_keeps_the_filter_and_its_count(
    client: TestClient, shop: Shop, order: str
) -> None:
    seen, totals = walk(
        client, shop.headers, 2, orderBy=order, filter={"volumeMin": 100, "volumeMax": 500}
    )

    assert sorted(seen) == sorted(shop.deal_ids([0, 2, 3, 5]))
    assert len(seen) == 4
    assert totals == {4}


def test_a_cursor_of_another_order_or_filter_is_refused(client: TestClient, shop: Shop) -> None:
    cursor = data_of(client, DEAL_PAGE, {"first": 2}, shop.headers)["deals"]["pageInfo"]
    for variables in ({"orderBy": "VOLUME_ASC"}, {"filter": {"volumeMin": 1}}):
        body = gql(client, DEAL_PAGE, {**variables, "after": cursor["endCursor"]}, shop.headers)
        assert codes_of(body) == ["validation_failed"]
        assert body["errors"][0]["extensions"]["errors"][0]["field"] == "after"


@pytest.mark.parametrize("first", [0, 101])
def test_first_is_1_to_100(client: TestClient, shop: Shop, first: int) -> None:
    body = gql(client, DEAL_PAGE, {"first": first}, shop.headers)

    assert codes_of(body) == ["validation_failed"]
    assert body["errors"][0]["extensions"]["errors"][0]["field"] == "first"


DEAL = """
query Deal($id: UUID!) {
  deal(id: $id) {
    id departmentId stepId employeeId employeeName name volume dealOrigin note createdAt
    updatedAt version
    customers { id lastName }
    step { id name position kind departmentId }
    employee { id name departmentId }
    activities { id type subject customerId dealId }
  }
}
"""


def test_a_deal_with_its_customers_in_link_order_step_employee_and_activities(
    client: TestClient, shop: Shop
) -> None:
    rest = shop.deals[3]

    found = data_of(client, DEAL, {"id": rest["id"]}, shop.headers)["deal"]

    assert found["id"] == rest["id"]
    assert (found["name"], found["volume"]) == ("Delta", 300)
    assert found["version"] > 1  # created, assigned, moved, linked
    assert found["departmentId"] == str(shop.world.department.id)
    assert moment(found["createdAt"]) == moment(rest["created_at"])
    assert moment(found["updatedAt"]) == moment(rest["updated_at"])
    assert found["customers"] == [{"id": shop.customers["Lovelace"]["id"], "lastName": "Lovelace"}]
    assert found["step"] == {
        "id": shop.steps["Qualified"],
        "name": "Qualified",
        "position": 2,
        "kind": "OPEN",
        "departmentId": str(shop.world.department.id),
    }
    assert found["stepId"] == shop.steps["Qualified"]
    assert found["employee"] == {
        "id": shop.employees["Bob"],
        "name": "Bob",
        "departmentId": str(shop.world.department.id),
    }
    assert (found["employeeId"], found["employeeName"]) == (shop.employees["Bob"], "Bob")
    assert found["activities"] == [
        {
            "id": shop.activities[0]["id"],
            "type": "CALL",
            "subject": "first call",
            "customerId": shop.customers["Lovelace"]["id"],
            "dealId": rest["id"],
        }
    ]


def test_a_deals_customers_come_in_the_order_they_were_linked(
    client: TestClient, shop: Shop
) -> None:
    alpha = data_of(client, DEAL, {"id": shop.deals[0]["id"]}, shop.headers)["deal"]
    zeta = data_of(client, DEAL, {"id": shop.deals[5]["id"]}, shop.headers)["deal"]
    beta = data_of(client, DEAL, {"id": shop.deals[1]["id"]}, shop.headers)["deal"]

    assert [c["lastName"] for c in alpha["customers"]] == ["Zed", "Abel"]
    assert [c["lastName"] for c in zeta["customers"]] == ["Lovelace"]
    assert (beta["customers"], beta["employee"], beta["activities"]) == ([], None, [])
    assert beta["step"]["name"] == "Lead"
    assert beta["volume"] is None


def test_nested_fields_of_a_page_of_deals(client: TestClient, shop: Shop) -> None:
    query = """{ deals(first: 100) { edges { node {
        name customers { lastName } step { name kind } employee { name } activities { type }
    } } } }"""

    nodes = [e["node"] for e in data_of(client, query, {}, shop.headers)["deals"]["edges"]]

    by_name = {node["name"]: node for node in nodes}
    assert [c["lastName"] for c in by_name["Alpha"]["customers"]] == ["Zed", "Abel"]
    assert by_name["Alpha"]["step"] == {"name": "Qualified", "kind": "OPEN"}
    assert by_name["Alpha"]["employee"] == {"name": "Ann"}
    assert by_name["Alpha"]["activities"] == [{"type": "MEETING"}]
    assert by_name["Eta"]["step"] == {"name": "Won", "kind": "WON"}
    assert by_name["Theta"]["step"] == {"name": "Lost", "kind": "LOST"}
    assert by_name["Delta"]["activities"] == [{"type": "CALL"}]
    assert [c["lastName"] for c in by_name["Zeta"]["customers"]] == ["Lovelace"]
    assert by_name["Zeta"]["employee"] == {"name": "Ann"}
    assert by_name["Beta"]["employee"] is None


@pytest.mark.parametrize("field", ["deal", "customer", "activity"])
def test_an_unknown_id_is_not_found(client: TestClient, shop: Shop, field: str) -> None:
    body = gql(
        client,
        f"query($id: UUID!) {{ {field}(id: $id) {{ id }} }}",
        {"id": str(uuid.uuid4())},
        shop.headers,
    )

    assert body["data"] is None
    assert codes_of(body) == ["not_found"]
    assert body["errors"][0]["path"] == [field]


# --- customers -----------------------------------------------------------------------------

CUSTOMER_PAGE = """
query Customers($filter: CustomerFilter, $first: Int! = 25, $after: String) {
  customers(filter: $filter, first: $first, after: $after) {
    totalCount
    edges { cursor node { id lastName } }
    pageInfo { hasNextPage endCursor }
  }
}
"""


def customer_names(client: TestClient, shop: Shop, filter: dict[str, Any]) -> list[str]:
    found = data_of(client, CUSTOMER_PAGE, {"filter": filter}, shop.headers)["customers"]
    assert found["totalCount"] == len(found["edges"])
    return [edge["node"]["lastName"] for edge in found["edges"]]


def shop_customers_in_id_order(shop: Shop) -> list[dict[str, Any]]:
    return sorted(shop.customers.values(), key=lambda customer: uuid.UUID(customer["id"]))


def test_customers_page_in_id_order_with_total_count_on_every_page(
    client: TestClient, shop: Shop
) -> None:
    expected = [customer["id"] for customer in shop_customers_in_id_order(shop)]
    seen: list[str] = []
    totals: set[int] = set()
    after = None
    while True:
        found = data_of(client, CUSTOMER_PAGE, {"first": 3, "after": after}, shop.headers)
        connection = found["customers"]
        totals.add(connection["totalCount"])
        seen.extend(edge["node"]["id"] for edge in connection["edges"])
        assert connection["pageInfo"]["endCursor"] == connection["edges"][-1]["cursor"]
        if not connection["pageInfo"]["hasNextPage"]:
            break
        after = connection["pageInfo"]["endCursor"]

    assert seen == expected
    assert totals == {len(expected)} == {7}


@pytest.mark.parametrize(
    ("filter_of", "expected"),
    [
        (lambda shop: {"email": "ada@example.com"}, ["Lovelace"]),
        (lambda shop: {"email": "ADA@EXAMPLE.COM"}, ["Lovelace"]),
        (lambda shop: {"email": "nobody@example.com"}, []),
        (lambda shop: {"q": "engine"}, ["Lovelace"]),
        (lambda shop: {"q": "GRACE"}, ["Hopper"]),
        (lambda shop: {"q": "ove"}, ["Lovelace"]),
        (lambda shop: {"q": "%"}, []),
        (lambda shop: {"updatedSince": shop.customers["Hopper"]["updated_at"]}, ["Hopper"]),
        (lambda shop: {"q": "a", "email": "g@example.com"}, ["Hopper"]),
        (lambda shop: {"departmentId": str(shop.world.department.id), "q": "Turing"}, ["Turing"]),
    ],
    ids=[
        "email",
        "email-any-case",
        "email-none",
        "q-company",
        "q-first-name",
        "q-last-name",
        "q-literal-percent",
        "updated-since",
        "q-and-email",
        "own-department",
    ],
)
def test_each_customer_filter_and_its_total_count(
    client: TestClient, shop: Shop, filter_of: Callable[[Shop], dict[str, Any]], expected: list[str]
) -> None:
    assert customer_names(client, shop, filter_of(shop)) == expected


CUSTOMER = """
query Customer($id: UUID!) {
  customer(id: $id) {
    id tenantId departmentId lastName firstName company email title createdAt updatedAt version
    deals { id name }
    activities { id type dealId }
  }
}
"""


def test_a_customer_with_its_deals_and_activities_oldest_first(
    client: TestClient, shop: Shop
) -> None:
    rest = shop.customers["Lovelace"]

    found = data_of(client, CUSTOMER, {"id": rest["id"]}, shop.headers)["customer"]

    assert found["id"] == rest["id"]
    assert found["tenantId"] == str(shop.world.tenant.id)
    assert found["departmentId"] == str(shop.world.department.id)
    assert (found["lastName"], found["firstName"], found["company"], found["email"]) == (
        "Lovelace", "Ada", "Analytical Engines", "Ada@Example.com",
    )  # fmt: skip
    assert [deal["name"] for deal in found["deals"]] == ["Delta", "Zeta"]
    assert found["activities"] == [
        {"id": shop.activities[0]["id"], "type": "CALL", "dealId": shop.deals[3]["id"]},
        {"id": shop.activities[1]["id"], "type": "NOTE", "dealId": None},
    ]
    hopper = data_of(client, CUSTOMER, {"id": shop.customers["Hopper"]["id"]}, shop.headers)
    assert hopper["customer"]["title"] == "RAdm"
    assert hopper["customer"]["version"] == 2
    assert hopper["customer"]["deals"] == []


def test_nested_lists_take_first(client: TestClient, shop: Shop) -> None:
    query = """query($id: UUID!) { customer(id: $id) {
        deals(first: 1) { name } activities(first: 1) { type } } }"""

    found = data_of(client, query, {"id": shop.customers["Lovelace"]["id"]}, shop.headers)

    assert found["customer"] == {"deals": [{"name": "Delta"}], "activities": [{"type": "CALL"}]}


def test_customers_of_a_page_with_their_deals_and_activities(
    client: TestClient, shop: Shop
) -> None:
    query = """{ customers(first: 100) { edges { node {
        lastName deals { name } activities { type } } } } }"""

    nodes = [e["node"] for e in data_of(client, query, {}, shop.headers)["customers"]["edges"]]

    by_name = {node["lastName"]: node for node in nodes}
    assert by_name["Zed"] == {
        "lastName": "Zed",
        "deals": [{"name": "Alpha"}],
        "activities": [{"type": "MEETING"}],
    }
    assert by_name["Abel"]["deals"] == [{"name": "Alpha"}]
    assert by_name["Lovelace"]["deals"] == [{"name": "Delta"}, {"name": "Zeta"}]
    assert by_name["Hopper"]["activities"] == [{"type": "TASK"}]
    assert by_name["Turing"] == {"lastName": "Turing", "deals": [], "activities": []}


@pytest.mark.parametrize(
    ("signature", "first", "variables"),
    [("", "1", {}), ("($n: Int!)", "$n", {"n": 1})],
    ids=["literal", "variable"],
)
def test_a_page_of_customers_takes_its_nested_lists_first(
    client: TestClient, shop: Shop, signature: str, first: str, variables: dict[str, int]
) -> None:
    # The page loads its customers' nested lists before it returns, reading their `first`.
    query = f"""query{signature} {{ customers(first: 100) {{ edges {{ node {{
        lastName deals(first: {first}) {{ name }} activities(first: {first}) {{ type }} }} }} }} }}"""

    nodes = [
        e["node"] for e in data_of(client, query, variables, shop.headers)["customers"]["edges"]
    ]

    by_name = {node["lastName"]: node for node in nodes}
    assert by_name["Lovelace"] == {
        "lastName": "Lovelace",
        "deals": [{"name": "Delta"}],
        "activities": [{"type": "CALL"}],
    }


def test_a_nested_first_out_of_range_under_a_page_is_refused_for_that_field(
    client: TestClient, shop: Shop
) -> None:
    query = (
        """{ customers(first: 100) { edges { node { lastName deals(first: 101) { name } } } } }"""
    )

    body = gql(client, query, {}, shop.headers)

    assert {error["extensions"]["code"] for error in body["errors"]} == {"validation_failed"}


# --- activities ----------------------------------------------------------------------------

ACTIVITY_PAGE = """
query Activities($filter: ActivityFilter, $first: Int! = 25, $after: String) {
  activities(filter: $filter, first: $first, after: $after) {
    totalCount
    edges { cursor node { id } }
    pageInfo { hasNextPage endCursor }
  }
}
"""


@pytest.mark.parametrize(
    ("filter_of", "expected"),
    [
        (lambda shop: None, [0, 1, 2, 3]),
        (lambda shop: {"customerId": shop.customers["Lovelace"]["id"]}, [0, 1]),
        (lambda shop: {"dealId": shop.deals[0]["id"]}, [2]),
        (
            lambda shop: {
                "customerId": shop.customers["Lovelace"]["id"],
                "dealId": shop.deals[3]["id"],
            },
            [0],
        ),
        (lambda shop: {"dealId": shop.deals[1]["id"]}, []),
        (lambda shop: {"departmentId": str(shop.world.department.id)}, [0, 1, 2, 3]),
    ],
    ids=["none", "customer", "deal", "customer-and-deal", "deal-without", "own-department"],
)
def test_each_activity_filter_and_its_total_count(
    client: TestClient,
    shop: Shop,
    filter_of: Callable[[Shop], dict[str, Any] | None],
    expected: list[int],
) -> None:
    found = data_of(client, ACTIVITY_PAGE, {"filter": filter_of(shop)}, shop.headers)

    connection = found["activities"]
    assert [edge["node"]["id"] for edge in connection["edges"]] == [
        shop.activities[index]["id"] for index in expected
    ]
    assert connection["totalCount"] == len(expected)


def test_activities_page_with_total_count_on_every_page(client: TestClient, shop: Shop) -> None:
    first = data_of(client, ACTIVITY_PAGE, {"first": 3}, shop.headers)["activities"]
    after = first["pageInfo"]["endCursor"]
    rest = data_of(client, ACTIVITY_PAGE, {"first": 3, "after": after}, shop.headers)["activities"]

    assert first["pageInfo"]["hasNextPage"] is True
    assert rest["pageInfo"]["hasNextPage"] is False
    assert [e["node"]["id"] for e in first["edges"] + rest["edges"]] == [
        activity["id"] for activity in shop.activities
    ]
    assert first["totalCount"] == rest["totalCount"] == 4


def test_an_activity_with_its_customer_deal_and_employee(client: TestClient, shop: Shop) -> None:
    query = """query($id: UUID!) { activity(id: $id) {
        id departmentId type subject note dueAt doneAt customerId dealId employeeId version
        customer { id lastName } deal { id name } employee { id name } } }"""
    rest = shop.activities[0]

    found = data_of(client, query, {"id": rest["id"]}, shop.headers)["activity"]

    assert found == {
        "id": rest["id"],
        "departmentId": str(shop.world.department.id),
        "type": "CALL",
        "subject": "first call",
        "note": None,
        "dueAt": None,
        "doneAt": None,
        "customerId": shop.customers["Lovelace"]["id"],
        "dealId": shop.deals[3]["id"],
        "employeeId": shop.employees["Bob"],
        "version": 1,
        "customer": {"id": shop.customers["Lovelace"]["id"], "lastName": "Lovelace"},
        "deal": {"id": shop.deals[3]["id"], "name": "Delta"},
        "employee": {"id": shop.employees["Bob"], "name": "Bob"},
    }
    bare = data_of(client, query, {"id": shop.activities[1]["id"]}, shop.headers)["activity"]
    assert (bare["deal"], bare["employee"]) == (None, None)
    assert bare["customer"]["lastName"] == "Lovelace"


def test_nested_fields_of_a_page_of_activities(client: TestClient, shop: Shop) -> None:
    query = """{ activities { edges { node {
        type customer { lastName } deal { name } employee { name } } } } }"""

    nodes = [e["node"] for e in data_of(client, query, {}, shop.headers)["activities"]["edges"]]

    assert nodes == [
        {"type": "CALL", "customer": {"lastName": "Lovelace"}, "deal": {"name": "Delta"}, "employee": {"name": "Bob"}},
        {"type": "NOTE", "customer": {"lastName": "Lovelace"}, "deal": None, "employee": None},
        {"type": "MEETING", "customer": {"lastName": "Zed"}, "deal": {"name": "Alpha"}, "employee": None},
        {"type": "TASK", "customer": {"lastName": "Hopper"}, "deal": None, "employee": None},
    ]  # fmt: skip


# --- departments, employees, steps ---------------------------------------------------------


def test_departments_of_a_department_key_is_its_own_with_steps_in_order(
    client: TestClient, shop: Shop
) -> None:
    query = "{ departments { id name steps { id name position kind } } }"

    (department,) = data_of(client, query, {}, shop.headers)["departments"]

    assert department["id"] == str(shop.world.department.id)
    assert department["name"] == shop.world.department.name
    assert [(s["name"], s["kind"]) for s in department["steps"]] == [
        (name, kind.upper()) for name, kind in DEFAULT_STEPS
    ]
    assert [s["position"] for s in department["steps"]] == list(range(1, len(DEFAULT_STEPS) + 1))
    assert {s["name"]: s["id"] for s in department["steps"]} == shop.steps


def test_employees_of_the_department_as_a_connection(client: TestClient, shop: Shop) -> None:
    query = """query($first: Int!, $after: String) { employees(first: $first, after: $after) {
        totalCount edges { node { id name departmentId } } pageInfo { hasNextPage endCursor } } }"""

    first = data_of(client, query, {"first": 1}, shop.headers)["employees"]
    after = first["pageInfo"]["endCursor"]
    second = data_of(client, query, {"first": 1, "after": after}, shop.headers)["employees"]

    assert first["totalCount"] == second["totalCount"] == 2
    assert first["pageInfo"]["hasNextPage"] is True
    assert second["pageInfo"]["hasNextPage"] is False
    assert [e["node"]["id"] for e in first["edges"] + second["edges"]] == [
        shop.employees["Ann"], shop.employees["Bob"],
    ]  # fmt: skip
    assert {e["node"]["departmentId"] for e in first["edges"] + second["edges"]} == {
        str(shop.world.department.id)
    }


def test_steps_are_the_departments_steps_in_order(client: TestClient, shop: Shop) -> None:
    found = data_of(client, "{ steps { id name position kind } }", {}, shop.headers)["steps"]
    named = data_of(
        client,
        "query($d: UUID) { steps(departmentId: $d) { id } }",
        {"d": str(shop.world.department.id)},
        shop.headers,
    )["steps"]

    assert [(s["name"], s["position"]) for s in found] == [
        (name, position) for position, (name, _) in enumerate(DEFAULT_STEPS, start=1)
    ]
    assert [s["id"] for s in named] == [s["id"] for s in found]
    assert [s["id"] for s in found] == [shop.steps[name] for name, _ in DEFAULT_STEPS]


# --- pipeline ------------------------------------------------------------------------------

PIPELINE = """
query Pipeline($departmentId: UUID, $first: Int! = 25) {
  pipeline(departmentId: $departmentId) {
    department { id name }
    steps { step { id name position kind } dealCount totalVolume deals(first: $first) { id name } }
  }
}
"""


def test_pipeline_has_each_step_with_count_volume_and_first_deals(
    client: TestClient, shop: Shop
) -> None:
    found = data_of(client, PIPELINE, {"first": 2}, shop.headers)["pipeline"]

    assert found["department"]["id"] == str(shop.world.department.id)
    by_step = {
        item["step"]["name"]: (
            item["dealCount"],
            item["totalVolume"],
            [d["name"] for d in item["deals"]],
        )
        for item in found["steps"]
    }
    assert [item["step"]["name"] for item in found["steps"]] == [n for n, _ in DEFAULT_STEPS]
    assert by_step == {
        "Lead": (4, 400, ["Beta", "Gamma"]),  # Beta, Gamma, Epsilon, Zeta: 0 + 100 + 0 + 300
        "Qualified": (2, 800, ["Alpha", "Delta"]),
        "Proposal": (0, 0, []),
        "Negotiation": (0, 0, []),
        "Won": (1, 900, ["Eta"]),
        "Lost": (1, 50, ["Theta"]),
    }


def test_pipeline_of_a_department_with_1000_deals_in_one_request(
    client: TestClient, database: Database, world: TenantWorld
) -> None:
    department = world.department
    steps = sorted(department.steps, key=lambda step: step.position)
    scope = world.tenant.scope.in_department(department.id)
    counts = {step.id: 0 for step in steps}
    volumes = {step.id: 0 for step in steps}
    names_in: dict[uuid.UUID, list[str]] = {step.id: [] for step in steps}
    with database.unit_of_work(scope) as uow:
        for index in range(1000):
            volume = None if index % 7 == 0 else index * 10
            deal = deals_service.create(
                uow, validated(DealCreate, {"name": f"deal {index:04d}", "volume": volume})
            )
            step = steps[index % 5]  # the Lost step stays empty
            if step.position != 1:
                deals_service.RECORD.update(
                    uow, deal.id, validated(DealPatch, {"step_id": str(step.id)})
                )
            counts[step.id] += 1
            volumes[step.id] += volume or 0
            names_in[step.id].append(deal.name)

    found = data_of(
        client,
        PIPELINE,
        {"departmentId": str(department.id), "first": 3},
        world.key.headers,
    )["pipeline"]
    count = data_of(client, "{ deals { totalCount } }", {}, world.key.headers)

    assert count["deals"]["totalCount"] == 1000
    assert [item["step"]["id"] for item in found["steps"]] == [str(step.id) for step in steps]
    for item, step in zip(found["steps"], steps, strict=True):
        assert (item["dealCount"], item["totalVolume"]) == (counts[step.id], volumes[step.id])
        assert [deal["name"] for deal in item["deals"]] == names_in[step.id][:3], step.name
    assert sum(item["dealCount"] for item in found["steps"]) == 1000
    assert found["steps"][-1]["dealCount"] == 0


# --- pipeline summary ----------------------------------------------------------------------

SUMMARY = """
query Summary($from: DateTime!, $to: DateTime!, $departmentId: UUID) {
  pipelineSummary(createdFrom: $from, createdTo: $to, departmentId: $departmentId) {
    createdFrom createdTo dealCount volume wonVolume lostVolume
    steps { step { name } dealCount volume }
    employees { employee { id name } dealCount volume wonVolume lostVolume }
  }
}
"""

MOVE = "mutation($id: UUID!, $stepId: UUID!) { moveDeal(id: $id, stepId: $stepId) { id stepId } }"


def test_pipeline_summary_counts_deals_created_in_the_range_per_step_and_employee(
    client: TestClient, database: Database, world: TenantWorld
) -> None:
    headers = world.key.headers
    steps = {step.name: str(step.id) for step in world.department.steps}
    ann, bob = (
        str(create_employee(database, world.tenant.id, world.department.id, name, None).id)
        for name in ("Ann", "Bob")
    )
    made = [
        client.post(
            f"{API}/deals", json={"name": f"d{i}", "volume": volume}, headers=headers
        ).json()
        for i, volume in enumerate([1000, 10, 200, 3000, None, 40000])
    ]
    for index, employee in ((0, ann), (1, ann), (2, ann), (3, bob), (5, bob)):
        client.patch(
            f"{API}/deals/{made[index]['id']}", json={"employee_id": employee}, headers=headers
        )
    period = {"from": made[1]["created_at"], "to": made[5]["created_at"]}

    before = data_of(client, SUMMARY, period, headers)["pipelineSummary"]
    # Won and lost by REST PATCH and by the moveDeal mutation; d0 and d5 are outside the range.
    for index in (0, 2, 5):
        moved = client.patch(
            f"{API}/deals/{made[index]['id']}", json={"step_id": steps["Won"]}, headers=headers
        )
        assert moved.status_code == 200
    data_of(client, MOVE, {"id": made[3]["id"], "stepId": steps["Lost"]}, headers)
    after = data_of(client, SUMMARY, period, headers)["pipelineSummary"]

    assert moment(after["createdFrom"]) == moment(made[1]["created_at"])
    assert moment(after["createdTo"]) == moment(made[5]["created_at"])
    assert (before["dealCount"], before["volume"], before["wonVolume"], before["lostVolume"]) == (
        4,
        3210,
        0,
        0,
    )
    assert before["steps"][0] == {"step": {"name": "Lead"}, "dealCount": 4, "volume": 3210}
    assert (after["dealCount"], after["volume"], after["wonVolume"], after["lostVolume"]) == (
        4,
        3210,
        200,
        3000,
    )
    assert [(s["step"]["name"], s["dealCount"], s["volume"]) for s in after["steps"]] == [
        ("Lead", 2, 10), ("Qualified", 0, 0), ("Proposal", 0, 0), ("Negotiation", 0, 0),
        ("Won", 1, 200), ("Lost", 1, 3000),
    ]  # fmt: skip
    assert [
        (None if e["employee"] is None else e["employee"]["name"], e["dealCount"], e["volume"], e["wonVolume"], e["lostVolume"])
        for e in after["employees"]
    ] == [("Ann", 2, 210, 200, 0), ("Bob", 1, 3000, 0, 3000), (None, 1, 0, 0, 0)]  # fmt: skip
    assert after["employees"][0]["employee"]["id"] == ann


@pytest.mark.parametrize("offset", [0, -1])
def test_pipeline_summary_refuses_an_empty_or_reversed_range(
    client: TestClient, shop: Shop, offset: int
) -> None:
    start = "2030-01-01T00:00:00Z"
    end = "2030-01-01T00:00:00Z" if offset == 0 else "2029-12-31T23:59:59Z"

    body = gql(client, SUMMARY, {"from": start, "to": end}, shop.headers)

    assert body["data"] is None
    assert codes_of(body) == ["validation_failed"]
    assert [e["field"] for e in body["errors"][0]["extensions"]["errors"]] == ["createdTo"]


def test_pipeline_summary_of_an_empty_range_has_every_step_at_zero(
    client: TestClient, shop: Shop
) -> None:
    found = data_of(
        client,
        SUMMARY,
        {"from": "2001-01-01T00:00:00Z", "to": "2001-02-01T00:00:00Z"},
        shop.headers,
    )["pipelineSummary"]

    assert (found["dealCount"], found["volume"], found["wonVolume"], found["lostVolume"]) == (
        0,
        0,
        0,
        0,
    )
    assert [(s["step"]["name"], s["dealCount"]) for s in found["steps"]] == [
        (name, 0) for name, _ in DEFAULT_STEPS
    ]
    assert found["employees"] == []
