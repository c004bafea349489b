"""GraphQL mutations mirror REST: the same services, rules and error codes, and what one API
writes the other reads."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from dealbase.db.database import Database
from dealbase.ops.admin import create_employee, issue_key
from dealbase.platform.tables import activities, customers, deal_customers, deals
from tests.graphql_api import support
from tests.graphql_api.support import field_errors, only_error
from tests.support import Credentials, TenantWorld

GRAPHQL = "/graphql"
API = "/api/v1/integration"

CUSTOMER = """
fragment C on Customer {
  id tenantId departmentId lastName firstName company email phone1 birthday note version
}
"""
DEAL = (
    """
fragment D on Deal {
  id departmentId stepId employeeId employeeName name volume dealOrigin note version
  customers { ...C }
  step { id position }
  employee { id name }
}
"""
    + CUSTOMER
)
ACTIVITY = """
fragment A on Activity {
  id departmentId type subject note dueAt doneAt customerId dealId employeeId version
}
"""


def returning(fragment: str, field: str, arguments: dict[str, str]) -> str:
    """The document of the mutation ``field``, its ``arguments`` declared as named (name: GraphQL
    type) and passed on, which answers the fields of ``fragment`` (its first definition)."""
    declared = ", ".join(f"${name}: {kind}" for name, kind in arguments.items())
    passed = ", ".join(f"{name}: ${name}" for name in arguments)
    spread = fragment.split()[1]  # "fragment C on Customer ..."
    return f"mutation ({declared}) {{ {field}({passed}) {{ ...{spread} }} }}\n{fragment}"


def gql(
    client: TestClient,
    headers: dict[str, str],
    query: str,
    variables: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return support.gql(client, query, variables, headers)


def data_of(result: dict[str, Any]) -> dict[str, Any]:
    assert "errors" not in result, result["errors"]
    data: dict[str, Any] = result["data"]
    return data


def rest_get(client: TestClient, key: Credentials, path: str) -> Any:
    return client.get(f"{API}{path}", headers=key.headers)


def rest_post(
    client: TestClient, key: Credentials, path: str, body: dict[str, Any]
) -> dict[str, Any]:
    response = client.post(f"{API}{path}", json=body, headers=key.headers)
    assert response.status_code == 201, response.text
    made: dict[str, Any] = response.json()
    return made


def first_steps(client: TestClient, key: Credentials) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = rest_get(client, key, "/steps").json()["data"]
    return steps


def row_counts(database: Database, world: TenantWorld) -> dict[str, int]:
    with database.unit_of_work(world.tenant.scope) as uow:
        return {
            table.name: uow.connection.execute(select(func.count()).select_from(table)).scalar_one()
            for table in (deals, customers, deal_customers, activities)
        }


# --- customers ---------------------------------------------------------------------------

CREATE_CUSTOMER = returning(CUSTOMER, "createCustomer", {"input": "CustomerInput!"})
UPDATE_CUSTOMER = returning(
    CUSTOMER, "updateCustomer", {"id": "UUID!", "changes": "CustomerChanges!"}
)
DELETE_CUSTOMER = "mutation ($id: UUID!) { deleteCustomer(id: $id) }"


def test_create_customer_is_the_customer_rest_reads(client: TestClient, world: TenantWorld) -> None:
    sent = {
        "lastName": "Lovelace",
        "firstName": "Ada",
        "email": "ada@example.com",
        "phone1": "+44 20 7946 0000",
        "birthday": "1906-12-09",
    }

    made = data_of(gql(client, world.key.headers, CREATE_CUSTOMER, {"input": sent}))[
        "createCustomer"
    ]

    assert {name: made[name] for name in sent} == sent
    assert made["company"] is None and made["note"] is None
    assert made["tenantId"] == str(world.tenant.id)
    assert made["departmentId"] == str(world.department.id)
    read = rest_get(client, world.key, f"/customers/{made['id']}")
    assert read.status_code == 200
    assert {
        name: read.json()[name]
        for name in ("id", "last_name", "first_name", "email", "phone_1", "birthday", "company")
    } == {
        "id": made["id"],
        "last_name": "Lovelace",
        "first_name": "Ada",
        "email": "ada@example.com",
        "phone_1": "+44 20 7946 0000",
        "birthday": "1906-12-09",
        "company": None,
    }


def test_update_customer_absent_stays_and_null_clears(
    client: TestClient, world: TenantWorld
) -> None:
    made = rest_post(
        client,
        world.key,
        "/customers",
        {"last_name": "Hopper", "first_name": "Grace", "email": "g@navy.mil", "company": "Navy"},
    )

    changes = {"company": "Remington Rand", "email": None}
    updated = data_of(
        gql(client, world.key.headers, UPDATE_CUSTOMER, {"id": made["id"], "changes": changes})
    )["updateCustomer"]

    assert (updated["lastName"], updated["firstName"]) == ("Hopper", "Grace")
    assert (updated["company"], updated["email"]) == ("Remington Rand", None)
    read = rest_get(client, world.key, f"/customers/{made['id']}").json()
    assert read["updated_at"] > made["updated_at"]
    assert (read["last_name"], read["first_name"], read["company"], read["email"]) == (
        "Hopper", "Grace", "Remington Rand", None,
    )  # fmt: skip


def test_last_name_cannot_be_cleared_with_the_rest_code(
    client: TestClient, world: TenantWorld
) -> None:
    made = rest_post(client, world.key, "/customers", {"last_name": "Hopper"})

    error = only_error(
        gql(
            client,
            world.key.headers,
            UPDATE_CUSTOMER,
            {"id": made["id"], "changes": {"lastName": None}},
        )
    )

    assert error["extensions"]["code"] == "validation_failed"
    assert field_errors(error["extensions"]["errors"]) == [("lastName", "cannot_clear")]
    assert "last_name" not in error["message"]
    assert error["path"] == ["updateCustomer"]
    rest = client.patch(
        f"{API}/customers/{made['id']}", json={"last_name": None}, headers=world.key.headers
    )
    assert rest.status_code == 422
    assert rest.json()["code"] == error["extensions"]["code"]
    assert field_errors(rest.json()["errors"]) == [("last_name", "cannot_clear")]
    assert rest_get(client, world.key, f"/customers/{made['id']}").json()["last_name"] == "Hopper"


def test_delete_customer_then_rest_finds_nothing(client: TestClient, world: TenantWorld) -> None:
    made = rest_post(client, world.key, "/customers", {"last_name": "Hopper"})

    deleted = data_of(gql(client, world.key.headers, DELETE_CUSTOMER, {"id": made["id"]}))

    assert deleted == {"deleteCustomer": made["id"]}
    assert rest_get(client, world.key, f"/customers/{made['id']}").status_code == 404
    again = only_error(gql(client, world.key.headers, DELETE_CUSTOMER, {"id": made["id"]}))
    assert again["extensions"]["code"] == "not_found"


# --- deals -------------------------------------------------------------------------------

CREATE_DEAL = returning(DEAL, "createDeal", {"input": "DealInput!", "departmentId": "UUID"})
UPDATE_DEAL = returning(DEAL, "updateDeal", {"id": "UUID!", "changes": "DealChanges!"})
MOVE_DEAL = returning(DEAL, "moveDeal", {"id": "UUID!", "stepId": "UUID!"})
ASSIGN_DEAL = returning(DEAL, "assignDeal", {"id": "UUID!", "employeeId": "UUID"})
DELETE_DEAL = "mutation ($id: UUID!) { deleteDeal(id: $id) }"
LINK = returning(DEAL, "linkCustomer", {"dealId": "UUID!", "customerId": "UUID!"})
UNLINK = returning(DEAL, "unlinkCustomer", {"dealId": "UUID!", "customerId": "UUID!"})


def new_deal(client: TestClient, key: Credentials, **fields: Any) -> dict[str, Any]:
    return rest_post(client, key, "/deals", {"name": "Engines", **fields})


def test_create_deal_starts_unassigned_in_the_first_step_with_customers_in_order(
    client: TestClient, world: TenantWorld
) -> None:
    names = ["Zed", "Abel", "Moss", "Abel"]
    sent = {
        "name": "Analytical engine",
        "volume": 250_000,
        "dealOrigin": "fair",
        "customers": [{"lastName": name} for name in names],
    }

    made = data_of(gql(client, world.key.headers, CREATE_DEAL, {"input": sent}))["createDeal"]

    first_step = first_steps(client, world.key)[0]
    assert (made["name"], made["volume"], made["dealOrigin"], made["note"]) == (
        "Analytical engine", 250_000, "fair", None,
    )  # fmt: skip
    assert (made["employeeId"], made["employeeName"], made["employee"]) == (None, None, None)
    assert made["stepId"] == made["step"]["id"] == first_step["id"]
    assert made["departmentId"] == str(world.department.id)
    assert [customer["lastName"] for customer in made["customers"]] == names
    assert len({customer["id"] for customer in made["customers"]}) == len(names)
    read = rest_get(client, world.key, f"/deals/{made['id']}").json()
    assert (read["name"], read["volume"], read["step_id"], read["employee_id"]) == (
        "Analytical engine", 250_000, first_step["id"], None,
    )  # fmt: skip
    assert [c["id"] for c in read["customers"]] == [c["id"] for c in made["customers"]]


def test_update_deal_absent_stays_null_clears_and_volume_is_64_bit(
    client: TestClient, world: TenantWorld
) -> None:
    made = new_deal(client, world.key, volume=10, deal_origin="fair", note="call back")
    big = 5_000_000_000  # over GraphQL's 32-bit Int

    updated = data_of(
        gql(
            client,
            world.key.headers,
            UPDATE_DEAL,
            {"id": made["id"], "changes": {"volume": big, "note": None}},
        )
    )["updateDeal"]

    assert (updated["name"], updated["volume"], updated["dealOrigin"], updated["note"]) == (
        "Engines", big, "fair", None,
    )  # fmt: skip
    read = rest_get(client, world.key, f"/deals/{made['id']}").json()
    assert (read["name"], read["volume"], read["deal_origin"], read["note"]) == (
        "Engines", big, "fair", None,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "field", "code"),
    [
        ({"name": None}, "name", "cannot_clear"),
        ({"stepId": None}, "stepId", "cannot_clear"),
        ({"name": "   "}, "name", "blank"),
        ({"volume": -1}, "volume", "out_of_range"),
    ],
)
def test_update_deal_refusals_name_the_field_as_rest_does(
    client: TestClient, world: TenantWorld, changes: dict[str, Any], field: str, code: str
) -> None:
    made = new_deal(client, world.key)

    error = only_error(
        gql(client, world.key.headers, UPDATE_DEAL, {"id": made["id"], "changes": changes})
    )

    assert error["extensions"]["code"] == "validation_failed"
    assert field_errors(error["extensions"]["errors"]) == [(field, code)]
    snake = {"stepId": "step_id"}.get(field, field)
    rest = client.patch(
        f"{API}/deals/{made['id']}",
        json={snake: next(iter(changes.values()))},
        headers=world.key.headers,
    )
    assert rest.status_code == 422
    assert rest.json()["code"] == "validation_failed"
    assert field_errors(rest.json()["errors"]) == [(snake, code)]
    assert rest_get(client, world.key, f"/deals/{made['id']}").json() == made


def test_move_deal_to_another_step(client: TestClient, world: TenantWorld) -> None:
    made = new_deal(client, world.key)
    target = first_steps(client, world.key)[1]

    moved = data_of(
        gql(client, world.key.headers, MOVE_DEAL, {"id": made["id"], "stepId": target["id"]})
    )["moveDeal"]

    assert moved["stepId"] == moved["step"]["id"] == target["id"]
    assert moved["step"]["position"] == target["position"]
    assert rest_get(client, world.key, f"/deals/{made['id']}").json()["step_id"] == target["id"]


def test_move_deal_to_a_step_of_another_department_names_step_id(
    client: TestClient, make_tenant: Any
) -> None:
    world: TenantWorld = make_tenant(departments=2)
    made = new_deal(client, world.keys[0])
    foreign_step = first_steps(client, world.keys[1])[1]

    error = only_error(
        gql(
            client,
            world.keys[0].headers,
            MOVE_DEAL,
            {"id": made["id"], "stepId": foreign_step["id"]},
        )
    )

    assert error["extensions"]["code"] == "validation_failed"
    assert field_errors(error["extensions"]["errors"]) == [("stepId", "not_found")]
    rest = client.patch(
        f"{API}/deals/{made['id']}",
        json={"step_id": foreign_step["id"]},
        headers=world.keys[0].headers,
    )
    assert (rest.status_code, rest.json()["code"]) == (422, "validation_failed")
    assert field_errors(rest.json()["errors"]) == [("step_id", "not_found")]
    assert (
        rest_get(client, world.keys[0], f"/deals/{made['id']}").json()["step_id"]
        == (made["step_id"])
    )


def test_assign_deal_names_the_employee_and_null_unassigns(
    client: TestClient, database: Database, world: TenantWorld
) -> None:
    employee = create_employee(database, world.tenant.id, world.department.id, "Grace Hopper", None)
    made = new_deal(client, world.key)

    assigned = data_of(
        gql(
            client,
            world.key.headers,
            ASSIGN_DEAL,
            {"id": made["id"], "employeeId": str(employee.id)},
        )
    )["assignDeal"]

    assert assigned["employeeId"] == str(employee.id)
    assert assigned["employeeName"] == "Grace Hopper"
    assert assigned["employee"] == {"id": str(employee.id), "name": "Grace Hopper"}
    read = rest_get(client, world.key, f"/deals/{made['id']}").json()
    assert (read["employee_id"], read["employee_name"]) == (str(employee.id), "Grace Hopper")

    unassigned = data_of(
        gql(client, world.key.headers, ASSIGN_DEAL, {"id": made["id"], "employeeId": None})
    )["assignDeal"]

    assert (unassigned["employeeId"], unassigned["employeeName"], unassigned["employee"]) == (
        None, None, None,
    )  # fmt: skip
    read = rest_get(client, world.key, f"/deals/{made['id']}").json()
    assert (read["employee_id"], read["employee_name"]) == (None, None)


def test_assign_deal_to_an_employee_of_another_department_names_employee_id(
    client: TestClient, database: Database, make_tenant: Any
) -> None:
    world: TenantWorld = make_tenant(departments=2)
    other = create_employee(database, world.tenant.id, world.departments[1].id, "Other", None)
    made = new_deal(client, world.keys[0])

    error = only_error(
        gql(
            client,
            world.keys[0].headers,
            ASSIGN_DEAL,
            {"id": made["id"], "employeeId": str(other.id)},
        )
    )

    assert error["extensions"]["code"] == "validation_failed"
    assert field_errors(error["extensions"]["errors"]) == [("employeeId", "not_found")]
    assert rest_get(client, world.keys[0], f"/deals/{made['id']}").json()["employee_id"] is None


def test_delete_deal_keeps_its_customers(client: TestClient, world: TenantWorld) -> None:
    made = new_deal(client, world.key, customers=[{"last_name": "Lovelace"}])

    deleted = data_of(gql(client, world.key.headers, DELETE_DEAL, {"id": made["id"]}))

    assert deleted == {"deleteDeal": made["id"]}
    assert rest_get(client, world.key, f"/deals/{made['id']}").status_code == 404
    customer_id = made["customers"][0]["id"]
    assert rest_get(client, world.key, f"/customers/{customer_id}").status_code == 200
    again = only_error(gql(client, world.key.headers, DELETE_DEAL, {"id": made["id"]}))
    assert again["extensions"]["code"] == "not_found"


def test_link_and_unlink_customer(client: TestClient, world: TenantWorld) -> None:
    made = new_deal(client, world.key, customers=[{"last_name": "First"}])
    customer = rest_post(client, world.key, "/customers", {"last_name": "Second"})
    ids = {"dealId": made["id"], "customerId": customer["id"]}

    linked = data_of(gql(client, world.key.headers, LINK, ids))["linkCustomer"]

    assert [c["lastName"] for c in linked["customers"]] == ["First", "Second"]
    read = rest_get(client, world.key, f"/deals/{made['id']}").json()
    assert [c["id"] for c in read["customers"]] == [c["id"] for c in linked["customers"]]
    again = data_of(gql(client, world.key.headers, LINK, ids))["linkCustomer"]
    assert [c["id"] for c in again["customers"]] == [c["id"] for c in linked["customers"]]

    unlinked = data_of(gql(client, world.key.headers, UNLINK, ids))["unlinkCustomer"]

    assert [c["lastName"] for c in unlinked["customers"]] == ["First"]
    read = rest_get(client, world.key, f"/deals/{made['id']}").json()
    assert [c["last_name"] for c in read["customers"]] == ["First"]
    assert rest_get(client, world.key, f"/customers/{customer['id']}").status_code == 200
    not_linked = only_error(gql(client, world.key.headers, UNLINK, ids))
    assert not_linked["extensions"]["code"] == "not_found"


def test_link_a_customer_of_another_department_names_customer_id(
    client: TestClient, make_tenant: Any
) -> None:
    world: TenantWorld = make_tenant(departments=2)
    made = new_deal(client, world.keys[0])
    foreign = rest_post(client, world.keys[1], "/customers", {"last_name": "Foreign"})

    error = only_error(
        gql(
            client,
            world.keys[0].headers,
            LINK,
            {"dealId": made["id"], "customerId": foreign["id"]},
        )
    )

    assert error["extensions"]["code"] == "validation_failed"
    assert field_errors(error["extensions"]["errors"]) == [("customerId", "not_found")]
    assert rest_get(client, world.keys[0], f"/deals/{made['id']}").json()["customers"] == []


def test_bad_nested_customer_names_its_camel_case_path_and_writes_nothing(
    client: TestClient, database: Database, world: TenantWorld
) -> None:
    before = row_counts(database, world)
    sent = {
        "name": "Engines",
        "customers": [{"lastName": "A"}, {"lastName": "B"}, {"lastName": "   "}],
    }

    error = only_error(gql(client, world.key.headers, CREATE_DEAL, {"input": sent}))

    assert error["extensions"]["code"] == "validation_failed"
    assert field_errors(error["extensions"]["errors"]) == [("customers[2].lastName", "blank")]
    assert "customers[2].lastName" in error["message"]
    assert "last_name" not in error["message"]
    assert row_counts(database, world) == before
    rest = client.post(
        f"{API}/deals",
        json={"name": "Engines", "customers": [{"last_name": "A"}, {"last_name": "   "}]},
        headers=world.key.headers,
    )
    assert (rest.status_code, rest.json()["code"]) == (422, "validation_failed")
    assert field_errors(rest.json()["errors"]) == [("customers[1].last_name", "blank")]
    assert row_counts(database, world) == before


def test_a_tenant_wide_key_creates_in_the_department_it_names(
    client: TestClient, database: Database, make_tenant: Any
) -> None:
    world: TenantWorld = make_tenant(departments=2)
    issued = issue_key(database, world.tenant.id, None, "dashboard")
    dashboard = {"X-Api-Key": issued.api_key}
    target = world.departments[1]

    made = data_of(
        gql(
            client,
            dashboard,
            CREATE_DEAL,
            {"input": {"name": "Engines"}, "departmentId": str(target.id)},
        )
    )["createDeal"]

    assert made["departmentId"] == str(target.id)
    assert made["stepId"] == first_steps(client, world.keys[1])[0]["id"]
    assert rest_get(client, world.keys[1], f"/deals/{made['id']}").status_code == 200
    assert rest_get(client, world.keys[0], f"/deals/{made['id']}").status_code == 404
    nowhere = only_error(gql(client, dashboard, CREATE_DEAL, {"input": {"name": "Engines"}}))
    assert nowhere["extensions"]["code"] == "validation_failed"
    assert field_errors(nowhere["extensions"]["errors"]) == [("departmentId", "missing")]


def test_a_department_key_cannot_change_another_departments_deal(
    client: TestClient, make_tenant: Any
) -> None:
    world: TenantWorld = make_tenant(departments=2)
    theirs = new_deal(client, world.keys[1])

    for query, variables in [
        (UPDATE_DEAL, {"id": theirs["id"], "changes": {"name": "Mine"}}),
        (DELETE_DEAL, {"id": theirs["id"]}),
    ]:
        error = only_error(gql(client, world.keys[0].headers, query, variables))
        assert error["extensions"]["code"] == "not_found"
    assert rest_get(client, world.keys[1], f"/deals/{theirs['id']}").json() == theirs


# --- activities --------------------------------------------------------------------------

CREATE_ACTIVITY = returning(ACTIVITY, "createActivity", {"input": "ActivityInput!"})
UPDATE_ACTIVITY = returning(
    ACTIVITY, "updateActivity", {"id": "UUID!", "changes": "ActivityChanges!"}
)
DELETE_ACTIVITY = "mutation ($id: UUID!) { deleteActivity(id: $id) }"


def test_create_update_delete_activity_through_rest_eyes(
    client: TestClient, database: Database, world: TenantWorld
) -> None:
    customer = rest_post(client, world.key, "/customers", {"last_name": "Lovelace"})
    deal = new_deal(client, world.key)
    employee = create_employee(database, world.tenant.id, world.department.id, "Grace", None)
    sent = {
        "type": "MEETING",
        "customerId": customer["id"],
        "dealId": deal["id"],
        "employeeId": str(employee.id),
        "subject": "Demo",
        "note": "Bring the engine",
        "dueAt": "2030-05-01T09:30:00+00:00",
    }

    made = data_of(gql(client, world.key.headers, CREATE_ACTIVITY, {"input": sent}))[
        "createActivity"
    ]

    assert {name: made[name] for name in sent if name != "dueAt"} == {
        name: value for name, value in sent.items() if name != "dueAt"
    }
    assert made["dueAt"].startswith("2030-05-01T09:30:00")
    assert made["doneAt"] is None
    read = rest_get(client, world.key, f"/activities/{made['id']}").json()
    assert (read["type"], read["customer_id"], read["deal_id"], read["employee_id"]) == (
        "meeting", customer["id"], deal["id"], str(employee.id),
    )  # fmt: skip
    assert (read["subject"], read["due_at"]) == ("Demo", "2030-05-01T09:30:00.000000Z")

    changes = {"type": "CALL", "subject": "Call instead", "dealId": None, "employeeId": None}
    updated = data_of(
        gql(client, world.key.headers, UPDATE_ACTIVITY, {"id": made["id"], "changes": changes})
    )["updateActivity"]

    assert (updated["type"], updated["subject"], updated["dealId"], updated["employeeId"]) == (
        "CALL", "Call instead", None, None,
    )  # fmt: skip
    assert (updated["note"], updated["customerId"]) == ("Bring the engine", customer["id"])
    read = rest_get(client, world.key, f"/activities/{made['id']}").json()
    assert (read["type"], read["subject"], read["deal_id"], read["note"]) == (
        "call", "Call instead", None, "Bring the engine",
    )  # fmt: skip

    deleted = data_of(gql(client, world.key.headers, DELETE_ACTIVITY, {"id": made["id"]}))

    assert deleted == {"deleteActivity": made["id"]}
    assert rest_get(client, world.key, f"/activities/{made['id']}").status_code == 404
    again = only_error(gql(client, world.key.headers, DELETE_ACTIVITY, {"id": made["id"]}))
    assert again["extensions"]["code"] == "not_found"


def test_activity_naming_another_departments_customer_names_customer_id(
    client: TestClient, database: Database, make_tenant: Any
) -> None:
    world: TenantWorld = make_tenant(departments=2)
    foreign = rest_post(client, world.keys[1], "/customers", {"last_name": "Foreign"})
    before = row_counts(database, world)

    error = only_error(
        gql(
            client,
            world.keys[0].headers,
            CREATE_ACTIVITY,
            {"input": {"type": "CALL", "customerId": foreign["id"]}},
        )
    )

    assert error["extensions"]["code"] == "validation_failed"
    assert field_errors(error["extensions"]["errors"]) == [("customerId", "not_found")]
    rest = client.post(
        f"{API}/activities",
        json={"type": "call", "customer_id": foreign["id"]},
        headers=world.keys[0].headers,
    )
    assert (rest.status_code, rest.json()["code"]) == (422, "validation_failed")
    assert field_errors(rest.json()["errors"]) == [("customer_id", "not_found")]
    assert row_counts(database, world) == before


def test_activity_cannot_clear_its_customer(client: TestClient, world: TenantWorld) -> None:
    customer = rest_post(client, world.key, "/customers", {"last_name": "Lovelace"})
    made = rest_post(
        client, world.key, "/activities", {"type": "call", "customer_id": customer["id"]}
    )

    error = only_error(
        gql(
            client,
            world.key.headers,
            UPDATE_ACTIVITY,
            {"id": made["id"], "changes": {"customerId": None}},
        )
    )

    assert error["extensions"]["code"] == "validation_failed"
    assert field_errors(error["extensions"]["errors"]) == [("customerId", "cannot_clear")]
    assert rest_get(client, world.key, f"/activities/{made['id']}").json() == made


@pytest.mark.parametrize(
    ("query", "path"),
    [(UPDATE_CUSTOMER, "customers"), (UPDATE_DEAL, "deals"), (UPDATE_ACTIVITY, "activities")],
)
def test_unknown_ids_are_not_found_as_in_rest(
    client: TestClient, world: TenantWorld, query: str, path: str
) -> None:
    unknown = str(uuid.uuid4())

    error = only_error(gql(client, world.key.headers, query, {"id": unknown, "changes": {}}))

    assert error["extensions"]["code"] == "not_found"
    rest = client.patch(f"{API}/{path}/{unknown}", json={}, headers=world.key.headers)
    assert (rest.status_code, rest.json()["code"]) == (404, error["extensions"]["code"])


# --- values GraphQL's own types refuse ---------------------------------------------------

# Each a variable value the schema's types refuse before any resolver runs, with the field
# REST names for the same mistake (REST answers validation_failed for each).
BAD_VARIABLES = [
    pytest.param(CREATE_CUSTOMER, {"input": {"firstName": "Ada"}}, "lastName", id="missing"),
    pytest.param(
        CREATE_CUSTOMER,
        {"input": {"lastName": "x", "birthday": "1990-02-30"}},
        "birthday",
        id="date",
    ),
    pytest.param(
        CREATE_DEAL,
        {"input": {"name": "d", "customers": [{"lastName": "a"}, {"lastName": 7}]}},
        "customers[1].lastName",
        id="nested",
    ),
    pytest.param(CREATE_DEAL, {"input": {"name": "d", "volume": "lots"}}, "volume", id="bigint"),
    pytest.param(
        CREATE_ACTIVITY,
        {"input": {"type": "PHONE", "customerId": str(uuid.uuid4())}},
        "type",
        id="enum",
    ),
    pytest.param(MOVE_DEAL, {"id": str(uuid.uuid4()), "stepId": "nope"}, "stepId", id="uuid"),
]


@pytest.mark.parametrize(("query", "variables", "field"), BAD_VARIABLES)
def test_a_refused_variable_is_a_client_error_not_internal(
    client: TestClient,
    database: Database,
    world: TenantWorld,
    query: str,
    variables: dict[str, Any],
    field: str,
) -> None:
    before = row_counts(database, world)

    result = gql(client, world.key.headers, query, variables)

    assert result.get("data") is None
    codes = [error["extensions"]["code"] for error in result["errors"]]
    assert "INTERNAL" not in codes, result["errors"]
    assert row_counts(database, world) == before


@pytest.mark.parametrize(("query", "variables", "field"), BAD_VARIABLES)
def test_a_refused_variable_has_the_rest_code_and_names_the_field(
    client: TestClient, world: TenantWorld, query: str, variables: dict[str, Any], field: str
) -> None:
    result = gql(client, world.key.headers, query, variables)

    (error,) = result["errors"]
    assert error["extensions"]["code"] == "validation_failed", error
    assert [item["field"] for item in error["extensions"].get("errors", [])] == [field]


def test_a_graphql_mutation_records_the_event_rest_would(
    client: TestClient, world: TenantWorld
) -> None:
    made = data_of(
        gql(client, world.key.headers, CREATE_CUSTOMER, {"input": {"lastName": "Lovelace"}})
    )["createCustomer"]

    events = client.get(
        "/api/v1/integration/events",
        params={"types": "customer.created"},
        headers=world.key.headers,
    ).json()["data"]

    assert [event["data"] for event in events] == [
        rest_get(client, world.key, f"/customers/{made['id']}").json()
    ]
