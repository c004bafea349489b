"""What the docs say of the settings, the REST routes and the GraphQL root fields stays true to
the code: every `DEALBASE_*` variable they name is a setting (or one the tests read), the
configuration table lists every setting with its default, the endpoint table and route count
are the OpenAPI document's, and graphql.md's fields are the SDL's."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from graphql import GraphQLObjectType, build_schema

from dealbase.config import Settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
CONFIGURATION = ROOT / "docs" / "operations" / "configuration.md"
API_GUIDE = ROOT / "docs" / "api.md"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
GRAPHQL_GUIDE = ROOT / "docs" / "graphql.md"
SDL = ROOT / "src" / "dealbase" / "graphql_api" / "schema.graphql"
PREFIX = "/api/v1/integration"

VARIABLE = re.compile(r"\bDEALBASE_[A-Z0-9_]*[A-Z0-9]\b")
# A setting named without its prefix, as the docs do where the prefix is understood (DB_POOL_SIZE).
SHORT_NAME = re.compile(
    r"(?<![\w-])(?:DB|DATABASE|DATA|REDIS|RATE_LIMIT|GRAPHQL|LIVE|CITUS|METRICS|SHUTDOWN|WRITE"
    r"|BODY|WEBHOOKS|SPARE|MIGRATE|LOG|CORS|GC|FREEZE|ROUTE)_[A-Z0-9_]*[A-Z0-9]\b"
)
SETTING_ROW = re.compile(r"^\| `(?P<name>DEALBASE_[A-Z0-9_]+)` \| (?P<default>.*?) \| .* \|$", re.M)
DEFAULTS_ROW = re.compile(
    r"^\|(?:[^|\n]*\|)?? (?P<names>`DEALBASE_\w+`(?:, `DEALBASE_\w+`)*) \| (?P<values>[^|\n]+?) \|",
    re.M,
)
PLAIN_VALUE = re.compile(r"\d{1,3}(?:,\d{3})*|\d+|on|off")
ENDPOINT_ROW = re.compile(
    r"^\| `(?P<method>GET|POST|PUT|PATCH|DELETE) (?P<path>/\S*)` \| (?P<statuses>.*) \|$", re.M
)
ROUTE_COUNT = re.compile(r"every integration route of the app \((?P<count>\d+),")


def _settings() -> set[str]:
    return {f"DEALBASE_{name.upper()}" for name in Settings.model_fields}


def _named_in_docs() -> set[str]:
    return {name for doc in DOCS for name in VARIABLE.findall(doc.read_text(encoding="utf-8"))}


def _read_by_the_tests() -> set[str]:
    """The tests' own variables (``DEALBASE_TEST_*``), which are no settings of the service."""
    sources = (ROOT / "tests").rglob("*.py")
    named = {name for source in sources for name in VARIABLE.findall(source.read_text("utf-8"))}
    return {name for name in named if name.startswith("DEALBASE_TEST_")}


def _operations() -> dict[tuple[str, str], set[str]]:
    """The OpenAPI document's operations, each with its statuses; a path's parameters unnamed."""
    document: dict[str, Any] = json.loads((ROOT / "openapi.json").read_text(encoding="utf-8"))
    return {
        (method.upper(), _unnamed(path.removeprefix(PREFIX))): set(operation["responses"])
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
        if method in {"get", "post", "put", "patch", "delete"}
    }


def _unnamed(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def _section(doc: Path, heading: str) -> str:
    text = doc.read_text(encoding="utf-8")
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def test_every_variable_the_docs_name_is_a_setting_or_read_by_the_tests() -> None:
    unknown = _named_in_docs() - _settings() - _read_by_the_tests()

    assert sorted(unknown) == []


def test_every_setting_the_docs_name_without_its_prefix_is_a_setting() -> None:
    named = {name for doc in DOCS for name in SHORT_NAME.findall(doc.read_text("utf-8"))}

    unknown = {f"DEALBASE_{name}" for name in named} - _settings()

    assert sorted(unknown) == []


def test_the_configuration_table_lists_every_setting_once() -> None:
    rows = [row["name"] for row in SETTING_ROW.finditer(CONFIGURATION.read_text("utf-8"))]

    assert sorted(rows) == sorted(_settings())


def test_every_default_a_docs_table_gives_a_setting_is_the_settings() -> None:
    """A table row that names settings and then their defaults as values (`10/s`, 2,000, on;
    "16, 256" for two settings) gives the defaults of config.Settings. A default in words
    ("unset", "`true` under `dealbase serve`") is not read."""
    read = 0
    wrong = {}
    for doc in DOCS:
        for row in DEFAULTS_ROW.finditer(doc.read_text(encoding="utf-8")):
            names = re.findall(r"DEALBASE_\w+", row["names"])
            values = [_value(shown) for shown in row["values"].split(", ")]
            if len(values) != len(names) or None in values:
                continue
            for name, value in zip(names, values, strict=True):
                read += 1
                default = Settings.model_fields[name.removeprefix("DEALBASE_").lower()].default
                if _as_written(default) != value:
                    wrong[f"{doc.name}: {name}"] = (value, default)

    assert read > 50
    assert wrong == {}


def _value(shown: str) -> str | None:
    """A default as a table shows it, as Python writes it; None for one given in words."""
    quoted = re.fullmatch(r"`([^`]*)`", shown)
    if quoted:
        return quoted[1]
    if PLAIN_VALUE.fullmatch(shown):
        return {"on": "true", "off": "false"}.get(shown, shown.replace(",", ""))
    return None


def _as_written(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def test_the_api_guides_endpoint_table_is_the_openapi_documents_operations() -> None:
    rows = ENDPOINT_ROW.finditer(_section(API_GUIDE, "## Endpoints"))

    listed = [(row["method"], _unnamed(row["path"])) for row in rows]

    assert sorted(listed) == sorted(_operations())


def test_every_status_the_endpoint_table_gives_is_one_the_operation_documents() -> None:
    operations = _operations()
    undocumented = {}
    for row in ENDPOINT_ROW.finditer(_section(API_GUIDE, "## Endpoints")):
        operation = (row["method"], _unnamed(row["path"]))
        statuses = set(re.findall(r"\b[1-5]\d\d\b", row["statuses"]))
        if statuses - operations[operation]:
            undocumented[operation] = sorted(statuses - operations[operation])

    assert undocumented == {}


def test_the_route_count_the_architecture_gives_is_the_openapi_documents() -> None:
    counts = [int(m["count"]) for m in ROUTE_COUNT.finditer(ARCHITECTURE.read_text("utf-8"))]

    assert counts == [len(_operations())]


def _fields_with_arguments() -> dict[str, list[set[str]]]:
    """Every field of the SDL's object types by name, with each one's arguments."""
    schema = build_schema(SDL.read_text(encoding="utf-8"))
    fields: dict[str, list[set[str]]] = {}
    for kind in schema.type_map.values():
        if isinstance(kind, GraphQLObjectType) and not kind.name.startswith("__"):
            for name, field in kind.fields.items():
                fields.setdefault(name, []).append(set(field.args))
    return fields


def test_every_field_graphql_md_shows_with_arguments_is_one_of_the_sdl() -> None:
    """`deals(filter, orderBy, first, after)`: a field of that name takes those arguments."""
    fields = _fields_with_arguments()
    section = _section(GRAPHQL_GUIDE, "## What there is")
    shown = re.findall(r"`([a-z]\w*)\(([\w, ]*)\)`", section)

    wrong = [
        f"{name}({arguments})"
        for name, arguments in shown
        if not any(set(arguments.split(", ")) <= taken for taken in fields.get(name, []))
    ]

    assert len(shown) > 10
    assert wrong == []


def test_every_root_field_of_the_sdl_is_in_graphql_md() -> None:
    schema = build_schema(SDL.read_text(encoding="utf-8"))
    roots = [schema.query_type, schema.mutation_type, schema.subscription_type]
    section = _section(GRAPHQL_GUIDE, "## What there is")
    shown = set(re.findall(r"`([a-z]\w*)[`(]", section))

    missing = [name for root in roots if root for name in root.fields if name not in shown]

    assert missing == []
