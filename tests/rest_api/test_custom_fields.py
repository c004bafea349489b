"""/custom-fields: a tenant-wide key defines, changes, archives and deletes a field of its
customers, deals or activities, each a column of the tenant's table; any key of the tenant
reads them; every rule a definition breaks is named at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from dealbase.db.database import Database
from dealbase.ops import admin
from dealbase.platform.custom_fields.models import FieldType
from dealbase.platform.custom_fields.repository import definitions_lock_key
from dealbase.platform.custom_fields.rules import FIELDS_PER_RECORD, INDEXED_FIELDS_PER_RECORD
from tests.depth import DEPTH, SHARED_FIXTURES
from tests.support import TenantWorld

FIELDS = "/api/v1/integration/custom-fields"
CONTRACT = {"record": "customer", "name": "contract_number", "label": "Contract", "type": "text"}


def tenant_wide(database: Database, world: TenantWorld) -> dict[str, str]:
    return {"X-Api-Key": admin.issue_key(database, world.tenant.id, None, "admin").api_key}


def define(client: TestClient, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    response = client.post(FIELDS, json={**CONTRACT, **body}, headers=headers)
    assert response.status_code == 201, response.text
    field: dict[str, Any] = response.json()
    return field


def columns(database: Database, world: TenantWorld, table: str) -> dict[str, str]:
    with database.control() as connection:
        rows = connection.execute(
            text(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_schema = :schema AND table_name = :table"
                " AND column_name LIKE 'cf\\_%'"
            ),
            {"schema": world.tenant.schema, "table": table},
        )
        return dict(rows.all())


def indexes(database: Database, world: TenantWorld) -> dict[str, bool]:
    """The custom fields' indexes of the tenant's schema, by name: whether each is valid."""
    with database.control() as connection:
        rows = connection.execute(
            text(
                "SELECT c.relname, i.indisvalid FROM pg_index i"
                " JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE c.relnamespace = to_regnamespace(:schema) AND c.relname LIKE '%\\_cf\\_%'"
            ),
            {"schema": world.tenant.schema},
        )
        return dict(rows.all())


def field_codes(response: Any) -> set[tuple[str, str]]:
    return {(error["field"], error["code"]) for error in response.json()["errors"]}


@pytest.fixture
def admin_headers(database: Database, world: TenantWorld) -> dict[str, str]:
    return tenant_wide(database, world)


def test_a_defined_field_is_a_typed_column_of_its_records_table_and_reads_back(
    client: TestClient, database: Database, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    response = client.post(FIELDS, json={**CONTRACT, "max_length": 40}, headers=admin_headers)

    assert response.status_code == 201, response.text
    field = response.json()
    assert response.headers["Location"] == f"{FIELDS}/{field['id']}"
    assert response.headers["ETag"] == '"1"'
    assert {k: v for k, v in field.items() if k not in ("id", "created_at", "updated_at")} == {
        **CONTRACT,
        "max_length": 40,
        "options": None,
        "required": False,
        "unique": False,
        "filterable": False,
        "archived": False,
    }
    assert columns(database, world, "customers") == {"cf_contract_number": "text"}
    read = client.get(f"{FIELDS}/{field['id']}", headers=world.key.headers)
    assert read.status_code == 200
    assert read.json() == field


@pytest.mark.parametrize(
    ("kind", "extra", "sql_type"),
    [
        ("integer", {}, "numeric"),
        ("decimal", {}, "numeric"),
        ("boolean", {}, "boolean"),
        ("date", {}, "date"),
        ("timestamp", {}, "timestamp with time zone"),
        ("email", {}, "text"),
        ("url", {}, "text"),
        ("single_select", {"options": [{"label": "Gold"}, {"label": "Silver"}]}, "uuid"),
        ("multi_select", {"options": [{"label": "Gold"}]}, "ARRAY"),
    ],
)
def test_each_type_has_its_column_type(
    client: TestClient,
    database: Database,
    world: TenantWorld,
    admin_headers: dict[str, str],
    kind: str,
    extra: dict[str, Any],
    sql_type: str,
) -> None:
    field = define(client, admin_headers, record="deal", name="extra", type=kind, **extra)

    assert columns(database, world, "deals") == {"cf_extra": sql_type}
    if "options" in extra:
        assert [option["label"] for option in field["options"]] == ["Gold", "Silver"][
            : len(extra["options"])
        ]
        assert all(option["id"] and not option["archived"] for option in field["options"])


def test_a_text_field_holds_255_characters_unless_told_otherwise(
    client: TestClient, admin_headers: dict[str, str]
) -> None:
    assert define(client, admin_headers)["max_length"] == 255


def test_a_department_key_reads_the_fields_but_may_not_define_change_or_delete_one(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    field = define(client, admin_headers)
    path = f"{FIELDS}/{field['id']}"

    listed = client.get(FIELDS, headers=world.key.headers)
    refused = [
        client.post(FIELDS, json={**CONTRACT, "name": "other"}, headers=world.key.headers),
        client.patch(path, json={"label": "No"}, headers=world.key.headers),
        client.delete(path, headers=world.key.headers),
    ]

    assert listed.status_code == 200
    assert [each["id"] for each in listed.json()["data"]] == [field["id"]]
    assert [(each.status_code, each.json()["code"]) for each in refused] == [(403, "forbidden")] * 3


def test_a_tenant_wide_key_naming_a_department_still_defines_a_field(
    client: TestClient, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    """X-Department-Id does not narrow a tenant-wide key: the field is still the tenant's."""
    headers = {**admin_headers, "X-Department-Id": str(world.department.id)}

    assert client.post(FIELDS, json=CONTRACT, headers=headers).status_code == 201


def test_a_change_while_another_of_the_tenant_is_under_way_is_told_to_retry(
    client: TestClient, database: Database, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    # Held by another transaction, as a change under way holds it for its session.
    with database.engine.begin() as other:
        other.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"),
            {"key": definitions_lock_key(world.tenant.schema)},
        )
        busy = client.post(FIELDS, json=CONTRACT, headers=admin_headers)

    assert (busy.status_code, busy.json()["code"]) == (503, "service_unavailable")
    assert busy.headers["Retry-After"] == "2"
    assert columns(database, world, "customers") == {}


def test_every_broken_rule_of_a_definition_is_named_at_once(
    client: TestClient, admin_headers: dict[str, str]
) -> None:
    shape = client.post(
        FIELDS,
        json={"record": "lead", "name": "Bad-Name", "label": " ", "type": "colour"},
        headers=admin_headers,
    )
    rules = client.post(
        FIELDS,
        json={**CONTRACT, "name": "email", "type": "boolean", "max_length": 5, "unique": True},
        headers=admin_headers,
    )
    select = client.post(FIELDS, json={**CONTRACT, "type": "single_select"}, headers=admin_headers)
    doubled = client.post(
        FIELDS,
        json={**CONTRACT, "type": "multi_select", "options": [{"label": "A"}, {"label": "A"}]},
        headers=admin_headers,
    )

    assert shape.status_code == 422
    assert {field for field, _ in field_codes(shape)} == {"record", "name", "label", "type"}
    assert rules.status_code == 422
    assert field_codes(rules) == {
        ("name", "reserved"),
        ("max_length", "not_allowed"),
        ("unique", "not_allowed"),
    }
    assert field_codes(select) == {("options", "missing")}
    assert field_codes(doubled) == {("options", "duplicate_item")}


def test_a_name_is_taken_once_per_record_but_free_on_another_record(
    client: TestClient, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers)

    again = client.post(FIELDS, json=CONTRACT, headers=admin_headers)
    on_deals = client.post(FIELDS, json={**CONTRACT, "record": "deal"}, headers=admin_headers)

    assert (again.status_code, again.json()["code"]) == (409, "field_name_taken")
    assert on_deals.status_code == 201


def test_a_record_holds_a_bounded_number_of_fields(
    client: TestClient, admin_headers: dict[str, str]
) -> None:
    for number in range(FIELDS_PER_RECORD):
        define(client, admin_headers, record="activity", name=f"field_{number}", type="boolean")

    over = client.post(
        FIELDS,
        json={"record": "activity", "name": "one_more", "label": "One more", "type": "boolean"},
        headers=admin_headers,
    )

    assert (over.status_code, over.json()["code"]) == (409, "field_limit_reached")


def test_a_record_holds_a_bounded_number_of_indexed_fields(
    client: TestClient, admin_headers: dict[str, str]
) -> None:
    for number in range(INDEXED_FIELDS_PER_RECORD):
        define(
            client,
            admin_headers,
            name=f"field_{number}",
            filterable=number % 2 == 0,
            unique=number % 2 == 1,
        )
    plain = define(client, admin_headers, name="plain")

    over = client.post(
        FIELDS, json={**CONTRACT, "name": "more", "unique": True}, headers=admin_headers
    )
    changed = client.patch(
        f"{FIELDS}/{plain['id']}", json={"filterable": True}, headers=admin_headers
    )

    assert [(each.status_code, each.json()["code"]) for each in (over, changed)] == [
        (409, "field_limit_reached")
    ] * 2


def test_a_change_keeps_every_value_or_is_refused_naming_each_narrowing(
    client: TestClient, admin_headers: dict[str, str]
) -> None:
    text_field = define(client, admin_headers, max_length=40)
    email = define(client, admin_headers, name="billing_email", type="email")
    path = f"{FIELDS}/{text_field['id']}"

    narrowed = client.patch(path, json={"max_length": 10, "type": "integer"}, headers=admin_headers)
    shortened = client.patch(path, json={"max_length": 10}, headers=admin_headers)
    widened = client.patch(
        path, json={"max_length": 80, "label": "Contract no."}, headers=admin_headers
    )
    as_text = client.patch(f"{FIELDS}/{email['id']}", json={"type": "text"}, headers=admin_headers)

    assert narrowed.status_code == 422
    assert field_codes(narrowed) == {("type", "narrowing_type"), ("max_length", "not_allowed")}
    assert field_codes(shortened) == {("max_length", "narrowing_type")}
    assert widened.status_code == 200, widened.text
    assert (widened.json()["max_length"], widened.json()["label"]) == (80, "Contract no.")
    assert widened.headers["ETag"] == '"2"'
    assert (as_text.json()["type"], as_text.json()["max_length"]) == ("text", 320)


def test_options_are_renamed_added_and_archived_never_removed(
    client: TestClient, admin_headers: dict[str, str]
) -> None:
    field = define(
        client,
        admin_headers,
        name="tier",
        type="single_select",
        options=[{"label": "Gold"}, {"label": "Silver"}],
    )
    gold, silver = field["options"]
    path = f"{FIELDS}/{field['id']}"

    dropped = client.patch(path, json={"options": [gold]}, headers=admin_headers)
    changed = client.patch(
        path,
        json={
            "options": [
                {"id": gold["id"], "label": "Gold+"},
                {"id": silver["id"], "label": "Silver", "archived": True},
                {"label": "Bronze"},
            ]
        },
        headers=admin_headers,
    )

    assert field_codes(dropped) == {("options", "option_missing")}
    assert changed.status_code == 200, changed.text
    options = changed.json()["options"]
    assert [(o["id"], o["label"], o["archived"]) for o in options[:2]] == [
        (gold["id"], "Gold+", False),
        (silver["id"], "Silver", True),
    ]
    assert options[2]["label"] == "Bronze" and options[2]["id"] not in (gold["id"], silver["id"])


def test_unique_and_filterable_fields_are_indexed_and_the_indexes_follow_changes(
    client: TestClient, database: Database, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    unique = define(client, admin_headers, unique=True)
    filtered = define(client, admin_headers, name="region", filterable=True)

    assert indexes(database, world) == {
        "customer_cf_contract_number_u": True,
        "customer_cf_region_f": True,
    }
    client.patch(f"{FIELDS}/{filtered['id']}", json={"filterable": False}, headers=admin_headers)
    client.patch(
        f"{FIELDS}/{unique['id']}",
        json={"unique": False, "filterable": True},
        headers=admin_headers,
    )
    assert indexes(database, world) == {"customer_cf_contract_number_f": True}


def test_a_field_whose_values_repeat_in_a_department_cannot_become_unique(
    client: TestClient,
    database: Database,
    make_tenant: Callable[..., TenantWorld],
) -> None:
    world = make_tenant()
    headers = tenant_wide(database, world)
    field = define(client, headers)
    for _ in range(2):
        client.post(
            "/api/v1/integration/customers",
            json={"first_name": "Ada", "last_name": "Lovelace"},
            headers=world.key.headers,
        ).raise_for_status()
    with database.control() as connection:
        connection.execute(
            text(f"UPDATE {world.tenant.schema}.customers SET cf_contract_number = 'C-1'")
        )

    refused = client.patch(f"{FIELDS}/{field['id']}", json={"unique": True}, headers=headers)

    assert (refused.status_code, refused.json()["code"]) == (409, "values_not_unique")
    assert indexes(database, world) == {}
    assert client.get(f"{FIELDS}/{field['id']}", headers=headers).json()["unique"] is False


def test_a_field_is_deleted_with_its_column_only_once_archived(
    client: TestClient, database: Database, world: TenantWorld, admin_headers: dict[str, str]
) -> None:
    field = define(client, admin_headers, unique=True)
    path = f"{FIELDS}/{field['id']}"

    early = client.delete(path, headers=admin_headers)
    archived = client.patch(path, json={"archived": True}, headers=admin_headers)
    stale = client.delete(path, headers={**admin_headers, "If-Match": '"1"'})
    deleted = client.delete(path, headers=admin_headers)

    assert (early.status_code, early.json()["code"]) == (409, "field_not_archived")
    assert archived.json()["archived"] is True
    assert stale.status_code == 412
    assert deleted.status_code == 204
    assert client.get(path, headers=admin_headers).status_code == 404
    assert columns(database, world, "customers") == {}
    assert indexes(database, world) == {}
    assert define(client, admin_headers)["name"] == CONTRACT["name"]


def test_a_tenant_sees_neither_the_fields_nor_the_columns_of_another(
    client: TestClient,
    database: Database,
    world: TenantWorld,
    make_tenant: Callable[..., TenantWorld],
    admin_headers: dict[str, str],
) -> None:
    field = define(client, admin_headers)
    other = make_tenant()
    other_headers = tenant_wide(database, other)

    assert client.get(FIELDS, headers=other_headers).json() == {"data": []}
    assert client.get(f"{FIELDS}/{field['id']}", headers=other_headers).status_code == 404
    assert (
        client.patch(
            f"{FIELDS}/{field['id']}", json={"label": "Mine"}, headers=other_headers
        ).status_code
        == 404
    )
    assert columns(database, other, "customers") == {}


def test_the_list_is_narrowed_to_one_record_kind(
    client: TestClient, admin_headers: dict[str, str]
) -> None:
    define(client, admin_headers)
    on_deals = define(client, admin_headers, record="deal")

    listed = client.get(FIELDS, params={"record": "deal"}, headers=admin_headers)
    wrong = client.get(FIELDS, params={"record": "lead"}, headers=admin_headers)

    assert [each["id"] for each in listed.json()["data"]] == [on_deals["id"]]
    assert wrong.status_code == 422


# What a client may send as a definition: each field's valid values, wrong ones, and absence.
_VALUES = {
    "record": st.sampled_from(["customer", "deal", "activity", "lead", 1]),
    "name": st.one_of(st.from_regex(r"\A[a-z][a-z0-9_]{0,10}\Z"), st.text(max_size=60)),
    "label": st.text(max_size=120),
    "type": st.sampled_from([*(kind.value for kind in FieldType), "colour", None]),
    "max_length": st.one_of(st.none(), st.integers(-5, 20_000), st.text(max_size=3)),
    "options": st.one_of(
        st.none(),
        st.lists(st.fixed_dictionaries({"label": st.text(max_size=8)}), max_size=4),
        st.just("Gold"),
    ),
    "required": st.one_of(st.booleans(), st.just("yes")),
    "unique": st.booleans(),
    "filterable": st.booleans(),
}
_BODIES = st.fixed_dictionaries({}, optional=_VALUES)


@pytest.fixture(scope="module")
def shared_admin_headers(database: Database, shared: TenantWorld) -> dict[str, str]:
    """A tenant-wide key of the module's shared tenant, for every example."""
    return tenant_wide(database, shared)


@settings(SHARED_FIXTURES, max_examples=DEPTH.examples // 2)
@given(body=_BODIES)
def test_any_definition_is_made_whole_or_refused_naming_its_fields_never_a_500(
    client: TestClient,
    database: Database,
    shared: TenantWorld,
    shared_admin_headers: dict[str, str],
    body: dict[str, Any],
) -> None:
    headers = shared_admin_headers

    response = client.post(FIELDS, json=body, headers=headers)

    assert response.status_code in (201, 409, 422), response.text
    if response.status_code == 422:
        assert response.json()["errors"], response.text
    defined = {
        f"cf_{each['name']}"
        for each in client.get(FIELDS, headers=headers).json()["data"]
        if each["record"] == "customer"
    }
    assert set(columns(database, shared, "customers")) == defined
