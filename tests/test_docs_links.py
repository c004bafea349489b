"""Every link between the docs leads somewhere: a relative link's file exists, and its
`#anchor` is a heading of that file (as GitHub makes anchors of headings); and every page can
be found, from the README or from the operations index."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
CODE_BLOCK = re.compile(r"^```.*?^```", re.M | re.S)
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (?P<title>.+?)\s*$", re.M)


def _slug(title: str) -> str:
    """GitHub's anchor of a heading: lower case, without punctuation, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


@cache
def _anchors(doc: Path) -> frozenset[str]:
    text = CODE_BLOCK.sub("", doc.read_text(encoding="utf-8"))
    anchors: set[str] = set()
    for heading in HEADING.finditer(text):
        slug = _slug(heading["title"])
        repeated = slug
        count = 0
        while repeated in anchors:
            count += 1
            repeated = f"{slug}-{count}"
        anchors.add(repeated)
    return frozenset(anchors)


def _links() -> list[tuple[Path, str]]:
    links = []
    for doc in DOCS:
        text = CODE_BLOCK.sub("", doc.read_text(encoding="utf-8"))
        for link in LINK.finditer(text):
            target = link["target"]
            if not re.match(r"[a-z]+:", target):  # not https:, mailto:
                links.append((doc, target))
    return links


def test_a_heading_with_code_and_punctuation_has_githubs_anchor() -> None:
    assert _slug("Embedded PostgreSQL or `DEALBASE_DATABASE_URL`") == (
        "embedded-postgresql-or-dealbase_database_url"
    )
    assert _slug("Deploying: `deploy/`") == "deploying-deploy"
    assert _slug("Stopping, outages, restarts") == "stopping-outages-restarts"


def test_every_relative_link_of_the_docs_names_a_file_that_exists() -> None:
    broken = [
        f"{doc.relative_to(ROOT)}: {target}"
        for doc, target in _links()
        if not (doc.parent / target.partition("#")[0]).exists()
    ]

    assert len(_links()) > 100
    assert broken == []


def test_every_anchor_a_link_names_is_a_heading_of_its_file() -> None:
    broken = []
    for doc, target in _links():
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        checked = anchor and linked.suffix == ".md" and linked.exists()
        if checked and anchor not in _anchors(linked):
            broken.append(f"{doc.relative_to(ROOT)}: {target}")

    assert broken == []


def _linked_from(page: Path) -> set[Path]:
    return {
        (page.parent / target.partition("#")[0]).resolve()
        for doc, target in _links()
        if doc == page
    }


def test_every_page_of_docs_is_linked_from_the_readme_or_the_operations_index() -> None:
    readme = _linked_from(ROOT / "README.md")
    index = _linked_from(ROOT / "docs" / "operations.md")

    pages = (ROOT / "docs").glob("*.md")
    operations = (ROOT / "docs" / "operations").glob("*.md")
    assert sorted(page.name for page in pages if page.resolve() not in readme) == []
    assert sorted(page.name for page in operations if page.resolve() not in index) == []
