"""The OpenAPI document as client generators and linters read it: no default that is not one, no
null to send for a parameter that is simply not sent, each batch operation's data typed, and
every operation tagged and described."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from contract_tests.support import import_time_document

DOCUMENT = import_time_document()
SCHEMAS: dict[str, Any] = DOCUMENT["components"]["schemas"]
REF = "#/components/schemas/"


def _nodes(node: object, at: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield at, node
        for key, value in node.items():
            yield from _nodes(value, f"{at}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _nodes(value, f"{at}/{index}")


def _operations() -> Iterator[tuple[str, dict[str, Any]]]:
    for path, operations in DOCUMENT["paths"].items():
        for method, operation in operations.items():
            yield f"{method.upper()} {path}", operation


def test_no_schema_has_a_default_of_null() -> None:
    defaults_of_null = [at for at, node in _nodes(DOCUMENT) if node.get("default", ...) is None]

    assert defaults_of_null == []


def test_an_optional_parameter_is_its_type_without_null() -> None:
    optional = {
        f"{name} {parameter['name']}": parameter["schema"]
        for name, operation in _operations()
        for parameter in operation.get("parameters", [])
        if not parameter.get("required")
    }

    assert optional["PATCH /api/v1/integration/customers/{customer_id} If-Match"] == {
        "type": "string",
        "maxLength": 1024,
        "description": "Apply only if the resource's ETag is one of these (or `*`); else 412.",
        "title": "If-Match",
    }
    typed_otherwise = [
        key for key, schema in optional.items() if "anyOf" in schema or "type" not in schema
    ]
    assert typed_otherwise == []
    idempotency_key = optional["POST /api/v1/integration/deals Idempotency-Key"]
    assert (idempotency_key["type"], "pattern" in idempotency_key) == ("string", True)


@pytest.mark.parametrize(
    ("schema", "field", "meaning"),
    [
        ("CustomerPatch", "city", "Left out, it keeps its value; `null` clears it."),
        ("CustomerPatch", "last_name", "Left out, it keeps its value; it cannot be cleared"),
        ("DealCreate", "volume", "Optional: left out or `null`, it has no value."),
        ("CustomerFields", "city", "an upsert that finds the record keeps its value"),
        ("DealUpsert", "step_id", "never `null`"),
        ("WebhookEndpointPatch", "enabled", "it cannot be cleared"),
        ("DealCreate", "customers", "Optional: left out, it is `[]`."),
        ("WebhookEndpointFields", "ordered", "Optional: left out, it is `true`."),
    ],
)
def test_an_optional_request_field_says_what_leaving_it_out_means(
    schema: str, field: str, meaning: str
) -> None:
    assert meaning in SCHEMAS[schema]["properties"][field]["description"]


def test_every_optional_request_field_has_no_default_and_says_what_leaving_it_out_means() -> None:
    """openapi-typescript, by its defaults, makes a field with a default required in the body."""
    request_schemas = [
        name for name in SCHEMAS if name.endswith(("Fields", "Patch", "Create", "Upsert"))
    ]
    optional = [
        (f"{name}.{field}", schema)
        for name in request_schemas
        for field, schema in SCHEMAS[name]["properties"].items()
        if field not in SCHEMAS[name].get("required", [])
    ]

    assert len(request_schemas) >= 9
    assert [at for at, schema in optional if "default" in schema] == []
    assert [
        at for at, schema in optional if "left out" not in schema.get("description", "").lower()
    ] == []


def test_the_external_id_keeps_its_own_description_beside_what_absence_means() -> None:
    description = SCHEMAS["CustomerPatch"]["properties"]["external_id"]["description"]

    assert description.startswith("The client's own id for the record")
    assert description.endswith("Left out, it keeps its value; `null` clears it.")


@pytest.mark.parametrize(
    ("batch", "create", "upsert"),
    [
        ("CustomerBatch", "CustomerFields", "CustomerFields"),
        ("DealBatch", "DealCreate", "DealUpsert"),
        ("ActivityBatch", "ActivityFields", "ActivityFields"),
    ],
)
def test_each_batch_operation_types_its_data_by_its_op(
    batch: str, create: str, upsert: str
) -> None:
    items = SCHEMAS[batch]["properties"]["operations"]["items"]
    data_by_op = {
        op: SCHEMAS[operation.removeprefix(REF)]["properties"]["data"]["$ref"]
        for op, operation in items["discriminator"]["mapping"].items()
    }

    assert items["discriminator"]["propertyName"] == "op"
    assert data_by_op == {"create": REF + create, "upsert": REF + upsert}


def test_every_operation_has_tags_a_summary_and_a_description() -> None:
    lacking = {
        name: [key for key in ("tags", "summary", "description") if not operation.get(key)]
        for name, operation in _operations()
    }

    assert {name: keys for name, keys in lacking.items() if keys} == {}


def test_every_tag_is_described_once_at_the_top() -> None:
    used = {
        tag
        for section in ("paths", "webhooks")
        for operations in DOCUMENT[section].values()
        for operation in operations.values()
        for tag in operation["tags"]
    }
    described = [tag["name"] for tag in DOCUMENT["tags"] if tag.get("description")]

    assert sorted(described) == sorted(used)
