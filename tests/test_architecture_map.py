"""docs/architecture.md's map of the code stays true to the tree, both ways: every folder and
file it names is there, at the place the map gives it, and every package and module of
src/dealbase is named in it, at its place."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src"
PACKAGE = SOURCE / "dealbase"

# A line's entry: the folder (ending in /) or file the line begins with, indented by its depth.
ENTRY = re.compile(r"^(?P<indent> *)(?P<name>[A-Za-z_.][\w./-]*/|[A-Za-z_]\w*\.[a-z]+)(?=\s|,|$)")
# Further folders and files a line's words name: `name.py`, `sub/`, `sub/file.md`. A word right
# after a slash or a colon is part of a URL path or an address (/graphql/stream, scheme://...).
NAMED = re.compile(
    r"(?<![\w./:@-])(?P<name>(?:[\w@.-]+/)*(?:[\w@-]+/|[\w@-]+\.(?:py|md|graphql|html|json|txt)))"
    r"(?![\w/-])"
)


def _map() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("```", 2)[1]
    lines = block.splitlines()[1:]
    assert lines[0] == "src/dealbase/", "the map begins at src/dealbase/"
    return lines


def _resolve(name: str, base: Path) -> Path:
    """Where a name in a line's words points: beside the line's entry; a folder, or a path
    through one, may also be given from the repository's root or from src/dealbase."""
    path = name.rstrip("/")
    candidates = [base / path]
    if "/" in name:
        candidates += [ROOT / path, PACKAGE / path]
    return next((path for path in candidates if path.exists()), candidates[0])


def _named(lines: list[str]) -> list[Path]:
    """Every folder and file the map names. A line's entry sits in the folder above it (its
    indentation says which); the other names on the line, and on the lines continuing it, sit
    beside the entry: in it, when the entry is a folder."""
    folders: list[tuple[int, Path]] = [(-1, ROOT)]
    named: list[Path] = []
    base = ROOT
    for line in lines:
        words = line
        match = ENTRY.match(line)
        if match is not None:
            indent = len(match["indent"])
            while folders[-1][0] >= indent:
                folders.pop()
            entry = folders[-1][1] / match["name"].rstrip("/")
            named.append(entry)
            base = folders[-1][1]
            if match["name"].endswith("/"):
                folders.append((indent, entry))
                base = entry
            words = line[match.end() :]
        named += [_resolve(word["name"], base) for word in NAMED.finditer(words)]
    return named


def _modules_and_packages() -> set[Path]:
    """The tree's packages and modules; the migrations' revisions are one folder each."""
    modules = {
        path
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py" and "versions" not in path.relative_to(PACKAGE).parts
    }
    packages = {init.parent for init in PACKAGE.rglob("__init__.py")}
    return (modules | packages) - {PACKAGE}


def test_every_folder_and_file_the_map_names_is_in_the_tree() -> None:
    named = _named(_map())
    missing = sorted({str(path.relative_to(ROOT)) for path in named if not path.exists()})

    # Read at their places: an entry three folders deep, and a file named in a folder's words.
    assert PACKAGE / "graphql_api" / "live" / "websocket.py" in named
    assert PACKAGE / "platform" / "customers" / "repository.py" in named
    assert missing == []


def test_every_package_and_module_of_the_tree_is_named_at_its_place() -> None:
    named = set(_named(_map()))

    unnamed = sorted(str(path.relative_to(SOURCE)) for path in _modules_and_packages() - named)

    assert unnamed == []


def test_a_module_named_in_the_wrong_folder_is_missing_from_the_tree() -> None:
    """A name counts at the place the map gives it, not wherever a file of that name exists."""
    named = _named(
        [
            "src/dealbase/",
            "  platform/       the service layer: cli.py, customers/",
            "    rows.py         shared SQL; records.py (not here: config.py)",
        ]
    )

    assert PACKAGE / "platform" / "cli.py" in named
    assert PACKAGE / "platform" / "customers" in named
    assert PACKAGE / "platform" / "config.py" in named
    assert [path for path in named if not path.exists()] == [
        PACKAGE / "platform" / "cli.py",
        PACKAGE / "platform" / "config.py",
    ]
