"""tools/private_names.py: src/ uses exactly the private names of other libraries that the
ledger lists; a new one, or a ledger line above what is used, fails `make lint`."""

from __future__ import annotations

from pathlib import Path

from tools.private_names import (
    LEDGER,
    ROOT,
    differences,
    ledger_lines,
    read_ledger,
    uses_in,
)


def _tree(tmp_path: Path, source: str) -> Path:
    package = tmp_path / "dealbase"
    package.mkdir()
    (package / "module.py").write_text(source, encoding="utf-8")
    return package


def test_the_tree_uses_what_the_ledger_lists() -> None:
    found = uses_in(ROOT / "src" / "dealbase")

    assert differences(found, read_ledger(LEDGER.read_text(encoding="utf-8"))) == []


def test_private_modules_names_and_attributes_of_other_libraries_are_found(
    tmp_path: Path,
) -> None:
    package = _tree(
        tmp_path,
        "from starlette._utils import get_route_path\n"
        "import uvicorn.protocols.http.httptools_impl\n"
        "from prometheus_client import _private_helper\n"
        "from dealbase._own import _fine\n"
        "def read(histogram):\n"
        "    return histogram._sum, histogram.public\n",
    )

    assert ledger_lines(uses_in(package, tmp_path)) == [
        "dealbase/module.py ._sum 1",
        "dealbase/module.py module starlette._utils 1",
        "dealbase/module.py module uvicorn.protocols.http.httptools_impl 1",
        "dealbase/module.py prometheus_client._private_helper 1",
    ]


def test_strawberrys_internals_are_found_even_where_the_tree_has_a_name_of_its_own(
    tmp_path: Path,
) -> None:
    package = _tree(
        tmp_path,
        "from strawberry.types.arguments import convert_arguments\n"
        "from strawberry.schema.schema_converter import GraphQLCoreConverter\n"
        "class Holder:\n"
        "    def __init__(self, schema):\n"
        "        self._schema = schema._schema\n"
        "def definition(field, resolver):\n"
        "    key = GraphQLCoreConverter.DEFINITION_BACKREF\n"
        "    return field.extensions[key], getattr(resolver, '_is_default', False)\n",
    )

    assert ledger_lines(uses_in(package, tmp_path)) == [
        "dealbase/module.py '_is_default' 1",
        "dealbase/module.py .DEFINITION_BACKREF 1",
        "dealbase/module.py ._schema 2",
        "dealbase/module.py module strawberry.schema.schema_converter 1",
        "dealbase/module.py module strawberry.types.arguments 1",
        "dealbase/module.py strawberry.types.arguments.convert_arguments 1",
    ]


def test_a_private_name_the_tree_defines_itself_is_its_own(tmp_path: Path) -> None:
    package = _tree(
        tmp_path,
        "class Box:\n"
        "    def __init__(self):\n"
        "        self._content = 1\n"
        "    def _peek(self):\n"
        "        return self._content\n"
        "def look(box):\n"
        "    return box._content, box._peek(), box.__class__, box._asdict()\n",
    )

    assert uses_in(package, tmp_path) == {}


def test_a_use_the_ledger_does_not_allow_fails_and_so_does_a_line_above_the_uses() -> None:
    found = read_ledger("a.py ._sum 2\nb.py ._stats 1")
    ledger = read_ledger(
        "# why each is still here\na.py ._sum 1  # one allowed\nb.py ._stats 3\nc.py ._gone 1\n"
    )

    assert differences(found, ledger) == [
        "a.py: ._sum used 2 times, the ledger allows 1: use the library's public API (or, where"
        " none will do, see the ledger's header)",
        "b.py: ._stats used 1 times, the ledger allows 3: lower it",
        "c.py: ._gone used 0 times, the ledger allows 1: lower it",
    ]
