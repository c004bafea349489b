"""Compiled root fields answer exactly what the resolvers answer.

Operations are generated from the schema (its object types' fields, nested lists with their
``first``, aliases, fragments, ``__typename``, variables, ``@include``/``@skip``, filters, orders
and cursors, good and bad) and sent to two apps on the same data: one compiles what it can, the
other runs every field through the resolvers. ``data`` and ``errors`` must be equal.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from graphql import (
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLSchema,
    is_leaf_type,
)
from graphql import build_schema as build_sdl_schema
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import Database
from dealbase.db.sessions import SET_SETTINGS
from dealbase.graphql_api.schema import build_schema
from dealbase.ops.admin import create_employee, issue_key
from dealbase.platform.reads.service import GENERIC_PLANS
from tests.db.test_transactions import round_trips_sent
from tests.depth import SHARED_FIXTURES
from tests.graphql_api.support import GRAPHQL, tenant_wide_headers
from tests.rest_api.test_round_trips import counted_round_trips
from tests.support import TenantWorld, build_tenant

API = "/api/v1/integration"
# The schema's types as its SDL prints them (the fields and arguments the operations draw).
SCHEMA: GraphQLSchema = build_sdl_schema(build_schema(Settings(database_url=None)).as_str())
# The object types a compiled root field reads, and the nested fields among theirs.
OBJECTS = (
    "Customer",
    "Deal",
    "Activity",
    "Step",
    "Employee",
    "Department",
    "Pipeline",
    "PipelineStep",
    "PipelineSummary",
    "StepSummary",
    "EmployeeSummary",
)
# Names that look like SQL, for aliases (a GraphQL name has no quotes or spaces).
ALIASES = ("select", "from", "DROP_TABLE_customers", "pg_sleep", "_1", "order", "E_0")
TEXTS = ("O'Brien", "'; DROP TABLE customers; --", 'quote" and \\ slash', "Łódź ünïcödé 🚀", "%_")


@dataclass
class Shop:
    """A tenant with data of every form the schema shows, in two departments."""

    world: TenantWorld
    tenant_wide: dict[str, str]
    customer_ids: list[str]
    deal_ids: list[str]
    activity_ids: list[str]
    foreign_ids: list[str]  # of the second department
    cursors: list[str]  # cursors that lists answered
    options: list[str]  # of the customers' select


def _custom_filters(shop: Shop) -> st.SearchStrategy[dict[str, Any]]:
    """A list's ``customFields`` filter, good or bad, on the shop's customers' fields (``seats``
    and ``tier`` filterable)."""
    return st.sampled_from(
        [
            {"seats.gte": 0},
            {"seats.lte": 12, "tier": shop.options},
            {"tier": shop.options[0]},
            {"seats": "many"},
            {"remark": "x"},
            {"nope": 1},
        ]
    )


def _custom_fields(client: TestClient, database: Database, world: TenantWorld) -> list[str]:
    """Custom fields of the shop's customers (one of each kind of value), activities and deals;
    the ids of the customers' select's options."""
    headers = {"X-Api-Key": issue_key(database, world.tenant.id, None, "admin").api_key}
    fields: list[dict[str, Any]] = [
        {"record": "customer", "name": name, "type": kind}
        for name, kind in (
            ("remark", "text"),
            ("seats", "integer"),
            ("revenue", "decimal"),
            ("vip", "boolean"),
            ("renewal", "date"),
            ("signed_at", "timestamp"),
        )
    ]
    fields[1]["filterable"] = True  # seats, which lists filter on
    fields += [
        {"record": "customer", "name": "tier", "type": "single_select", "filterable": True},
        {"record": "activity", "name": "outcome", "type": "text"},
        {"record": "deal", "name": "region", "type": "text"},
    ]
    options = []
    for field in fields:
        if field["type"] == "single_select":
            field["options"] = [{"label": "Gold"}, {"label": "Silver"}]
        body = {**field, "label": field["name"]}
        response = client.post(f"{API}/custom-fields", json=body, headers=headers)
        assert response.status_code == 201, response.text
        options += [option["id"] for option in response.json()["options"] or []]
    return options


def _custom_values(index: int, options: list[str]) -> dict[str, Any]:
    """The custom values of the shop's customer ``index``: of every kind, or some, or none."""
    values: list[dict[str, Any]] = [
        {
            "remark": TEXTS[1],
            "seats": 12,
            "revenue": "1234.50",
            "vip": True,
            "renewal": "2027-01-31",
            "signed_at": "2026-12-01T10:00:00.5Z",
            "tier": options[0],
        },
        {"seats": -(2**62), "revenue": "0.0000001", "vip": False, "tier": options[1]},
        {},
        {"remark": TEXTS[3], "signed_at": "1999-12-31T23:59:59.999999+02:00"},
        {},
    ]
    return values[index]


@pytest.fixture(scope="module")
def shop(client: TestClient, database: Database) -> Shop:
    world = build_tenant(database, departments=2)
    headers, foreign = world.keys[0].headers, world.keys[1].headers

    def post(path: str, body: dict[str, Any], as_: dict[str, str] = headers) -> dict[str, Any]:
        response = client.post(f"{API}{path}", json=body, headers=as_)
        assert response.status_code == 201, response.text
        found: dict[str, Any] = response.json()
        return found

    employee = create_employee(database, world.tenant.id, world.departments[0].id, "Ada", None)
    create_employee(database, world.tenant.id, world.departments[0].id, "Grace", "g@example.com")
    steps = client.get(f"{API}/steps", headers=headers).json()["data"]
    options = _custom_fields(client, database, world)
    customers = [
        post(
            "/customers",
            {
                "last_name": name,
                "first_name": first,
                "birthday": birthday,
                "custom_fields": _custom_values(index, options),
            },
        )
        for index, (name, first, birthday) in enumerate(
            (
                ("Lovelace", "Ada", "1915-12-10"),
                (TEXTS[0], None, None),
                (TEXTS[1], TEXTS[2], "1850-01-01"),
                (TEXTS[3], "", None),
                ("Hopper", "Grace", None),
            )
        )
    ]
    deals = []
    for index, volume in enumerate((None, 0, 2**62, 5, 1200, None)):
        linked = [
            {"last_name": f"Linked {index}-{n}", "city": TEXTS[n % 5]} for n in range(index % 4)
        ]
        deal = post("/deals", {"name": TEXTS[index % 5], "volume": volume, "customers": linked})
        changes: dict[str, Any] = {"step_id": steps[index % len(steps)]["id"]}
        if index % 2:
            changes["employee_id"] = str(employee.id)
        patched = client.patch(f"{API}/deals/{deal['id']}", json=changes, headers=headers)
        assert patched.status_code == 200, patched.text
        deals.append(deal)
    activities = [
        post(
            "/activities",
            {
                "type": kind,
                "customer_id": customers[index % 5]["id"],
                "deal_id": deals[index]["id"] if index % 2 else None,
                "subject": TEXTS[index % 5],
                "due_at": due,
                "employee_id": str(employee.id) if index % 3 == 0 else None,
                "custom_fields": {"outcome": TEXTS[index]} if index % 2 else None,
            },
        )
        for index, (kind, due) in enumerate(
            (
                ("call", "2030-05-01T09:30:00Z"),
                ("email", "2030-05-01T09:30:00.000001Z"),
                ("meeting", None),
                ("task", "1999-12-31T23:59:59.999999Z"),
                ("note", "2030-05-01T09:30:00.5Z"),
            )
        )
    ]
    other = post("/customers", {"last_name": "Elsewhere"}, foreign)
    other_deal = post("/deals", {"name": "Elsewhere", "customers": [{"last_name": "X"}]}, foreign)
    cursors = []
    for query in (
        "{ deals(first: 2) { pageInfo { endCursor } } }",
        "{ deals(first: 2, orderBy: VOLUME_DESC) { pageInfo { endCursor } } }",
        "{ customers(first: 3) { pageInfo { endCursor } } }",
        "{ activities(first: 1) { pageInfo { endCursor } } }",
    ):
        body = client.post(GRAPHQL, json={"query": query}, headers=headers).json()
        (listed,) = body["data"].values()
        cursors.append(listed["pageInfo"]["endCursor"])
    return Shop(
        world,
        tenant_wide_headers(database, world),
        [c["id"] for c in customers],
        [d["id"] for d in deals],
        [a["id"] for a in activities],
        [other["id"], other_deal["id"]],
        cursors,
        options,
    )


def _named(type_: Any) -> tuple[Any, bool]:
    many = False
    while isinstance(type_, GraphQLNonNull | GraphQLList):
        many = many or isinstance(type_, GraphQLList)
        type_ = type_.of_type
    return type_, many


def _fields_of(type_name: str) -> tuple[list[str], dict[str, tuple[str, bool, bool]]]:
    """A type's leaf fields without arguments, and its object fields: (type, list, takes first)."""
    type_ = SCHEMA.type_map[type_name]
    assert isinstance(type_, GraphQLObjectType)
    leaves, objects = [], {}
    for name, field in type_.fields.items():
        named, many = _named(field.type)
        if is_leaf_type(named) and not field.args:
            leaves.append(name)
        elif isinstance(named, GraphQLObjectType) and named.name in OBJECTS:
            objects[name] = (named.name, many, "first" in field.args)
    return leaves, objects


FIELDS = {name: _fields_of(name) for name in OBJECTS}


@dataclass
class Operation:
    """A document being generated: its variables' definitions and values, its fragments."""

    definitions: dict[str, str]
    values: dict[str, Any]
    fragments: list[str]

    def variable(self, graphql_type: str, value: Any) -> str:
        name = f"v{len(self.definitions)}"
        self.definitions[name] = graphql_type
        self.values[name] = value
        return f"${name}"


# Mostly sizes the lists take, sometimes one they refuse.
FIRSTS = st.sampled_from([1, 2, 3, 25, 100, 1, 2, 3, 25, 100, 0, 101, -1])


@st.composite
def _selection(draw: st.DrawFn, operation: Operation, type_name: str, depth: int) -> str:
    leaves, objects = FIELDS[type_name]
    nested = list(objects) if depth > 0 else []
    chosen = draw(
        st.lists(
            st.sampled_from(["__typename", *leaves, *nested]), min_size=1, max_size=7, unique=True
        )
    )
    aliases = draw(st.lists(st.sampled_from(ALIASES), max_size=len(chosen), unique=True))
    parts = []
    for position, name in enumerate(chosen):
        alias = aliases[position] if position < len(aliases) else None
        part = name if alias is None else f"{alias}: {name}"
        if name in objects:
            child, _, takes_first = objects[name]
            if takes_first and draw(st.booleans()):
                first = draw(FIRSTS)
                as_variable = draw(st.booleans())
                argument = operation.variable("Int!", first) if as_variable else str(first)
                part += f"(first: {argument})"
            part += " { " + draw(_selection(operation, child, depth - 1)) + " }"
        part = draw(_wrapped(operation, type_name, part))
        parts.append(part)
    return " ".join(parts)


@st.composite
def _wrapped(draw: st.DrawFn, operation: Operation, type_name: str, part: str) -> str:
    """``part`` as it is, under a directive, or in an inline or a named fragment."""
    how = draw(st.sampled_from(["plain", "plain", "include", "skip", "inline", "fragment"]))
    if how == "include":
        flag = operation.variable("Boolean!", draw(st.booleans()))
        return f"... @include(if: {flag}) {{ {part} }}"
    if how == "skip":
        return f"... @skip(if: {'true' if draw(st.booleans()) else 'false'}) {{ {part} }}"
    if how == "inline":
        return f"... on {type_name} {{ {part} }}"
    if how == "fragment":
        name = f"F{len(operation.fragments)}"
        operation.fragments.append(f"fragment {name} on {type_name} {{ {part} }}")
        return f"...{name}"
    return part


def _connection(draw: st.DrawFn, operation: Operation, node_type: str) -> str:
    chosen = draw(
        st.lists(
            st.sampled_from(
                [
                    "totalCount",
                    "__typename",
                    "pageInfo { hasNextPage endCursor }",
                    "pageInfo { __typename endCursor }",
                    "edges { cursor node { NODE } }",
                    "edges { __typename node { NODE } }",
                    "items: edges { c: cursor n: node { NODE } }",
                ]
            ),
            min_size=1,
            max_size=3,
            unique_by=lambda part: part.split(" ", 1)[0],
        )
    )
    parts = []
    for part in chosen:
        if "NODE" in part:
            part = part.replace("NODE", draw(_selection(operation, node_type, 2)))
        parts.append(part)
    return " ".join(parts)


@st.composite
def operations(draw: st.DrawFn, shop: Shop) -> tuple[str, dict[str, Any]]:
    operation = Operation({}, {}, [])
    roots = []
    for index in range(draw(st.integers(1, 2))):
        root = draw(
            st.sampled_from(
                [
                    "deals",
                    "customers",
                    "activities",
                    "deal",
                    "customer",
                    "activity",
                    "pipeline",
                    "pipelineSummary",
                ]
            )
        )
        alias = f"r{index}: "
        if root == "pipelineSummary":
            moments = ["2020-01-01T00:00:00Z", "2100-01-01T00:00:00+02:00", "1999-12-31T23:59Z"]
            start = operation.variable("DateTime!", draw(st.sampled_from(moments)))
            end = operation.variable("DateTime!", draw(st.sampled_from(moments)))
            selection = draw(_selection(operation, "PipelineSummary", 2))
            roots.append(
                f"{alias}pipelineSummary(createdFrom: {start}, createdTo: {end}) {{ {selection} }}"
            )
            continue
        if root == "pipeline":
            department = draw(
                st.sampled_from(
                    [None, *(str(d.id) for d in shop.world.departments), str(uuid.UUID(int=9))]
                )
            )
            argument = "" if department is None else f'(departmentId: "{department}")'
            selection = draw(_selection(operation, "Pipeline", 3))
            roots.append(f"{alias}pipeline{argument} {{ {selection} }}")
            continue
        if root in ("deal", "customer", "activity"):
            known = {
                "deal": shop.deal_ids,
                "customer": shop.customer_ids,
                "activity": shop.activity_ids,
            }
            row_id = draw(st.sampled_from([*known[root], *shop.foreign_ids, str(uuid.UUID(int=7))]))
            argument = operation.variable("UUID!", row_id) if draw(st.booleans()) else f'"{row_id}"'
            type_name = root.capitalize()
            roots.append(
                f"{alias}{root}(id: {argument}) {{ {draw(_selection(operation, type_name, 2))} }}"
            )
            continue
        arguments = []
        if draw(st.booleans()):
            first = draw(FIRSTS)
            arguments.append(
                f"first: {operation.variable('Int', first) if draw(st.booleans()) else first}"
            )
        if draw(st.booleans()):
            arguments.append(
                f"after: {operation.variable('String', draw(st.sampled_from([*shop.cursors, 'not-a-cursor'])))}"
            )
        filters = {
            "deals": st.fixed_dictionaries(
                {},
                optional={
                    "volumeMin": st.sampled_from([0, -10, 2**62]),
                    "externalId": st.sampled_from(["shop-1", *TEXTS]),
                    "customerId": st.sampled_from(shop.customer_ids),
                    "createdAfter": st.sampled_from(["2020-01-01T00:00:00Z"]),
                },
            ),
            "customers": st.fixed_dictionaries(
                {},
                optional={
                    "q": st.sampled_from(TEXTS),
                    "email": st.sampled_from(["g@example.com", *TEXTS]),
                    "customFields": _custom_filters(shop),
                },
            ),
            "activities": st.fixed_dictionaries(
                {},
                optional={
                    "dealId": st.sampled_from(shop.deal_ids),
                    "customerId": st.sampled_from(shop.customer_ids),
                },
            ),
        }[root]
        chosen = draw(filters)
        if chosen or draw(st.booleans()):
            kind = {
                "deals": "DealFilter",
                "customers": "CustomerFilter",
                "activities": "ActivityFilter",
            }[root]
            arguments.append(f"filter: {operation.variable(kind, chosen)}")
        if root == "deals" and draw(st.booleans()):
            arguments.append(
                f"orderBy: {draw(st.sampled_from(['CREATED_ASC', 'CREATED_DESC', 'VOLUME_ASC', 'VOLUME_DESC']))}"
            )
        node_type = {"deals": "Deal", "customers": "Customer", "activities": "Activity"}[root]
        given_arguments = f"({', '.join(arguments)})" if arguments else ""
        roots.append(
            f"{alias}{root}{given_arguments} {{ {_connection(draw, operation, node_type)} }}"
        )
    definitions = ", ".join(f"${name}: {kind}" for name, kind in operation.definitions.items())
    header = f"query Generated({definitions})" if definitions else "query Generated"
    document = f"{header} {{ {' '.join(roots)} }} {' '.join(operation.fragments)}"
    return document, operation.values


@given(data=st.data())
@SHARED_FIXTURES
def test_compiled_fields_answer_what_the_resolvers_answer(
    data: st.DataObject, client: TestClient, resolvers_only: TestClient, shop: Shop
) -> None:
    document, variables = data.draw(operations(shop))
    headers = data.draw(st.sampled_from([shop.world.keys[0].headers, shop.tenant_wide]))
    body = {"query": document, "variables": variables}

    compiled = client.post(GRAPHQL, json=body, headers=headers)
    resolved = resolvers_only.post(GRAPHQL, json=body, headers=headers)

    assert compiled.status_code == resolved.status_code
    assert compiled.json() == resolved.json(), document


def test_a_dashboard_read_is_compiled_and_equal_to_the_resolvers(
    client: TestClient, resolvers_only: TestClient, shop: Shop
) -> None:
    document = """
    query Dashboard($first: Int!) {
      deals(first: $first) {
        totalCount pageInfo { hasNextPage endCursor }
        edges { cursor node {
          id name volume dealOrigin createdAt updatedAt employeeName customFields
          step { id name kind } employee { id name }
          customers { id lastName firstName company email city birthday tenantId customFields }
          activities(first: 2) {
            id type dueAt doneAt customFields customer { id customFields } deal { id }
          }
        } }
      }
    }"""
    headers = shop.world.keys[0].headers
    body = {"query": document, "variables": {"first": 4}}

    compiled = client.post(GRAPHQL, json=body, headers=headers)
    resolved = resolvers_only.post(GRAPHQL, json=body, headers=headers)

    assert compiled.json() == resolved.json()
    assert len(compiled.json()["data"]["deals"]["edges"]) == 4
    metrics = client.get("/metrics").text
    assert re.search(
        r'dealbase_graphql_root_fields_total\{field="deals",path="compiled"\} [1-9]', metrics
    ), metrics


def _root_field_count(client: TestClient, field: str, path: str) -> float:
    line = f'dealbase_graphql_root_fields_total{{field="{field}",path="{path}"}} '
    found = [each for each in client.get("/metrics").text.splitlines() if each.startswith(line)]
    return float(found[0][len(line) :]) if found else 0.0


def test_a_bad_cursor_or_page_size_is_refused_by_the_compiled_read_with_the_resolvers_error(
    client: TestClient, shop: Shop
) -> None:
    """The compiled read refuses them itself, with the platform's error the resolvers would
    raise: the request runs once, on its compiled path."""
    for arguments, field in (('after: "nope"', "after"), ("first: 0", "first")):
        compiled = _root_field_count(client, "deals", "compiled")
        resolved = _root_field_count(client, "deals", "resolvers")
        body = client.post(
            GRAPHQL,
            json={"query": f"{{ deals({arguments}) {{ totalCount }} }}"},
            headers=shop.world.keys[0].headers,
        ).json()
        (error,) = body["errors"]
        assert error["extensions"]["code"] == "validation_failed"
        assert error["path"] == ["deals"]
        assert error["extensions"]["errors"][0]["field"] == field
        assert _root_field_count(client, "deals", "compiled") == compiled + 1
        assert _root_field_count(client, "deals", "resolvers") == resolved


def test_values_full_of_quotes_and_sql_reach_no_sql_text(
    client: TestClient, database: Database, shop: Shop
) -> None:
    document = """
    query($q: String, $email: String) {
      select: customers(filter: {q: $q, email: $email}) {
        DROP_TABLE_customers: totalCount
        from: edges { order: node { pg_sleep: lastName } }
      }
    }"""
    for value in TEXTS:
        body = client.post(
            GRAPHQL,
            json={"query": document, "variables": {"q": value, "email": value}},
            headers=shop.world.keys[0].headers,
        ).json()
        assert "errors" not in body, body
        assert body["data"]["select"]["DROP_TABLE_customers"] == 0
    found = client.post(
        GRAPHQL,
        json={
            "query": "query($q: String) { c: customers(filter: {q: $q}) { totalCount } }",
            "variables": {"q": TEXTS[1]},
        },
        headers=shop.world.keys[0].headers,
    ).json()
    assert found["data"]["c"]["totalCount"] == 1
    with database.engine.connect() as connection:
        tables = connection.execute(
            text(
                "SELECT count(*) FROM pg_tables WHERE schemaname = :schema AND tablename = 'customers'"
            ),
            {"schema": shop.world.tenant.schema},
        ).scalar_one()
    assert tables == 1


def test_an_object_of_more_fields_than_one_statement_builds_is_answered_by_the_resolvers(
    settings: Settings, shop: Shop
) -> None:
    # 60 aliases of one customer: more entries than json_build_object takes arguments.
    app = create_app(settings.model_copy(update={"graphql_max_aliases": 100}))
    fields = " ".join(f"a{n}: lastName" for n in range(60))
    with TestClient(app, raise_server_exceptions=False) as wide:
        body = wide.post(
            GRAPHQL,
            json={"query": f'{{ customer(id: "{shop.customer_ids[0]}") {{ {fields} }} }}'},
            headers=shop.world.keys[0].headers,
        ).json()
        metrics = wide.get("/metrics").text
    assert body["data"]["customer"]["a59"] == "Lovelace"
    assert 'dealbase_graphql_root_fields_total{field="customer",path="resolvers"} 1.0' in metrics


def test_a_board_is_compiled_and_equal_to_the_resolvers(
    client: TestClient, resolvers_only: TestClient, shop: Shop
) -> None:
    document = """{
      pipeline {
        __typename
        department { id name createdAt updatedAt steps { id name position kind } }
        steps {
          step { id name kind }
          dealCount totalVolume
          deals(first: 2) { id name volume employee { name } customers { lastName } }
        }
      }
    }"""
    headers = shop.world.keys[0].headers

    compiled = client.post(GRAPHQL, json={"query": document}, headers=headers).json()
    resolved = resolvers_only.post(GRAPHQL, json={"query": document}, headers=headers).json()

    assert compiled == resolved
    steps = compiled["data"]["pipeline"]["steps"]
    assert sum(step["dealCount"] for step in steps) == len(shop.deal_ids)
    assert sum(step["totalVolume"] for step in steps) == 2**62 + 1205
    metrics = client.get("/metrics").text
    assert re.search(
        r'dealbase_graphql_root_fields_total\{field="pipeline",path="compiled"\} [1-9]', metrics
    ), metrics


def test_a_query_of_one_compiled_page_is_one_round_trip(
    client: TestClient, shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {"query": "{ deals(first: 3) { totalCount edges { node { id customers { id } } } } }"}
    headers = shop.world.keys[0].headers
    client.post(GRAPHQL, json=body, headers=headers)  # the key cached

    with counted_round_trips(monkeypatch) as trips:
        answered = client.post(GRAPHQL, json=body, headers=headers).json()

    assert answered["data"]["deals"]["totalCount"] == len(shop.deal_ids)
    # The page's statement with what its transaction sets, one round trip.
    assert trips[0] == 1


def test_custom_fields_are_read_by_the_pages_one_statement(
    client: TestClient, shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {
        "query": "{ customers(first: 5) { edges { node { customFields"
        " activities { customFields } deals { customFields } } } } }"
    }
    headers = shop.world.keys[0].headers
    client.post(GRAPHQL, json=body, headers=headers)  # the key and the fields cached

    with counted_round_trips(monkeypatch) as trips:
        answered = client.post(GRAPHQL, json=body, headers=headers).json()

    nodes = [edge["node"] for edge in answered["data"]["customers"]["edges"]]
    assert nodes[0]["customFields"]["signed_at"] == "2026-12-01T10:00:00.500000Z"
    assert nodes[1]["activities"][0]["customFields"] == {"outcome": TEXTS[1]}
    assert nodes[2]["customFields"] == dict.fromkeys(nodes[0]["customFields"])
    assert trips[0] == 1


def _compiled(statement: str) -> bool:
    return "row_to_json" in statement or "json_build_object" in statement


def test_a_compiled_read_runs_its_statements_with_their_generic_plans(
    settings: Settings, shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a pool of one connection: a REST read, two GraphQL reads, a REST read."""
    customer_id = shop.customer_ids[0]
    body = {"query": '{ deals(first: 3) { edges { node { id } } } customer(id: "%s") { id } }'}
    body["query"] %= customer_id
    headers = shop.world.keys[0].headers
    sent: list[list[str]] = []  # each request's statements
    one = settings.model_copy(update={"db_pool_size": 1, "db_max_overflow": 0})
    with TestClient(create_app(one)) as own:
        for graphql in (False, True, True, False):
            with round_trips_sent(monkeypatch) as trips:
                if graphql:
                    answer = own.post(GRAPHQL, json=body, headers=headers).json()
                    assert answer["data"]["customer"] == {"id": customer_id}
                else:
                    got = own.get(f"{API}/customers/{customer_id}", headers=headers)
                    assert got.status_code == 200
            sent.append([statement for trip in trips for statement in trip])

    changes = [
        [each for each in statements if each == SET_SETTINGS or each.startswith("RESET")]
        for statements in sent
    ]
    # The generic plans' settings (made without sequential scans, run without JIT) go before
    # a compiled read's first statement where the connection does not hold them: it keeps
    # them for the next (not behind pgbouncer, where they end with each transaction) until a
    # statement without them runs.
    resets = ["RESET enable_seqscan", "RESET jit", "RESET plan_cache_mode"]
    if settings.db_pgbouncer:
        assert changes[1:] == [[SET_SETTINGS], [SET_SETTINGS], []]
    else:
        assert changes[1:] == [[SET_SETTINGS], [], resets]
    first_compiled = next(
        index
        for index, statement in enumerate(sent[1])
        if "row_to_json" in statement or "json_build_object" in statement
    )
    assert sent[1].index(SET_SETTINGS) < first_compiled
    assert dict(GENERIC_PLANS.values) == {
        "plan_cache_mode": "force_generic_plan",
        "enable_seqscan": "off",
        "jit": "off",
    }


SUMMARY = """query($from: DateTime!, $to: DateTime!, $department: UUID) {
  pipelineSummary(createdFrom: $from, createdTo: $to, departmentId: $department) {
    __typename createdFrom createdTo dealCount volume wonVolume lostVolume
    steps { step { id name kind } dealCount volume }
    employees { employee { id name } dealCount volume wonVolume lostVolume }
  }
}"""


@pytest.mark.parametrize(
    ("period", "department"),
    [
        (("2020-01-01T00:00:00Z", "2100-01-01T00:00:00+02:00"), None),
        (("2020-01-01T00:00:00.5+05:30", "2100-01-01T00:00:00Z"), 0),
        (("2020-01-01T00:00:00Z", "2020-01-02T00:00:00Z"), None),
        (("2100-01-01T00:00:00Z", "2020-01-01T00:00:00Z"), None),
        (("2020-01-01T00:00:00Z", "2100-01-01T00:00:00Z"), 1),
    ],
    ids=["every deal", "a tenant-wide key naming the department", "none", "reversed", "foreign"],
)
def test_a_summary_is_compiled_and_equal_to_the_resolvers(
    client: TestClient,
    resolvers_only: TestClient,
    shop: Shop,
    period: tuple[str, str],
    department: int | None,
) -> None:
    variables: dict[str, Any] = {"from": period[0], "to": period[1]}
    headers = shop.world.keys[0].headers
    if department is not None:
        variables["department"] = str(shop.world.departments[department].id)
        headers = shop.tenant_wide if department == 0 else headers
    body = {"query": SUMMARY, "variables": variables}

    compiled = client.post(GRAPHQL, json=body, headers=headers).json()
    resolved = resolvers_only.post(GRAPHQL, json=body, headers=headers).json()

    assert compiled == resolved
    if "errors" not in compiled:
        summary = compiled["data"]["pipelineSummary"]
        assert summary["dealCount"] == sum(step["dealCount"] for step in summary["steps"])
        metrics = client.get("/metrics").text
        assert re.search(
            r'dealbase_graphql_root_fields_total\{field="pipelineSummary",path="compiled"\} [1-9]',
            metrics,
        ), metrics


def test_a_tree_the_platform_cannot_build_is_answered_by_the_resolvers(
    settings: Settings, shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(read: object, custom: object) -> object:
        raise RuntimeError("a fault of the statement builder")

    monkeypatch.setattr("dealbase.platform.reads.service.one_statement", broken)
    with TestClient(create_app(settings), raise_server_exceptions=False) as fresh:
        body = fresh.post(
            GRAPHQL,
            json={"query": f'{{ customer(id: "{shop.customer_ids[0]}") {{ lastName }} }}'},
            headers=shop.world.keys[0].headers,
        ).json()
        metrics = fresh.get("/metrics").text
    assert body["data"] == {"customer": {"lastName": "Lovelace"}}
    assert 'dealbase_graphql_root_fields_total{field="customer",path="resolvers"} 1.0' in metrics
