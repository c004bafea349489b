"""docs/architecture.md's map of the code stays true to the tree: every folder and file it
names is there, and every package and module of src/dealbase is named in it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src"
ENTRY = re.compile(r"^(?P<indent> *)(?P<name>[A-Za-z_.][\w./-]*/|[A-Za-z_]\w*\.py)(?=\s|,|$)")


def _map() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("```", 2)[1]
    lines = block.splitlines()[1:]
    assert lines[0] == "src/dealbase/", "the map begins at src/dealbase/"
    return lines


def _entries() -> list[Path]:
    """The folders and files the map names at the start of a line, each at its place: a line's
    indentation says which folder above it holds it."""
    folders: list[tuple[int, Path]] = [(-1, ROOT)]
    named: list[Path] = []
    for line in _map():
        match = ENTRY.match(line)
        if match is None:
            continue
        indent = len(match["indent"])
        while folders[-1][0] >= indent:
            folders.pop()
        path = folders[-1][1] / match["name"].rstrip("/")
        named.append(path)
        if match["name"].endswith("/"):
            folders.append((indent, path))
    return named


def test_every_folder_and_file_the_map_names_is_in_the_tree() -> None:
    entries = _entries()
    missing = [str(path.relative_to(ROOT)) for path in entries if not path.exists()]

    # Read at their places, three folders deep.
    assert SOURCE / "dealbase" / "graphql_api" / "live" / "websocket.py" in entries
    assert missing == []


def test_every_package_of_the_tree_is_a_folder_of_the_map() -> None:
    named = set(_entries())
    packages = {init.parent for init in (SOURCE / "dealbase").rglob("__init__.py")}

    assert sorted(str(p.relative_to(SOURCE)) for p in packages - named) == []


def test_every_module_of_the_tree_is_named_in_the_map() -> None:
    text = "\n".join(_map())
    modules = {
        path.name
        for path in (SOURCE / "dealbase").rglob("*.py")
        if path.name != "__init__.py" and "versions" not in path.parts
    }

    assert sorted(name for name in modules if name not in text) == []
