"""Every example the OpenAPI document gives is valid against its own schema: linters report an
example that is not, and clients and mock servers built from the document serve it as data."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from contract_tests.document_schemas import DocumentSchemas, pointer
from contract_tests.support import import_time_document

DOCUMENT = import_time_document()

# The JSON Schema keywords whose values hold subschemas: a map of them, a list, or one.
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUBSCHEMAS = (
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
)


@dataclass(frozen=True)
class Example:
    where: str  # the example's JSON pointer
    schema: str  # the JSON pointer of the schema it illustrates
    value: object


def schema_examples(schema: object, at: tuple[str | int, ...]) -> Iterator[Example]:
    """The ``example`` and ``examples`` of a schema and of its subschemas, at any depth."""
    if not isinstance(schema, dict):
        return  # a boolean schema
    here = pointer(*at)
    if "example" in schema:
        yield Example(pointer(*at, "example"), here, schema["example"])
    for index, value in enumerate(schema.get("examples", [])):
        yield Example(pointer(*at, "examples", index), here, value)
    for keyword, value in schema.items():
        if keyword in _SUBSCHEMA_MAPS:
            for name, subschema in value.items():
                yield from schema_examples(subschema, (*at, keyword, name))
        elif keyword in _SUBSCHEMA_LISTS:
            for index, subschema in enumerate(value):
                yield from schema_examples(subschema, (*at, keyword, index))
        elif keyword in _SUBSCHEMAS:
            yield from schema_examples(value, (*at, keyword))


def described_examples(
    document: Mapping[str, Any], node: object, at: tuple[str | int, ...]
) -> Iterator[Example]:
    """The examples of the parameters, headers and media types under ``node`` (each an object
    with a ``schema``: its ``example``, or the ``value`` of each of its ``examples``), and of
    their schemas."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            yield from described_examples(document, item, (*at, index))
        return
    if not isinstance(node, dict):
        return
    if isinstance(node.get("schema"), dict):
        schema_at = pointer(*at, "schema")
        yield from schema_examples(node["schema"], (*at, "schema"))
        if "example" in node:
            yield Example(pointer(*at, "example"), schema_at, node["example"])
        for name, example in node.get("examples", {}).items():
            resolved = _resolved(document, example)
            if "value" in resolved:
                yield Example(pointer(*at, "examples", name), schema_at, resolved["value"])
    for key, value in node.items():
        if key not in ("schema", "example", "examples"):
            yield from described_examples(document, value, (*at, key))


def _resolved(document: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    """An Example Object, or the one its ``$ref`` (``#/components/examples/...``) names."""
    reference = node.get("$ref")
    if not isinstance(reference, str):
        return node
    target: Any = document
    for key in reference.removeprefix("#/").split("/"):
        target = target[key.replace("~1", "/").replace("~0", "~")]
    return _resolved(document, target)


def examples_in(document: Mapping[str, Any]) -> list[Example]:
    """Every example of the document: its schemas', and its operations' and webhooks'."""
    found: list[Example] = []
    for name, schema in document["components"]["schemas"].items():
        found += schema_examples(schema, ("components", "schemas", name))
    for section, content in document.items():
        if section == "components":
            for part, entries in content.items():
                if part != "schemas":
                    found += described_examples(document, entries, (section, part))
        else:
            found += described_examples(document, content, (section,))
    return found


def invalid_examples(document: Mapping[str, Any]) -> dict[str, list[str]]:
    """Each example that breaks its schema, by where it is, with what is wrong."""
    schemas = DocumentSchemas(document)
    judged = {
        example.where: schemas.errors(example.value, example.schema)
        for example in examples_in(document)
    }
    return {where: errors for where, errors in judged.items() if errors}


CUSTOMERS_POST = ("paths", "/api/v1/integration/customers", "post")
JSON = "application/json"


def test_every_example_of_the_document_is_valid_against_its_schema() -> None:
    assert invalid_examples(DOCUMENT) == {}


def test_the_examples_are_found_in_schemas_at_any_depth_and_in_request_bodies() -> None:
    found = {example.where: example.schema for example in examples_in(DOCUMENT)}

    assert found[pointer("components", "schemas", "CustomerOut", "examples", 0)] == pointer(
        "components", "schemas", "CustomerOut"
    )
    nested = ("components", "schemas", "ActivityOut", "properties", "due_at", "anyOf", 0)
    assert found[pointer(*nested, "examples", 0)] == pointer(*nested)
    body = (*CUSTOMERS_POST, "requestBody", "content", JSON)
    assert found[pointer(*body, "example")] == pointer(*body, "schema")
    webhook_body = ("webhooks", "webhook.test", "post", "requestBody", "content", JSON, "schema")
    assert pointer(*webhook_body, "properties", "created_at", "examples", 0) in found


def test_an_example_that_leaves_out_a_required_field_is_reported() -> None:
    document: dict[str, Any] = copy.deepcopy(DOCUMENT)
    del document["components"]["schemas"]["CustomerOut"]["examples"][0]["city"]

    assert invalid_examples(document) == {
        pointer("components", "schemas", "CustomerOut", "examples", 0): [
            "/: 'city' is a required property"
        ]
    }


def test_a_request_example_of_the_wrong_type_is_reported_through_its_ref() -> None:
    document: dict[str, Any] = copy.deepcopy(DOCUMENT)
    media = document["paths"][CUSTOMERS_POST[1]]["post"]["requestBody"]["content"][JSON]
    media["examples"] = {"numbered": {"$ref": "#/components/examples/Numbered"}}
    document["components"]["examples"] = {"Numbered": {"value": {"last_name": 7}}}

    invalid = invalid_examples(document)

    where = pointer(*CUSTOMERS_POST, "requestBody", "content", JSON, "examples", "numbered")
    assert invalid == {where: ["/last_name: 7 is not of type 'string'"]}


def test_a_uuid_example_that_is_no_uuid_is_reported() -> None:
    document: dict[str, Any] = copy.deepcopy(DOCUMENT)
    document["components"]["schemas"]["ActivityOut"]["examples"][0]["customer_id"] = "c-1"

    assert invalid_examples(document) == {
        pointer("components", "schemas", "ActivityOut", "examples", 0): [
            "/customer_id: 'c-1' is not a 'uuid'"
        ]
    }
