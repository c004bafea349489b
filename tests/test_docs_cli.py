"""The README's section on the `dealbase` command stays true to `dealbase --help`: every
command and option it names exists, every command the CLI has is in it, and what it says of
`--json` holds. So does every `dealbase ...` line the docs show."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").rglob("*.md"))]
CODE_BLOCK = re.compile(r"^```[^\n]*\n(?P<code>.*?)^```", re.M | re.S)

# Run in a process of its own, with Typer's plain help (TYPER_USE_RICH is read as Typer is
# imported): `dealbase <command> --help` for the whole tree of commands, each help page by the
# words that lead to it. The console script's entry point comes from pyproject.toml, so the
# test follows the CLI wherever it lives.
WALK = """
import contextlib, importlib, io, json, re, sys

module, _, name = sys.argv[1].partition(":")
main = getattr(importlib.import_module(module), name)


def help_page(words):
    sys.argv = ["dealbase", *words, "--help"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main()
    return out.getvalue()


pages, waiting = {}, [()]
while waiting:
    words = waiting.pop()
    page = pages[" ".join(words)] = help_page(words)
    commands = page.partition("\\nCommands:\\n")[2]
    waiting += [(*words, name) for name in re.findall(r"^  (\\S+)", commands, re.M)]
print(json.dumps(pages))
"""

OPTION = re.compile(r"(?<![\w-])--[a-z][\w-]*")


@cache
def _help_pages() -> dict[str, str]:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["scripts"]
    environment = {**os.environ, "TYPER_USE_RICH": "0", "COLUMNS": "200"}
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), str(ROOT), environment.get("PYTHONPATH", "")]
    )
    walked = subprocess.run(
        [sys.executable, "-c", WALK, scripts["dealbase"]],
        capture_output=True,
        text=True,
        check=True,
        env=environment,
        cwd=ROOT,
    )
    pages: dict[str, str] = json.loads(walked.stdout)
    return pages


def _commands() -> dict[str, set[str]]:
    """Each command of the CLI (a group's commands, not the group) with its options."""
    pages = _help_pages()
    return {
        words: set(OPTION.findall(page.partition("\nOptions:\n")[2]))
        for words, page in pages.items()
        if "\nCommands:\n" not in page
    }


def _cli_section() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split("\n## The `dealbase` command\n", 1)[1].split("\n## ", 1)[0]


def _named_in_readme() -> list[tuple[str, set[str]]]:
    """Every command the section's table shows (`dealbase key issue --tenant T ...`): its words,
    which stop at the first argument or option, and the options the row gives it."""
    named = []
    for usage in re.findall(r"^\| `dealbase ([^`]+)` \|", _cli_section(), re.M):
        words = re.match(r"[a-z][\w-]*(?: [a-z][\w-]*)*", usage)
        assert words is not None, usage
        named.append((words[0], set(OPTION.findall(usage))))
    return named


def _shown_in_docs() -> list[tuple[str, str, set[str]]]:
    """Every `dealbase ...` a doc shows (a code block's line, its comment aside, or an inline
    code span): the doc, the command's words as far as they name a command, its options."""
    groups = {words.split()[0] for words in _commands() if " " in words}
    shown = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        lines = [
            line.split("#")[0] for block in CODE_BLOCK.findall(text) for line in block.split("\n")
        ]
        spans = re.findall(r"`([^`]+)`", CODE_BLOCK.sub("", text))
        for line in lines + [" ".join(span.split()) for span in spans]:
            used = re.match(r"\s*dealbase ([a-z][\w-]*)(?: ([a-z][\w-]*))?(?=\s|$)(.*)", line)
            if used is None:
                continue
            group, command, rest = used.groups()
            words = f"{group} {command}" if group in groups and command else group
            if group not in groups and command:
                rest = f"{command}{rest}"
            shown.append((str(doc.relative_to(ROOT)), words, set(OPTION.findall(rest))))
    return shown


def test_every_command_the_docs_show_is_one_of_the_cli_with_options_it_takes() -> None:
    commands = _commands()
    shown = _shown_in_docs()

    wrong = [
        (doc, words, sorted(options - commands.get(words, set())))
        for doc, words, options in shown
        if words not in commands or options - commands[words]
    ]

    assert (
        "docs/operations/tenants-and-keys.md",
        "tenant move",
        {"--node", "--mode", "--json"},
    ) in shown
    assert wrong == []


def test_the_walk_reads_every_help_page_of_the_cli() -> None:
    pages = _help_pages()

    assert "key" in pages and "key issue" in pages
    assert {"--tenant", "--department", "--scope", "--json"} <= _commands()["key issue"]


def test_every_command_the_readme_names_is_one_of_the_cli() -> None:
    commands = _commands()

    unknown = [words for words, _ in _named_in_readme() if words not in commands]

    assert unknown == []


def test_every_option_the_readme_gives_a_command_is_one_it_takes() -> None:
    commands = _commands()

    wrong = {
        words: sorted(options - commands[words])
        for words, options in _named_in_readme()
        if words in commands and options - commands[words]
    }

    assert wrong == {}


def test_every_command_of_the_cli_is_in_the_readme() -> None:
    named = {words for words, _ in _named_in_readme()}

    assert sorted(set(_commands()) - named) == []


def test_the_commands_the_readme_says_print_no_json_are_those_without_json() -> None:
    sentence = re.search(r"Every command but (?P<list>[^.]+) takes `--json`", _cli_section())
    assert sentence is not None, "the section says which commands take --json"
    said = set(re.findall(r"`([a-z][\w -]*)`", sentence["list"]))

    without = {words for words, options in _commands().items() if "--json" not in options}

    assert said == without
