"""Who sees what over GraphQL: a department key its department, a tenant-wide dashboard key every
department of its tenant, no key another tenant; and credentials refused as REST refuses them."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dealbase.db.database import Database
from dealbase.ops import admin
from tests.graphql_api.support import GRAPHQL, codes_of, data_of, gql, tenant_wide_headers
from tests.support import TenantWorld, build_tenant

API = "/api/v1/integration"
# How long a key change may take to reach the server before the test fails: a failure bound
# only; the serial tests of tests/ops/test_cli.py and tests/ops/test_serve.py hold it to 1 s.
NOTICE_WAIT_S = 30.0


@dataclass(frozen=True)
class Department:
    """One department's key, and one row of each kind in it."""

    id: str
    headers: dict[str, str]
    deal: dict[str, Any]
    customer: dict[str, Any]
    activity: dict[str, Any]
    employee: str
    steps: dict[str, str]


@dataclass(frozen=True)
class Tenants:
    home: TenantWorld
    wide: dict[str, str]
    first: Department
    second: Department
    other: Department
    other_wide: dict[str, str]


def fill(client: TestClient, database: Database, world: TenantWorld, index: int) -> Department:
    """A deal with a customer, an activity and an employee in the ``index``-th department."""
    credentials = world.keys[index]
    department_id = credentials.department_id
    label = f"{world.tenant.name}-{index}"
    employee = admin.create_employee(database, world.tenant.id, department_id, f"E {label}", None)
    deal = client.post(
        f"{API}/deals",
        json={
            "name": f"Deal {label}",
            "volume": 100 * (index + 1),
            "customers": [{"last_name": f"C {label}"}],
        },
        headers=credentials.headers,
    ).json()
    activity = client.post(
        f"{API}/activities",
        json={"type": "call", "customer_id": deal["customers"][0]["id"], "deal_id": deal["id"]},
        headers=credentials.headers,
    ).json()
    department = world.departments[index]
    return Department(
        id=str(department_id),
        headers=credentials.headers,
        deal=deal,
        customer=deal["customers"][0],
        activity=activity,
        employee=str(employee.id),
        steps={step.name: str(step.id) for step in department.steps},
    )


@pytest.fixture(scope="module")
def tenants(client: TestClient, database: Database) -> Tenants:
    home, other = build_tenant(database, departments=2), build_tenant(database)
    return Tenants(
        home=home,
        wide=tenant_wide_headers(database, home),
        first=fill(client, database, home, 0),
        second=fill(client, database, home, 1),
        other=fill(client, database, other, 0),
        other_wide=tenant_wide_headers(database, other),
    )


BY_ID = {
    "deal": "query($id: UUID!) { deal(id: $id) { id } }",
    "customer": "query($id: UUID!) { customer(id: $id) { id } }",
    "activity": "query($id: UUID!) { activity(id: $id) { id } }",
}


def row_id(department: Department, kind: str) -> str:
    row: dict[str, Any] = getattr(department, kind)
    found: str = row["id"]
    return found


def not_found_like_unknown(client: TestClient, headers: dict[str, str], kind: str, id: str) -> None:
    """The answer for ``id`` is exactly the answer for an id that never existed, bar the id."""
    unknown = str(uuid.uuid4())
    answers = [gql(client, BY_ID[kind], {"id": value}, headers) for value in (id, unknown)]
    for answer, value in zip(answers, (id, unknown), strict=True):
        assert answer["data"] is None
        assert codes_of(answer) == ["not_found"]
        answer["errors"][0]["message"] = answer["errors"][0]["message"].replace(value, "<id>")
    assert answers[0] == answers[1]


# --- a department key ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["deal", "customer", "activity"])
def test_a_department_key_reads_its_own_rows(
    client: TestClient, tenants: Tenants, kind: str
) -> None:
    found = data_of(client, BY_ID[kind], {"id": row_id(tenants.first, kind)}, tenants.first.headers)

    assert found[kind]["id"] == row_id(tenants.first, kind)


@pytest.mark.parametrize("kind", ["deal", "customer", "activity"])
@pytest.mark.parametrize("owner", ["second", "other"])
def test_a_department_key_finds_no_row_of_another_department_or_tenant(
    client: TestClient, tenants: Tenants, kind: str, owner: str
) -> None:
    foreign: Department = getattr(tenants, owner)

    not_found_like_unknown(client, tenants.first.headers, kind, row_id(foreign, kind))


LISTS = """
query {
  deals { totalCount edges { node { id } } }
  customers { totalCount edges { node { id } } }
  activities { totalCount edges { node { id } } }
  employees { totalCount edges { node { id } } }
  departments { id }
}
"""


def listed(found: dict[str, Any]) -> dict[str, set[str]]:
    lists = {
        name: {edge["node"]["id"] for edge in found[name]["edges"]}
        for name in ("deals", "customers", "activities", "employees")
    }
    for name in lists:
        assert found[name]["totalCount"] == len(lists[name])
    return {**lists, "departments": {department["id"] for department in found["departments"]}}


def rows_of(*departments: Department) -> dict[str, set[str]]:
    return {
        "deals": {d.deal["id"] for d in departments},
        "customers": {d.customer["id"] for d in departments},
        "activities": {d.activity["id"] for d in departments},
        "employees": {d.employee for d in departments},
        "departments": {d.id for d in departments},
    }


def test_a_department_keys_lists_hold_its_department_only(
    client: TestClient, tenants: Tenants
) -> None:
    for department in (tenants.first, tenants.second, tenants.other):
        assert listed(data_of(client, LISTS, {}, department.headers)) == rows_of(department)


def test_a_department_keys_board_and_summary_count_its_department_only(
    client: TestClient, tenants: Tenants
) -> None:
    query = """{
      pipeline { department { id } steps { dealCount totalVolume deals { id } } }
      pipelineSummary(createdFrom: "2000-01-01T00:00:00Z", createdTo: "2100-01-01T00:00:00Z") {
        dealCount volume steps { step { departmentId } }
      }
    }"""

    found = data_of(client, query, {}, tenants.second.headers)

    board = found["pipeline"]
    assert board["department"]["id"] == tenants.second.id
    assert sum(step["dealCount"] for step in board["steps"]) == 1
    assert sum(step["totalVolume"] for step in board["steps"]) == 200
    assert [d["id"] for step in board["steps"] for d in step["deals"]] == [
        tenants.second.deal["id"]
    ]
    summary = found["pipelineSummary"]
    assert (summary["dealCount"], summary["volume"]) == (1, 200)
    assert {step["step"]["departmentId"] for step in summary["steps"]} == {tenants.second.id}


NAMED_DEPARTMENT = {
    "deals": "query($d: UUID!) { deals(filter: {departmentId: $d}) { totalCount } }",
    "customers": "query($d: UUID!) { customers(filter: {departmentId: $d}) { totalCount } }",
    "activities": "query($d: UUID!) { activities(filter: {departmentId: $d}) { totalCount } }",
    "employees": "query($d: UUID!) { employees(departmentId: $d) { totalCount } }",
    "steps": "query($d: UUID!) { steps(departmentId: $d) { id } }",
    "pipeline": "query($d: UUID!) { pipeline(departmentId: $d) { department { id } } }",
    "pipelineSummary": """query($d: UUID!) { pipelineSummary(
        createdFrom: "2000-01-01T00:00:00Z", createdTo: "2100-01-01T00:00:00Z", departmentId: $d
    ) { dealCount } }""",
    "createCustomer": """mutation($d: UUID!) {
        createCustomer(input: {lastName: "Sneaky"}, departmentId: $d) { id } }""",
    "createDeal": """mutation($d: UUID!) {
        createDeal(input: {name: "Sneaky"}, departmentId: $d) { id } }""",
}


@pytest.mark.parametrize("field", sorted(f for f in NAMED_DEPARTMENT if not f.startswith("create")))
def test_a_department_key_may_name_its_own_department(
    client: TestClient, tenants: Tenants, field: str
) -> None:
    found = data_of(client, NAMED_DEPARTMENT[field], {"d": tenants.first.id}, tenants.first.headers)

    assert found[field] is not None


@pytest.mark.parametrize("field", sorted(NAMED_DEPARTMENT))
@pytest.mark.parametrize("owner", ["second", "other", "unknown"])
def test_naming_a_department_out_of_reach_is_not_found(
    client: TestClient, tenants: Tenants, database: Database, field: str, owner: str
) -> None:
    """A department key naming another department of its tenant, or any key naming a department
    of another tenant (or none at all): not_found, and nothing is written."""
    department_id = str(uuid.uuid4()) if owner == "unknown" else getattr(tenants, owner).id

    for headers in (tenants.first.headers, tenants.wide):
        if owner == "second" and headers is tenants.wide:
            continue  # the tenant-wide key reaches it: see the tenant-wide tests
        body = gql(client, NAMED_DEPARTMENT[field], {"d": department_id}, headers)
        assert body["data"] is None
        assert codes_of(body) == ["not_found"], body
        assert body["errors"][0]["path"] == [field]
        assert department_id in body["errors"][0]["message"]
    # Nothing was created anywhere.
    for department in (tenants.first, tenants.second, tenants.other):
        names = data_of(
            client,
            '{ customers(filter: {q: "Sneaky"}) { totalCount } deals { edges { node { name } } } }',
            {},
            department.headers,
        )
        assert names["customers"]["totalCount"] == 0
        assert "Sneaky" not in {e["node"]["name"] for e in names["deals"]["edges"]}


@pytest.mark.parametrize("filter_key", ["stepId", "employeeId", "customerId"])
def test_filtering_by_a_foreign_row_finds_nothing(
    client: TestClient, tenants: Tenants, filter_key: str
) -> None:
    for foreign in (tenants.second, tenants.other):
        value = {
            "stepId": foreign.steps["Lead"],
            "employeeId": foreign.employee,
            "customerId": foreign.customer["id"],
        }[filter_key]
        query = "query($f: DealFilter) { deals(filter: $f) { totalCount edges { node { id } } } }"
        found = data_of(client, query, {"f": {filter_key: value}}, tenants.first.headers)
        assert found["deals"] == {"totalCount": 0, "edges": []}


@pytest.mark.parametrize(
    ("mutation", "kind"),
    [
        ('mutation($id: UUID!) { updateDeal(id: $id, changes: {name: "x"}) { id } }', "deal"),
        ("mutation($id: UUID!) { deleteDeal(id: $id) }", "deal"),
        (
            'mutation($id: UUID!) { updateCustomer(id: $id, changes: {lastName: "x"}) { id } }',
            "customer",
        ),
        ("mutation($id: UUID!) { deleteCustomer(id: $id) }", "customer"),
        (
            'mutation($id: UUID!) { updateActivity(id: $id, changes: {subject: "x"}) { id } }',
            "activity",
        ),
        ("mutation($id: UUID!) { deleteActivity(id: $id) }", "activity"),
    ],
)
def test_a_department_key_changes_no_row_of_another_department_or_tenant(
    client: TestClient, tenants: Tenants, mutation: str, kind: str
) -> None:
    for foreign in (tenants.second, tenants.other):
        body = gql(client, mutation, {"id": row_id(foreign, kind)}, tenants.first.headers)
        assert codes_of(body) == ["not_found"]
        still = data_of(client, BY_ID[kind], {"id": row_id(foreign, kind)}, foreign.headers)
        assert still[kind]["id"] == row_id(foreign, kind)
    # The tenant-wide key of another tenant does not reach them either.
    body = gql(client, mutation, {"id": row_id(tenants.first, kind)}, tenants.other_wide)
    assert codes_of(body) == ["not_found"]


# --- a tenant-wide key ---------------------------------------------------------------------


def test_a_tenant_wide_key_sees_every_department_of_its_tenant_and_no_other(
    client: TestClient, tenants: Tenants
) -> None:
    found = listed(data_of(client, LISTS, {}, tenants.wide))

    assert found == rows_of(tenants.first, tenants.second)
    assert listed(data_of(client, LISTS, {}, tenants.other_wide)) == rows_of(tenants.other)


@pytest.mark.parametrize("kind", ["deal", "customer", "activity"])
def test_a_tenant_wide_key_reads_rows_of_any_department_of_its_tenant_only(
    client: TestClient, tenants: Tenants, kind: str
) -> None:
    for department in (tenants.first, tenants.second):
        found = data_of(client, BY_ID[kind], {"id": row_id(department, kind)}, tenants.wide)
        assert found[kind]["id"] == row_id(department, kind)

    not_found_like_unknown(client, tenants.wide, kind, row_id(tenants.other, kind))
    not_found_like_unknown(client, tenants.other_wide, kind, row_id(tenants.first, kind))


def test_a_tenant_wide_key_narrows_lists_with_department_id(
    client: TestClient, tenants: Tenants
) -> None:
    query = """query($d: UUID!) {
      deals(filter: {departmentId: $d}) { totalCount edges { node { id } } }
      customers(filter: {departmentId: $d}) { totalCount edges { node { id } } }
      activities(filter: {departmentId: $d}) { totalCount edges { node { id } } }
      employees(departmentId: $d) { totalCount edges { node { id } } }
      departments { id }
    }"""

    for department in (tenants.first, tenants.second):
        found = listed(data_of(client, query, {"d": department.id}, tenants.wide))
        assert found == {
            **rows_of(department),
            "departments": {tenants.first.id, tenants.second.id},
        }


def test_a_tenant_wide_key_names_the_department_of_steps_and_the_board(
    client: TestClient, tenants: Tenants
) -> None:
    query = """query($d: UUID!) {
      steps(departmentId: $d) { id departmentId }
      pipeline(departmentId: $d) { department { id } steps { dealCount deals { id } } }
    }"""

    for department in (tenants.first, tenants.second):
        found = data_of(client, query, {"d": department.id}, tenants.wide)
        assert [step["id"] for step in found["steps"]] == list(department.steps.values())
        assert found["pipeline"]["department"]["id"] == department.id
        assert [d["id"] for s in found["pipeline"]["steps"] for d in s["deals"]] == [
            department.deal["id"]
        ]


@pytest.mark.parametrize(
    ("field", "query"),
    [
        ("steps", "{ steps { id } }"),
        ("pipeline", "{ pipeline { department { id } } }"),
        ("createCustomer", 'mutation { createCustomer(input: {lastName: "Nowhere"}) { id } }'),
        ("createDeal", 'mutation { createDeal(input: {name: "Nowhere"}) { id } }'),
    ],
)
def test_a_tenant_wide_key_must_name_a_department_where_one_is_needed(
    client: TestClient, tenants: Tenants, field: str, query: str
) -> None:
    body = gql(client, query, {}, tenants.wide)

    assert body["data"] is None
    assert codes_of(body) == ["validation_failed"]
    assert body["errors"][0]["path"] == [field]
    assert [e["field"] for e in body["errors"][0]["extensions"]["errors"]] == ["departmentId"]


def test_a_tenant_wide_key_must_name_a_department_to_create_an_activity(
    client: TestClient, tenants: Tenants
) -> None:
    mutation = """mutation($c: UUID!) {
        createActivity(input: {type: NOTE, customerId: $c}) { id } }"""

    body = gql(client, mutation, {"c": tenants.first.customer["id"]}, tenants.wide)

    assert codes_of(body) == ["validation_failed"]
    assert [e["field"] for e in body["errors"][0]["extensions"]["errors"]] == ["departmentId"]


def test_a_tenant_wide_summary_spans_its_tenant_or_one_department(
    client: TestClient, tenants: Tenants
) -> None:
    query = """query($d: UUID) { pipelineSummary(
        createdFrom: "2000-01-01T00:00:00Z", createdTo: "2100-01-01T00:00:00Z", departmentId: $d
    ) { dealCount volume steps { step { departmentId } } employees { employee { id } } } }"""

    everything = data_of(client, query, {"d": None}, tenants.wide)["pipelineSummary"]
    second = data_of(client, query, {"d": tenants.second.id}, tenants.wide)["pipelineSummary"]

    assert (everything["dealCount"], everything["volume"]) == (2, 300)
    assert {s["step"]["departmentId"] for s in everything["steps"]} == {
        tenants.first.id,
        tenants.second.id,
    }
    assert (second["dealCount"], second["volume"]) == (1, 200)
    assert {s["step"]["departmentId"] for s in second["steps"]} == {tenants.second.id}


def test_a_tenant_wide_key_creates_in_the_department_it_names(
    client: TestClient, database: Database, make_tenant: Any
) -> None:
    world: TenantWorld = make_tenant(departments=2)
    wide = tenant_wide_headers(database, world)
    target = world.departments[1]
    mutation = """mutation($d: UUID!) {
      createCustomer(input: {lastName: "Wide"}, departmentId: $d) { id departmentId }
      createDeal(input: {name: "Wide deal", customers: [{lastName: "Inside"}]}, departmentId: $d) {
        id departmentId step { departmentId name } customers { departmentId }
      }
    }"""

    made = data_of(client, mutation, {"d": str(target.id)}, wide)
    activity = data_of(
        client,
        """mutation($d: UUID!, $c: UUID!, $deal: UUID!) {
          createActivity(input: {type: CALL, customerId: $c, dealId: $deal}, departmentId: $d) {
            id departmentId } }""",
        {"d": str(target.id), "c": made["createCustomer"]["id"], "deal": made["createDeal"]["id"]},
        wide,
    )["createActivity"]

    assert made["createCustomer"]["departmentId"] == str(target.id)
    assert made["createDeal"]["departmentId"] == str(target.id)
    assert made["createDeal"]["step"] == {"departmentId": str(target.id), "name": "Lead"}
    assert made["createDeal"]["customers"] == [{"departmentId": str(target.id)}]
    assert activity["departmentId"] == str(target.id)
    # The department's own key sees them over REST; the other department's does not.
    owner, bystander = world.keys[1].headers, world.keys[0].headers
    for path in (
        f"{API}/customers/{made['createCustomer']['id']}",
        f"{API}/deals/{made['createDeal']['id']}",
        f"{API}/activities/{activity['id']}",
    ):
        assert client.get(path, headers=owner).status_code == 200
        assert client.get(path, headers=bystander).status_code == 404


def test_a_tenant_wide_key_creating_in_its_departments_cannot_cross_them(
    client: TestClient, database: Database, make_tenant: Any
) -> None:
    """A customer of one department cannot get an activity in another, whoever asks."""
    world: TenantWorld = make_tenant(departments=2)
    wide = tenant_wide_headers(database, world)
    customer = client.post(
        f"{API}/customers", json={"last_name": "Home"}, headers=world.keys[0].headers
    ).json()

    body = gql(
        client,
        """mutation($d: UUID!, $c: UUID!) {
          createActivity(input: {type: CALL, customerId: $c}, departmentId: $d) { id } }""",
        {"d": str(world.departments[1].id), "c": customer["id"]},
        wide,
    )

    assert codes_of(body) == ["validation_failed"]
    assert [e["field"] for e in body["errors"][0]["extensions"]["errors"]] == ["customerId"]


# --- credentials ---------------------------------------------------------------------------


def unknown_key() -> str:
    return f"dbk_{uuid.uuid4().hex}_{'A' * 43}"


def assert_problem(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert (problem["status"], problem["code"]) == (status, code)
    assert problem["request_id"] == response.headers["x-request-id"]


@pytest.mark.parametrize(
    "headers_of",
    [
        lambda tenants: {},
        lambda tenants: {"X-Api-Key": "not a key"},
        lambda tenants: {"X-Api-Key": unknown_key()},
        lambda tenants: {"X-Api-Key": unknown_key(), "X-Department-Id": tenants.first.id},
        lambda tenants: {"X-Department-Id": tenants.first.id},
        lambda tenants: {
            "X-Api-Key": tenants.first.headers["X-Api-Key"][:-1] + "B",
            "X-Department-Id": tenants.first.id,
        },
        # A department key without its department.
        lambda tenants: {"X-Api-Key": tenants.first.headers["X-Api-Key"]},
    ],
    ids=[
        "none",
        "malformed",
        "unknown",
        "unknown-with-department",
        "department-only",
        "wrong-secret",
        "department-key-without-department",
    ],
)
@pytest.mark.parametrize("method", ["POST", "GET"])
def test_missing_or_invalid_credentials_are_401_problems(
    client: TestClient, tenants: Tenants, headers_of: Any, method: str
) -> None:
    query = "{ departments { id } }"
    headers = headers_of(tenants)

    if method == "POST":
        response = client.post(GRAPHQL, json={"query": query}, headers=headers)
    else:
        response = client.get(GRAPHQL, params={"query": query}, headers=headers)

    assert_problem(response, 401, "unauthenticated")
    assert "data" not in response.json()


def test_a_revoked_key_is_401(client: TestClient, database: Database, tenants: Tenants) -> None:
    issued = admin.issue_key(database, tenants.home.tenant.id, None, "to revoke")
    headers = {"X-Api-Key": issued.api_key}
    assert data_of(client, "{ departments { id } }", {}, headers)["departments"]

    admin.revoke_key(database, issued.key_id)

    # Every process drops the key when PostgreSQL delivers the revocation's notice.
    deadline = time.monotonic() + NOTICE_WAIT_S
    while True:
        response = client.post(GRAPHQL, json={"query": "{ departments { id } }"}, headers=headers)
        if response.status_code == 401 or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert_problem(response, 401, "unauthenticated")


def test_a_department_key_naming_another_department_in_its_header_is_403(
    client: TestClient, tenants: Tenants
) -> None:
    headers = {**tenants.first.headers, "X-Department-Id": tenants.second.id}

    response = client.post(GRAPHQL, json={"query": "{ departments { id } }"}, headers=headers)

    assert_problem(response, 403, "forbidden")


@pytest.mark.parametrize("department", ["none", "own-tenant"])
def test_a_tenant_wide_key_is_refused_by_the_rest_api(
    client: TestClient, tenants: Tenants, department: str
) -> None:
    headers = dict(tenants.wide)
    if department == "own-tenant":
        headers["X-Department-Id"] = tenants.first.id

    for response in (
        client.get(f"{API}/customers", headers=headers),
        client.post(f"{API}/customers", json={"last_name": "Wide"}, headers=headers),
    ):
        assert_problem(response, 403, "forbidden")
    assert data_of(
        client, '{ customers(filter: {q: "Wide"}) { totalCount } }', {}, tenants.wide
    ) == {"customers": {"totalCount": 0}}


def test_a_suspended_tenants_keys_are_403_tenant_suspended_until_it_is_resumed(
    client: TestClient, database: Database
) -> None:
    world = build_tenant(database)
    department_key = world.key.headers
    wide = tenant_wide_headers(database, world)
    query = "{ departments { id } }"
    for headers in (department_key, wide):  # each now cached by the server
        assert data_of(client, query, {}, headers)["departments"]

    admin.suspend_tenant(database, world.tenant.id, None)

    # Every process drops the tenant's keys when PostgreSQL delivers the suspension's notice.
    deadline = time.monotonic() + NOTICE_WAIT_S
    for headers in (department_key, wide):
        while True:
            response = client.post(GRAPHQL, json={"query": query}, headers=headers)
            if response.status_code != 200 or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert_problem(response, 403, "tenant_suspended")
        assert "data" not in response.json()

    admin.resume_tenant(database, world.tenant.id)

    deadline = time.monotonic() + NOTICE_WAIT_S
    for headers in (department_key, wide):
        while True:
            response = client.post(GRAPHQL, json={"query": query}, headers=headers)
            if response.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert response.json()["data"]["departments"]
