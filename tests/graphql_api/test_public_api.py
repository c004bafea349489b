"""The GraphQL API stands on Strawberry's and graphql-core's public API: none of the internals
it once used comes back (issue 53). ``tools/private_names.py`` (``make lint``) catches the
underscore names; these are internals without an underscore, or hidden from that check by a
name of the tree's own."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GRAPHQL_API = ROOT / "src" / "dealbase" / "graphql_api"
sys.path.insert(0, str(ROOT / "tools"))

from private_names import uses_in  # noqa: E402

# Strawberry's: the converter's back reference, its argument conversion, its resolvers' mark,
# its GraphQLSchema (no public accessor), its module-level validation helper.
INTERNAL_ATTRIBUTES = frozenset(
    {"DEFINITION_BACKREF", "convert_arguments", "_is_default", "_schema", "_strawberry_schema"}
)
INTERNAL_IMPORTS = frozenset(
    {
        "strawberry.types.arguments",
        "strawberry.schema.schema_converter",
        "strawberry.schema.schema.validate_document",
    }
)


def _found(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in INTERNAL_ATTRIBUTES:
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in INTERNAL_ATTRIBUTES:
            found.append(f"{path.name}:{node.lineno} {node.id}")
        elif isinstance(node, ast.Constant) and node.value in INTERNAL_ATTRIBUTES:
            found.append(f"{path.name}:{node.lineno} {node.value!r}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
            found += [f"{path.name}:{node.lineno} {name}" for name in names & INTERNAL_IMPORTS]
    return found


def test_no_internal_of_strawberry_or_graphql_core_is_used() -> None:
    found = [use for path in sorted(GRAPHQL_API.rglob("*.py")) for use in _found(path)]
    assert found == []


def test_no_private_name_of_another_library_is_used() -> None:
    assert sorted(uses_in(GRAPHQL_API)) == []
