"""Conformance to the integration document (/work/shared/spec/integration-api.md), a contract.

The document's Customer and Deal tables are transcribed below as data, not read from the code, so
a field the code drops or retypes fails here. Where the document says "not shown", the decision
docs/api.md records is what is pinned (201, 401, 422, 404, unknown fields refused).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import Database
from dealbase.ops import admin
from dealbase.platform import tables
from tests.support import FakeClock, TenantWorld, build_tenant

INTEGRATION = "/api/v1/integration"
CUSTOMERS = f"{INTEGRATION}/customers"
DEALS = f"{INTEGRATION}/deals"
PROBLEM = "application/problem+json"

# Rule 3 of the Customer section: <YYYY-MM-DD>T<HH:MM:SS.ffffff>Z.
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

# The Customer table: field -> type, for the client-settable ("yes"/"no") and server-managed rows.
CUSTOMER_REQUEST_FIELDS: dict[str, str] = {
    "last_name": "string",
    "first_name": "string",
    "company": "string",
    "website": "string",
    "title": "string",
    "phone_1": "string",
    "phone_2": "string",
    "phone_3": "string",
    "phone_1_label": "string",
    "phone_2_label": "string",
    "phone_3_label": "string",
    "email": "string",
    "postcode": "string",
    "address": "string",
    "city": "string",
    "country": "string",
    "state": "string",
    "contact_origin": "string",
    "birthday": "date",
    "note": "string",
}
CUSTOMER_SERVER_MANAGED: dict[str, str] = {
    "id": "uuid",
    "tenant_id": "uuid",
    "created_at": "datetime",
    "updated_at": "datetime",
}
# Rule 2: returned as well; docs/api.md decides it is an optional string a client may set.
ADDRESS_ADDITION = "address_addition"
# Not in the document: the client's own id of a customer or deal, for bulk sync (docs/api.md,
# "External ids and bulk sync"), an optional string on requests and responses.
EXTERNAL_ID = "external_id"
# A tenant's own fields, beyond the integration document (docs/api.md, "Custom fields").
CUSTOM_FIELDS = "custom_fields"
CUSTOMER_OPTIONAL = [name for name in CUSTOMER_REQUEST_FIELDS if name != "last_name"]
CUSTOMER_RESPONSE_FIELDS = {
    **CUSTOMER_REQUEST_FIELDS,
    ADDRESS_ADDITION: "string",
    EXTERNAL_ID: "string",
} | CUSTOMER_SERVER_MANAGED

# The Deal table: "request and response" rows, then "response" rows.
DEAL_REQUEST_FIELDS: dict[str, str] = {
    "name": "string",
    "volume": "integer",
    "deal_origin": "string",
    "note": "string",
    "customers": "customers",
}
DEAL_RESPONSE_ONLY: dict[str, str] = {
    "id": "uuid",
    "employee_id": "uuid or null",
    "employee_name": "string or null",
    "step_id": "uuid",
    "department_id": "uuid",
    "created_at": "datetime",
    "updated_at": "datetime",
}
DEAL_RESPONSE_FIELDS = DEAL_REQUEST_FIELDS | DEAL_RESPONSE_ONLY | {EXTERNAL_ID: "string"}

# A value for every client-settable customer field, each of the field's documented type.
FULL_CUSTOMER: dict[str, Any] = {
    "last_name": "Lovelace",
    "first_name": "Ada",
    "company": "Analytical Engines Ltd",
    "website": "https://engines.example.com",
    "title": "Countess",
    "phone_1": "+44 20 7946 0001",
    "phone_2": "+44 20 7946 0002",
    "phone_3": "+44 20 7946 0003",
    "phone_1_label": "office",
    "phone_2_label": "mobile",
    "phone_3_label": "home",
    "email": "ada@example.com",
    "postcode": "SW1Y 4LE",
    "address": "12 St James's Square",
    "city": "London",
    "country": "GB",
    "state": "Greater London",
    "contact_origin": "website",
    "birthday": "1985-12-10",
    "note": "Met at the trade fair.",
}
FULL_DEAL: dict[str, Any] = {
    "name": "Analytical engine, 2 units",
    "volume": 250_000,
    "deal_origin": "trade fair",
    "note": "Wants delivery before spring.",
    "customers": [{"last_name": "Lovelace", "first_name": "Ada"}, {"last_name": "Babbage"}],
}

# A server-managed or response-only value of the right type, to send where the document says
# the client may not: the refusal must be about direction, not about the value.
SAMPLE_UUID = "01a2008a-729d-7000-8ccb-38fd7605fcf5"
SAMPLE_TIMESTAMP = "2026-11-21T09:30:00.000000Z"


@pytest.fixture(scope="module")
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def world(database: Database) -> TenantWorld:
    """A tenant with one department and its key, made the way an operator makes one; shared by
    the module (tests that count rows compare their own before and after)."""
    return build_tenant(database)


def row_counts(database: Database, world: TenantWorld) -> dict[str, int]:
    with database.unit_of_work(world.tenant.scope) as uow:
        return {
            table.name: uow.connection.execute(select(func.count()).select_from(table)).scalar_one()
            for table in (tables.customers, tables.deals, tables.deal_customers, tables.activities)
        }


def post(client: TestClient, world: TenantWorld, path: str, body: object) -> httpx.Response:
    response: httpx.Response = client.post(path, json=body, headers=world.key.headers)
    return response


def created(client: TestClient, world: TenantWorld, path: str, body: object) -> dict[str, Any]:
    response = post(client, world, path, body)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM), response.headers
    body: dict[str, Any] = response.json()
    assert (body["status"], body["code"], body["type"]) == (status, code, f"/problems/{code}")
    return body


def field_errors(body: dict[str, Any]) -> set[tuple[str, str]]:
    return {(error["field"], error["code"]) for error in body["errors"]}


def is_uuid(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


def parse_timestamp(value: str) -> datetime:
    assert TIMESTAMP.fullmatch(value), value
    return datetime.fromisoformat(value.removesuffix("Z") + "+00:00")


def assert_of_type(value: object, kind: str, where: str) -> None:
    """``value`` is of the document's type ``kind`` (its "Type" column, spelled the same)."""
    checks: dict[str, Callable[[object], bool]] = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "date": lambda v: isinstance(v, str) and bool(DATE.fullmatch(v)),
        "uuid": is_uuid,
        "datetime": lambda v: isinstance(v, str) and bool(TIMESTAMP.fullmatch(v)),
        "uuid or null": lambda v: v is None or is_uuid(v),
        "string or null": lambda v: v is None or isinstance(v, str),
        "customers": lambda v: isinstance(v, list),
    }
    assert checks[kind](value), f"{where}: {value!r} is not of type {kind}"
    if kind == "date":
        assert isinstance(value, str)
        date.fromisoformat(value)  # a real calendar date


def assert_full_customer(customer: dict[str, Any], where: str) -> None:
    """Every field of the Customer table (and address_addition), no other, each of its type or
    null where the field is optional."""
    assert set(customer) == set(CUSTOMER_RESPONSE_FIELDS), where
    for name, kind in CUSTOMER_RESPONSE_FIELDS.items():
        optional = name in CUSTOMER_OPTIONAL or name in (ADDRESS_ADDITION, EXTERNAL_ID)
        if not (optional and customer[name] is None):
            assert_of_type(customer[name], kind, f"{where}.{name}")


# --- The Customer table ----------------------------------------------------------------------


def test_customer_every_field_of_the_table_is_returned_with_its_type(
    client: TestClient, world: TenantWorld
) -> None:
    response = post(client, world, CUSTOMERS, FULL_CUSTOMER)

    assert response.status_code == 201, response.text
    customer = response.json()
    assert_full_customer(customer, "customer")
    for name in [*CUSTOMER_REQUEST_FIELDS, *CUSTOMER_SERVER_MANAGED]:
        assert customer[name] is not None, name


def test_customer_every_request_field_is_accepted_and_returned_as_sent(
    client: TestClient, world: TenantWorld
) -> None:
    customer = created(client, world, CUSTOMERS, FULL_CUSTOMER)

    assert {name: customer[name] for name in FULL_CUSTOMER} == FULL_CUSTOMER
    read = client.get(f"{CUSTOMERS}/{customer['id']}", headers=world.key.headers)
    assert read.status_code == 200
    assert read.json() == customer


def test_customer_last_name_is_required(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    before = row_counts(database, world)
    body = {name: value for name, value in FULL_CUSTOMER.items() if name != "last_name"}

    problem = assert_problem(post(client, world, CUSTOMERS, body), 422, "validation_failed")

    assert field_errors(problem) == {("last_name", "missing")}
    assert row_counts(database, world) == before


@pytest.mark.parametrize("name", CUSTOMER_OPTIONAL)
def test_customer_each_optional_field_may_be_left_out(
    client: TestClient, world: TenantWorld, name: str
) -> None:
    body = {field: value for field, value in FULL_CUSTOMER.items() if field != name}

    customer = created(client, world, CUSTOMERS, body)

    assert customer[name] is None


@pytest.mark.parametrize("name", list(CUSTOMER_SERVER_MANAGED))
def test_customer_server_managed_fields_are_refused_in_a_request(
    client: TestClient, world: TenantWorld, database: Database, name: str
) -> None:
    before = row_counts(database, world)
    value = SAMPLE_TIMESTAMP if CUSTOMER_SERVER_MANAGED[name] == "datetime" else SAMPLE_UUID
    if name == "tenant_id":
        value = str(world.tenant.id)  # even the caller's own tenant: the scope decides

    response = post(client, world, CUSTOMERS, {"last_name": "Lovelace", name: value})

    problem = assert_problem(response, 422, "validation_failed")
    assert field_errors(problem) == {(name, "unknown_field")}
    assert row_counts(database, world) == before


# --- The Customer rules ----------------------------------------------------------------------


def test_customer_rule_1_every_unsupplied_optional_field_is_null(
    client: TestClient, world: TenantWorld
) -> None:
    only_required = created(client, world, CUSTOMERS, {"last_name": "Lovelace"})
    some = created(
        client, world, CUSTOMERS, {"last_name": "Babbage", "city": "London", "birthday": None}
    )

    for name in CUSTOMER_OPTIONAL:
        assert name in only_required, name
        assert only_required[name] is None, name
        if name != "city":
            assert name in some, name
            assert some[name] is None, name
    assert some["city"] == "London"
    # Also when read back, and inside a deal's customers.
    read = client.get(f"{CUSTOMERS}/{only_required['id']}", headers=world.key.headers).json()
    (in_deal,) = created(client, world, DEALS, {"name": "d", "customers": [{"last_name": "L"}]})[
        "customers"
    ]
    for name in CUSTOMER_OPTIONAL:
        assert read[name] is None, name
        assert in_deal[name] is None, name


def test_customer_rule_2_address_addition_is_returned_null_when_not_supplied(
    client: TestClient, world: TenantWorld
) -> None:
    customer = created(client, world, CUSTOMERS, {"last_name": "Lovelace"})
    (in_deal,) = created(client, world, DEALS, {"name": "d", "customers": [{"last_name": "L"}]})[
        "customers"
    ]
    read = client.get(f"{CUSTOMERS}/{customer['id']}", headers=world.key.headers).json()

    for body in (customer, in_deal, read):
        assert ADDRESS_ADDITION in body
        assert body[ADDRESS_ADDITION] is None
    # docs/api.md: an ordinary optional string a client may set, like `address`.
    supplied = created(
        client, world, CUSTOMERS, {"last_name": "Lovelace", ADDRESS_ADDITION: "2nd floor"}
    )
    assert supplied[ADDRESS_ADDITION] == "2nd floor"


def test_customer_rule_3_timestamps_are_iso_8601_utc_with_microseconds_and_z(
    client: TestClient, world: TenantWorld
) -> None:
    customer = created(client, world, CUSTOMERS, {"last_name": "Lovelace"})
    (in_deal,) = created(client, world, DEALS, {"name": "d", "customers": [{"last_name": "L"}]})[
        "customers"
    ]
    read = client.get(f"{CUSTOMERS}/{customer['id']}", headers=world.key.headers).json()
    listed = client.get(CUSTOMERS, headers=world.key.headers).json()["data"]

    for body in (customer, in_deal, read, *listed):
        for name in ("created_at", "updated_at"):
            value = body[name]
            assert isinstance(value, str), (name, value)
            assert TIMESTAMP.fullmatch(value), (name, value)
            moment = datetime.fromisoformat(value.removesuffix("Z") + "+00:00")
            assert moment.utcoffset() == timedelta(0)


def test_customer_rule_4_server_managed_fields_are_generated_by_the_server(
    client: TestClient, world: TenantWorld, make_other_world: Callable[[], TenantWorld]
) -> None:
    before = datetime.now(UTC)
    first = created(client, world, CUSTOMERS, {"last_name": "Lovelace"})
    second = created(client, world, CUSTOMERS, {"last_name": "Lovelace"})
    after = datetime.now(UTC)
    other = make_other_world()
    foreign = created(client, other, CUSTOMERS, {"last_name": "Lovelace"})

    # id: made by the server, a new one for each create, never sent by the client.
    assert is_uuid(first["id"])
    assert is_uuid(second["id"])
    assert is_uuid(foreign["id"])
    assert len({first["id"], second["id"], foreign["id"]}) == 3
    # tenant_id: from the authentication scope (Authentication rule 4), not from the request.
    assert first["tenant_id"] == second["tenant_id"] == str(world.tenant.id)
    assert foreign["tenant_id"] == str(other.tenant.id)
    # created_at / updated_at: set by the server, now, equal on creation.
    slack = timedelta(seconds=5)  # the database's clock, not the test's
    for customer in (first, second):
        created_at = parse_timestamp(customer["created_at"])
        assert before - slack <= created_at <= after + slack
        assert customer["updated_at"] == customer["created_at"]


@pytest.fixture
def make_other_world(database: Database) -> Callable[[], TenantWorld]:
    return lambda: build_tenant(database)


# --- The Deal table --------------------------------------------------------------------------


def test_deal_every_field_of_the_table_is_returned_with_its_type(
    client: TestClient, world: TenantWorld
) -> None:
    response = post(client, world, DEALS, FULL_DEAL)

    assert response.status_code == 201, response.text
    deal = response.json()
    assert set(deal) == set(DEAL_RESPONSE_FIELDS)
    for name, kind in DEAL_RESPONSE_FIELDS.items():
        if not (name == EXTERNAL_ID and deal[name] is None):
            assert_of_type(deal[name], kind, f"deal.{name}")
    assert deal["department_id"] == str(world.department.id)
    # In a response each element of customers is a full customer object.
    assert len(deal["customers"]) == 2
    for index, customer in enumerate(deal["customers"]):
        assert_full_customer(customer, f"deal.customers[{index}]")


def test_deal_every_request_field_is_accepted_and_returned_as_sent(
    client: TestClient, world: TenantWorld
) -> None:
    deal = created(client, world, DEALS, FULL_DEAL)

    for name in ("name", "volume", "deal_origin", "note"):
        assert deal[name] == FULL_DEAL[name], name
    sent_customers = FULL_DEAL["customers"]
    assert [
        {k: c[k] for k in sent} for c, sent in zip(deal["customers"], sent_customers, strict=True)
    ] == sent_customers
    read = client.get(f"{DEALS}/{deal['id']}", headers=world.key.headers)
    assert read.status_code == 200
    assert read.json() == deal


def test_deal_customer_elements_take_every_customer_field(
    client: TestClient, world: TenantWorld
) -> None:
    deal = created(client, world, DEALS, {"name": "d", "customers": [FULL_CUSTOMER]})

    (customer,) = deal["customers"]
    assert {name: customer[name] for name in FULL_CUSTOMER} == FULL_CUSTOMER


def test_deal_customer_elements_require_last_name(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    before = row_counts(database, world)
    body = {"name": "d", "customers": [{"last_name": "Lovelace"}, {"first_name": "Ada"}]}

    problem = assert_problem(post(client, world, DEALS, body), 422, "validation_failed")

    assert field_errors(problem) == {("customers[1].last_name", "missing")}
    assert row_counts(database, world) == before


@pytest.mark.parametrize("name", list(DEAL_RESPONSE_ONLY))
def test_deal_response_only_fields_are_refused_in_a_request(
    client: TestClient, world: TenantWorld, database: Database, name: str
) -> None:
    step_id = client.get(f"{INTEGRATION}/steps", headers=world.key.headers).json()["data"][0]["id"]
    employee = admin.create_employee(
        database, world.tenant.id, world.department.id, "Eve Employee", None
    )
    values = {
        "id": SAMPLE_UUID,
        "employee_id": str(employee.id),
        "employee_name": employee.name,
        "step_id": step_id,
        "department_id": str(world.department.id),
        "created_at": SAMPLE_TIMESTAMP,
        "updated_at": SAMPLE_TIMESTAMP,
    }
    before = row_counts(database, world)

    response = post(client, world, DEALS, {"name": "d", name: values[name]})

    problem = assert_problem(response, 422, "validation_failed")
    assert field_errors(problem) == {(name, "unknown_field")}
    assert row_counts(database, world) == before


@pytest.mark.parametrize("name", list(CUSTOMER_SERVER_MANAGED))
def test_deal_customer_elements_refuse_server_managed_fields(
    client: TestClient, world: TenantWorld, database: Database, name: str
) -> None:
    before = row_counts(database, world)
    value = SAMPLE_TIMESTAMP if CUSTOMER_SERVER_MANAGED[name] == "datetime" else SAMPLE_UUID

    body = {"name": "d", "customers": [{"last_name": "Lovelace", name: value}]}
    problem = assert_problem(post(client, world, DEALS, body), 422, "validation_failed")

    assert field_errors(problem) == {(f"customers[0].{name}", "unknown_field")}
    assert row_counts(database, world) == before


# --- The "Create a deal" rules ---------------------------------------------------------------


def test_deal_rule_1_one_customer_per_element_returned_in_request_order(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    before = row_counts(database, world)
    sent = [
        {"last_name": "Zuse", "first_name": "Konrad"},
        {"last_name": "Babbage"},
        {"last_name": "Lovelace", "email": "ada@example.com"},
        {"last_name": "Babbage"},  # the same data twice is still two customers
    ]

    deal = created(client, world, DEALS, {"name": "Engines", "customers": sent})

    returned = deal["customers"]
    assert [{k: c[k] for k in element} for c, element in zip(returned, sent, strict=True)] == sent
    ids = [c["id"] for c in returned]
    assert len(set(ids)) == len(sent)
    assert all(is_uuid(i) for i in ids)
    after = row_counts(database, world)
    assert after["customers"] == before["customers"] + len(sent)
    assert after["deal_customers"] == before["deal_customers"] + len(sent)
    assert after["deals"] == before["deals"] + 1
    # Each is a customer of its own, and the deal keeps the order when read back.
    for customer in returned:
        read = client.get(f"{CUSTOMERS}/{customer['id']}", headers=world.key.headers)
        assert read.status_code == 200
        assert read.json() == customer
    again = client.get(f"{DEALS}/{deal['id']}", headers=world.key.headers).json()
    assert [c["id"] for c in again["customers"]] == ids


def test_deal_rule_2_a_new_deal_without_assignment_has_null_employee(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    # The department has an employee, so "unassigned" is the server's choice, not a lack.
    admin.create_employee(database, world.tenant.id, world.department.id, "Eve Employee", None)

    for body in ({"name": "d"}, FULL_DEAL):
        deal = created(client, world, DEALS, body)
        assert "employee_id" in deal
        assert deal["employee_id"] is None
        assert "employee_name" in deal
        assert deal["employee_name"] is None
        read = client.get(f"{DEALS}/{deal['id']}", headers=world.key.headers).json()
        assert (read["employee_id"], read["employee_name"]) == (None, None)


# --- Paths, headers and status codes ---------------------------------------------------------

CREATES = [(CUSTOMERS, {"last_name": "Lovelace"}), (DEALS, {"name": "Engines"})]
CREATE_IDS = ["customers", "deals"]


@pytest.mark.parametrize(("path", "body"), CREATES, ids=CREATE_IDS)
def test_create_is_post_at_the_documented_path_and_answers_201(
    client: TestClient, world: TenantWorld, path: str, body: dict[str, Any]
) -> None:
    response = post(client, world, path, body)

    assert response.status_code == 201, response.text
    assert response.headers["content-type"].startswith("application/json")
    created_body = response.json()
    assert response.headers["location"] == f"{path}/{created_body['id']}"


@pytest.mark.parametrize("label", ["/v1/customer", "/v1/customers", "/api/v1/customers"])
def test_only_the_full_path_is_the_create_a_customer_operation(
    client: TestClient, world: TenantWorld, database: Database, label: str
) -> None:
    # The document: reference labels appear without the prefix; the full path is the one above.
    before = row_counts(database, world)

    response = post(client, world, label, {"last_name": "Lovelace"})

    assert_problem(response, 404, "not_found")
    assert row_counts(database, world) == before


MISSING_HEADERS = {
    "no X-Api-Key": ("X-Api-Key",),
    "no X-Department-Id": ("X-Department-Id",),
    "neither": ("X-Api-Key", "X-Department-Id"),
}


@pytest.mark.parametrize("missing", list(MISSING_HEADERS))
@pytest.mark.parametrize(("path", "body"), CREATES, ids=CREATE_IDS)
def test_both_authentication_headers_are_required(
    client: TestClient,
    world: TenantWorld,
    database: Database,
    path: str,
    body: dict[str, Any],
    missing: str,
) -> None:
    headers = {
        name: value
        for name, value in world.key.headers.items()
        if name not in MISSING_HEADERS[missing]
    }
    before = row_counts(database, world)

    response = client.post(path, json=body, headers=headers)

    assert_problem(response, 401, "unauthenticated")
    assert row_counts(database, world) == before


def test_the_department_header_names_the_department_the_key_may_reach(
    client: TestClient, world: TenantWorld, database: Database
) -> None:
    other = build_tenant(database)
    headers = {**world.key.headers, "X-Department-Id": str(other.department.id)}
    before = row_counts(database, world)

    for path, body in CREATES:
        assert_problem(client.post(path, json=body, headers=headers), 403, "forbidden")
    assert row_counts(database, world) == before


def test_a_validation_failure_is_422_and_an_unknown_resource_404(
    client: TestClient, world: TenantWorld
) -> None:
    # The document's own example of a validation failure: a missing last_name.
    assert_problem(post(client, world, CUSTOMERS, {"first_name": "Ada"}), 422, "validation_failed")
    assert_problem(post(client, world, DEALS, {"volume": 5}), 422, "validation_failed")
    for path in (CUSTOMERS, DEALS):
        unknown = client.get(f"{path}/{uuid.uuid4()}", headers=world.key.headers)
        assert_problem(unknown, 404, "not_found")


@pytest.mark.parametrize(("path", "body"), CREATES, ids=CREATE_IDS)
def test_exceeding_the_rate_limit_is_429_with_retry_after(
    settings: Settings, database: Database, path: str, body: dict[str, Any]
) -> None:
    world = build_tenant(database)
    # One request a second, on a clock only the test moves (the in-process limiter's): nothing
    # refills between the two requests, however slowly a loaded machine sends them.
    app = create_app(
        settings.model_copy(
            update={"redis_url": None, "rate_limit_key": "1/s", "rate_limit_key_burst": 1}
        ),
        clock=FakeClock(),
    )
    with TestClient(app, raise_server_exceptions=False) as limited:
        first = limited.post(path, json=body, headers=world.key.headers)
        before = row_counts(database, world)
        refused = limited.post(path, json=body, headers=world.key.headers)

    assert first.status_code == 201, first.text
    assert_problem(refused, 429, "rate_limited")
    retry_after = refused.headers["retry-after"]
    assert retry_after.isdigit(), retry_after
    assert int(retry_after) >= 1, retry_after
    assert row_counts(database, world) == before


# --- The OpenAPI document --------------------------------------------------------------------


@pytest.fixture(scope="module")
def document(client: TestClient) -> dict[str, Any]:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    result: dict[str, Any] = response.json()
    return result


TypeSet = set[tuple[str, str | None]]
NULL: TypeSet = {("null", None)}


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        schema = document["components"]["schemas"][name]
    return schema


def types_of(document: dict[str, Any], schema: dict[str, Any]) -> TypeSet:
    """The (type, format) pairs a property admits, through anyOf and $ref."""
    schema = resolve(document, schema)
    if "anyOf" in schema:
        return set().union(*(types_of(document, option) for option in schema["anyOf"]))
    return {(schema["type"], schema.get("format"))}


OPENAPI_TYPE: dict[str, TypeSet] = {
    "string": {("string", None)},
    "integer": {("integer", None)},
    "date": {("string", "date")},
    "uuid": {("string", "uuid")},
    "datetime": {("string", "date-time")},
    "uuid or null": {("string", "uuid"), ("null", None)},
    "string or null": {("string", None), ("null", None)},
    "customers": {("array", None)},
}


def operation(document: dict[str, Any], path: str) -> dict[str, Any]:
    assert path in document["paths"], sorted(document["paths"])
    assert "post" in document["paths"][path]
    result: dict[str, Any] = document["paths"][path]["post"]
    return result


def request_schema(document: dict[str, Any], path: str) -> dict[str, Any]:
    body = operation(document, path)["requestBody"]
    assert body["required"] is True
    return resolve(document, body["content"]["application/json"]["schema"])


def response_schema(document: dict[str, Any], path: str) -> dict[str, Any]:
    created_response = operation(document, path)["responses"]["201"]
    return resolve(document, created_response["content"]["application/json"]["schema"])


def assert_property_types(
    document: dict[str, Any], schema: dict[str, Any], fields: dict[str, str], *, nullable: set[str]
) -> None:
    for name, kind in fields.items():
        assert name in schema["properties"], name
        expected = OPENAPI_TYPE[kind] | (NULL if name in nullable else set())
        assert types_of(document, schema["properties"][name]) == expected, name


def test_openapi_documents_the_create_a_customer_operation(document: dict[str, Any]) -> None:
    request = request_schema(document, CUSTOMERS)
    assert set(request["properties"]) == set(CUSTOMER_REQUEST_FIELDS) | {
        ADDRESS_ADDITION,
        EXTERNAL_ID,
        CUSTOM_FIELDS,
    }
    assert request["required"] == ["last_name"]
    assert request["additionalProperties"] is False
    optional = {*CUSTOMER_OPTIONAL, ADDRESS_ADDITION, EXTERNAL_ID}
    assert_property_types(document, request, CUSTOMER_REQUEST_FIELDS, nullable=optional)

    response = response_schema(document, CUSTOMERS)
    # The tenant's own fields beside the document's, only where it has some.
    assert set(response["properties"]) == set(CUSTOMER_RESPONSE_FIELDS) | {CUSTOM_FIELDS}
    assert set(response["required"]) == set(CUSTOMER_RESPONSE_FIELDS)  # always present
    assert_property_types(document, response, CUSTOMER_RESPONSE_FIELDS, nullable=optional)
    created_at = resolve(document, response["properties"]["created_at"])
    assert re.compile(created_at["pattern"]).fullmatch("2026-11-21T09:30:00.000000Z")


def test_openapi_documents_the_create_a_deal_operation(document: dict[str, Any]) -> None:
    request = request_schema(document, DEALS)
    assert set(request["properties"]) == set(DEAL_REQUEST_FIELDS) | {EXTERNAL_ID, CUSTOM_FIELDS}
    assert request["additionalProperties"] is False
    assert_property_types(
        document, request, DEAL_REQUEST_FIELDS, nullable={"volume", "deal_origin", "note"}
    )
    element = resolve(document, request["properties"]["customers"]["items"])
    assert element["required"] == ["last_name"]
    assert set(element["properties"]) >= set(CUSTOMER_REQUEST_FIELDS)
    assert not set(element["properties"]) & set(CUSTOMER_SERVER_MANAGED)

    response = response_schema(document, DEALS)
    assert set(response["properties"]) == set(DEAL_RESPONSE_FIELDS) | {CUSTOM_FIELDS}
    assert set(response["required"]) == set(DEAL_RESPONSE_FIELDS)
    assert_property_types(
        document,
        response,
        DEAL_RESPONSE_FIELDS,
        nullable={"volume", "deal_origin", "note", EXTERNAL_ID},
    )
    customer = resolve(document, response["properties"]["customers"]["items"])
    assert set(customer["properties"]) == set(CUSTOMER_RESPONSE_FIELDS) | {CUSTOM_FIELDS}


@pytest.mark.parametrize("path", [CUSTOMERS, DEALS])
def test_openapi_requires_both_headers_and_documents_the_statuses(
    document: dict[str, Any], path: str
) -> None:
    schemes = document["components"]["securitySchemes"]
    by_header = {s["name"]: name for name, s in schemes.items() if s.get("in") == "header"}
    assert {"X-Api-Key", "X-Department-Id"} <= set(by_header)
    for scheme in ("X-Api-Key", "X-Department-Id"):
        assert schemes[by_header[scheme]]["type"] == "apiKey"
    op = operation(document, path)
    # One requirement object naming both: both headers together, on every request.
    assert op["security"] == [{by_header["X-Api-Key"]: [], by_header["X-Department-Id"]: []}]
    responses = op["responses"]
    assert {"201", "401", "422", "429"} <= set(responses)
    assert "Retry-After" in responses["429"]["headers"]
    assert "application/problem+json" in responses["429"]["content"]
