"""Fails when the code under src/ uses a private name of another library that the ledger does
not list, or lists one it no longer uses (`make lint`).

A private name of another library is any of:
  - an import of a module path with a part that starts with "_" (``starlette._utils``), or of a
    module its project documents as internal (``INTERNAL_MODULES``), or of an underscore name
    from another package's module (``from x import _y``);
  - an attribute ``obj._name`` (one leading underscore, not a dunder) whose name the tree never
    defines itself (no ``def _name``, ``class _name``, ``_name = ...``, ``self._name = ...``,
    ``_name: T``, parameter, alias or keyword ``_name``): the name then belongs to something
    else;
  - a name of ``INTERNAL_NAMES``, internals without an underscore or with one the tree could
    also define for itself, wherever it appears: an attribute, a name, an imported name, a
    string (``getattr(resolver, "_is_default")``).
It is a heuristic that finds a lower bound: a private name the tree also defines for itself is
not seen.

The ledger (``private_names_ledger.txt`` beside this file) lists what is still used, one line a
file and name with its count: the debt that issues 53 and 54 pay off. It may only shrink: a
use it does not list fails, and so does a line whose count is above what is found (lower it).

    python tools/private_names.py            # check against the ledger; exit 1 on a difference
    python tools/private_names.py --list     # print every use found, as ledger lines
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEDGER = Path(__file__).with_name("private_names_ledger.txt")
OWN_PACKAGE = "dealbase"
# Underscore names that their libraries document as public (namedtuple's, SQLAlchemy's Row's).
PUBLIC_BY_CONVENTION = frozenset(
    {"_replace", "_asdict", "_fields", "_make", "_field_defaults", "_mapping", "_t", "_tuple"}
)
# Modules without an underscore in their path that their projects document as internal.
INTERNAL_MODULES = (
    "uvicorn.protocols",
    "uvicorn.supervisors",
    "psycopg.generators",
    "psycopg.waiting",
    "graphql.execution.execute",
    "strawberry.types.arguments",
    "strawberry.schema.schema_converter",
)
# Strawberry's internals the GraphQL API once used: the converter's back reference to a field's
# definition, its argument conversion, its mark of a default resolver, its graphql-core schema
# (there is no public accessor) and that schema's reference back.
INTERNAL_NAMES = frozenset(
    {"DEFINITION_BACKREF", "convert_arguments", "_is_default", "_schema", "_strawberry_schema"}
)

# (file relative to the repository, name) -> uses
Uses = Counter[tuple[str, str]]


def _private(name: str) -> bool:
    dunder = name.startswith("__") and name.endswith("__")
    return name.startswith("_") and not dunder and name not in PUBLIC_BY_CONVENTION


def _internal(module: str) -> bool:
    return any(_private(part) for part in module.split(".")) or module.startswith(INTERNAL_MODULES)


def _own_names(trees: dict[str, ast.Module]) -> set[str]:
    """The underscore names the tree defines: functions, classes, names it assigns, attributes
    it assigns on ``self`` or ``cls``, parameters, import aliases, keyword arguments."""
    own: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                own.add(node.attr)
            elif isinstance(node, ast.arg):
                own.add(node.arg)
            elif isinstance(node, ast.alias) and node.asname:
                own.add(node.asname)
            elif isinstance(node, ast.keyword) and node.arg:
                own.add(node.arg)
    return {name for name in own if _private(name)}


def _foreign(module: str) -> bool:
    return module.split(".")[0] != OWN_PACKAGE


def uses_in(folder: Path, root: Path = ROOT) -> Uses:
    """The uses of other libraries' private names in the .py files under ``folder``, by file
    (relative to ``root``) and name."""
    trees = {
        path.relative_to(root).as_posix(): ast.parse(path.read_text(encoding="utf-8"), str(path))
        for path in sorted(folder.rglob("*.py"))
    }
    own = _own_names(trees)
    found: Uses = Counter()
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _foreign(alias.name) and _internal(alias.name):
                        found[(path, f"module {alias.name}")] += 1
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                if not _foreign(node.module):
                    continue
                if _internal(node.module):
                    found[(path, f"module {node.module}")] += 1
                for alias in node.names:
                    if _private(alias.name) or alias.name in INTERNAL_NAMES:
                        found[(path, f"{node.module}.{alias.name}")] += 1
            elif isinstance(node, ast.Attribute) and (
                node.attr in INTERNAL_NAMES or (_private(node.attr) and node.attr not in own)
            ):
                found[(path, f".{node.attr}")] += 1
            elif isinstance(node, ast.Name) and node.id in INTERNAL_NAMES:
                found[(path, node.id)] += 1
            elif isinstance(node, ast.Constant) and node.value in INTERNAL_NAMES:
                found[(path, repr(node.value))] += 1
    return found


def read_ledger(text: str) -> Uses:
    ledger: Uses = Counter()
    for number, line in enumerate(text.splitlines(), 1):
        content = line.partition("#")[0].split()
        if not content:
            continue
        if len(content) < 3 or not content[-1].isdigit():
            raise ValueError(f"ledger line {number}: expected 'FILE NAME COUNT', got {line!r}")
        path, name, count = content[0], " ".join(content[1:-1]), int(content[-1])
        ledger[(path, name)] = count
    return ledger


def differences(found: Uses, ledger: Uses) -> list[str]:
    """What the ledger does not allow, and what it allows that is no longer there."""
    problems = []
    for (path, name), count in sorted(found.items()):
        allowed = ledger.get((path, name), 0)
        if count > allowed:
            problems.append(
                f"{path}: {name} used {count} times, the ledger allows {allowed}: use the"
                " library's public API (or, where none will do, see the ledger's header)"
            )
    for (path, name), allowed in sorted(ledger.items()):
        count = found.get((path, name), 0)
        if count < allowed:
            problems.append(
                f"{path}: {name} used {count} times, the ledger allows {allowed}: lower it"
            )
    return problems


def ledger_lines(found: Uses) -> list[str]:
    return [f"{path} {name} {count}" for (path, name), count in sorted(found.items())]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print every use as a ledger line")
    arguments = parser.parse_args()
    found = uses_in(ROOT / "src" / OWN_PACKAGE)
    if arguments.list:
        print("\n".join(ledger_lines(found)))
        return 0
    problems = differences(found, read_ledger(LEDGER.read_text(encoding="utf-8")))
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"private names of other libraries: {len(problems)} differences from the ledger")
        return 1
    print(f"private names of other libraries: {sum(found.values())} uses, as the ledger lists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
