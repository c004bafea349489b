"""The pipeline board at /board: a page of the service's own files, sent with headers that keep
a pasted key to it, and, in Debian's chromium, the department's board kept live by the
subscription, moved by dragging or the arrow keys, and refusing a wrong key with a clear
message."""

from __future__ import annotations

import re
import secrets
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from fastapi.testclient import TestClient
from graphql import build_schema as build_graphql_core_schema
from graphql import parse, validate

from dealbase.config import Settings
from dealbase.db.database import Database
from dealbase.graphql_api.guards import estimate_cost
from dealbase.graphql_api.schema import build_schema
from dealbase.ops import admin
from dealbase.ops.web_pages.pages import BOARD_DIRECTORY, BOARD_FILES, board_page
from tests.ops.board_browser import (
    SEEDED,
    WAIT_MS,
    SeedDeal,
    card_of,
    column_of,
    create_deal,
    rest_client,
    seed,
    sign_in,
    sign_in_live,
    steps_of,
    wait_until_live,
)
from tests.support import TenantWorld, build_tenant

if TYPE_CHECKING:
    from playwright.sync_api import ConsoleMessage, Page

# What a browser fetches from the page: its own script and stylesheet.
_LOADED = re.compile(r'(?:src|href)="(/[^"]*)"')


def _directives(header: str) -> dict[str, str]:
    return {
        name: value.strip()
        for name, _, value in (part.strip().partition(" ") for part in header.split(";"))
    }


def test_the_board_page_allows_only_its_own_scripts_styles_and_connections(
    client: TestClient,
) -> None:
    response = client.get("/board")

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    policy = _directives(response.headers["content-security-policy"])
    assert policy["default-src"] == "'none'"
    for directive in ("script-src", "style-src", "connect-src"):
        assert policy[directive] == "'self'", directive
    assert policy["frame-ancestors"] == "'none'"
    # The browser itself refuses a string written as HTML.
    assert policy["require-trusted-types-for"] == "'script'"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"


def test_the_board_loads_its_files_from_the_service_under_a_digest_of_their_content(
    client: TestClient,
) -> None:
    urls = _LOADED.findall(client.get("/board").text)
    served_files = [url for url in urls if url.startswith("/board/")]

    # Every file the board ships, each named by the page (the modules board.js imports too),
    # all under one folder named by their content.
    assert sorted(Path(url).name for url in served_files) == sorted(BOARD_FILES)
    (folder,) = {Path(url).parent for url in served_files}
    assert re.fullmatch(r"/board/[0-9a-f]{16}", str(folder))
    assert not re.findall(r"\w+://", client.get("/board").text)
    for url in served_files:
        response = client.get(url)
        assert response.status_code == 200, url
        assert response.content == (BOARD_DIRECTORY / Path(url).name).read_bytes()
        assert response.headers["x-content-type-options"] == "nosniff"
        assert "immutable" in response.headers["cache-control"]
    for unserved in ("/board/board.js", f"{folder}/board.html", "/board/0000000000000000/board.js"):
        assert client.get(unserved).status_code == 404, unserved


def test_the_board_files_digest_changes_with_any_files_content(tmp_path: Path) -> None:
    """Else a browser would keep an old module under the new page's path."""
    for name in (*BOARD_FILES, "board.html"):
        (tmp_path / name).write_bytes((BOARD_DIRECTORY / name).read_bytes())
    before = set(board_page(tmp_path).files)

    with (tmp_path / "fields.js").open("a") as fields:
        fields.write("\n")

    after = set(board_page(tmp_path).files)
    assert before.isdisjoint(after)
    assert {Path(path).name for path in after} == set(BOARD_FILES)


def _scripts() -> dict[str, str]:
    return {
        name: (BOARD_DIRECTORY / name).read_text() for name in BOARD_FILES if name.endswith(".js")
    }


def test_the_board_scripts_never_parse_text_as_html() -> None:
    for name, script in _scripts().items():
        for parsing in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert parsing not in script, (name, parsing)


def _documents() -> dict[str, str]:
    """The GraphQL documents the board's scripts send, by the name of their constant."""
    scripts = "\n".join(_scripts().values())
    per_step = re.search(r"const CARDS_PER_STEP = (\d+);", scripts)
    assert per_step is not None
    documents = re.findall(
        r'const ([A-Z]+) = [`"]((?:query|mutation|subscription).*?)[`"];', scripts, re.DOTALL
    )
    return {name: text.replace("${CARDS_PER_STEP}", per_step[1]) for name, text in documents}


def test_the_board_documents_are_valid_and_its_subscription_fits_the_default_cost_budget(
    settings: Settings,
) -> None:
    """Else the page would be refused before its first board (invalid_query, query_too_costly)."""
    documents = _documents()
    # graphql-core's schema from the SDL Strawberry prints (it has no public accessor for its own).
    schema = build_graphql_core_schema(build_schema(settings).as_str())

    assert set(documents) == {"DEPARTMENTS", "BOARD", "MOVE", "DEFINITIONS"}
    for name, text in documents.items():
        assert validate(schema, parse(text)) == [], name
    estimate = estimate_cost(schema, parse(documents["BOARD"]), {"departmentId": str(uuid.uuid4())})
    assert estimate <= Settings.model_fields["graphql_max_cost"].default


# In a browser.


def _shown(page: Page) -> dict[str, tuple[str, list[str]]]:
    """Each column's summary and its cards' text, by step, as the page shows them (read at once:
    a call to the browser a card would take seconds)."""
    shown: list[tuple[str, str, list[str]]] = page.evaluate(
        """() => [...document.querySelectorAll("#board [aria-label]")].map((column) => [
            column.getAttribute("aria-label"),
            column.querySelector(".summary").innerText,
            [...column.querySelectorAll(".card")].map((card) => card.innerText),
        ])"""
    )
    return {step: (summary, cards) for step, summary, cards in shown}


def test_the_board_shows_each_step_with_its_seeded_deals_count_volume_employee_and_customers(
    board_url: str, database: Database, world: TenantWorld, open_page: Callable[[], Page]
) -> None:
    markup = SeedDeal('<img src=x onerror="document.title=1"> & co', 7, "Lead", None, ())
    seed(board_url, database, world, (*SEEDED, markup))
    page = open_page()
    problems: list[str] = []

    def note_console(message: ConsoleMessage) -> None:
        # A refused script or style (the page's own policy) is an error here too.
        if message.type == "error":
            problems.append(message.text)

    page.on("console", note_console)
    page.on("pageerror", lambda error: problems.append(str(error)))

    sign_in_live(page, board_url, world)

    with rest_client(board_url, world.key) as rest:
        steps = steps_of(rest)
    shown = _shown(page)
    assert list(shown) == list(steps)
    for step, (summary, cards) in shown.items():
        deals = [deal for deal in (*SEEDED, markup) if deal.step == step]
        volume = sum(deal.volume or 0 for deal in deals)
        noun = "deal" if len(deals) == 1 else "deals"
        assert summary == f"{len(deals)} {noun} · {volume:,}", step
        assert len(cards) == len(deals), step
        for deal, card in zip(deals, cards, strict=True):
            lines = [line for line in card.splitlines() if line]
            assert lines[0] == deal.name
            assert lines[1] == (f"{deal.volume:,}" if deal.volume is not None else "No volume")
            assert lines[2] == (deal.employee or "Unassigned")
            for customer in deal.customers:
                assert customer["last_name"] in card
    # The name is shown as text, not run as markup; and markup written as a string is refused.
    assert page.locator("#board img").count() == 0
    assert page.title() == "dealbase pipeline board"
    assert problems == []
    with pytest.raises(Exception, match="TrustedHTML"):
        page.evaluate("() => { document.getElementById('board').innerHTML = '<b>x</b>'; }")


def test_a_step_with_more_deals_than_cards_says_how_many_more_it_holds(
    board_url: str, world: TenantWorld, open_page: Callable[[], Page]
) -> None:
    with rest_client(board_url, world.key) as rest:
        steps = steps_of(rest)
        deals = [SeedDeal(f"Deal {n:02}", n, "Lead", None, ()) for n in range(1, 23)]
        for deal in deals:
            create_deal(rest, deal, steps)
    page = open_page()

    sign_in_live(page, board_url, world)

    summary, cards = _shown(page)["Lead"]
    assert summary == f"{len(deals)} deals · {sum(deal.volume or 0 for deal in deals):,}"
    shown = len(cards)
    assert 0 < shown < len(deals)
    # The oldest first.
    assert [card.splitlines()[0] for card in cards] == [deal.name for deal in deals[:shown]]
    more = column_of(page, "Lead").locator(".more").inner_text()
    assert more == f"and {len(deals) - shown} more"


def test_the_key_stays_in_the_tabs_session_storage_only(
    board_url: str, world: TenantWorld, open_page: Callable[[], Page]
) -> None:
    page = open_page()
    sign_in_live(page, board_url, world)

    stored = page.evaluate("() => Object.values(sessionStorage)")
    assert world.key.api_key in stored
    assert page.evaluate("() => localStorage.length") == 0
    assert page.context.cookies() == []
    assert world.key.api_key not in page.url
    assert page.get_by_label("API key").input_value() == ""
    # A reload of the tab keeps it; another tab of the same browser never had it.
    page.reload()
    wait_until_live(page)
    other = page.context.new_page()
    other.goto(f"{board_url}/board")
    other.get_by_label("API key").wait_for()
    assert other.evaluate("() => sessionStorage.length") == 0


def test_a_deal_created_through_rest_appears_on_the_board_by_its_announcement(
    board_url: str, world: TenantWorld, open_page: Callable[[], Page]
) -> None:
    page = open_page()
    sign_in_live(page, board_url, world)
    name = f"Created elsewhere {secrets.token_hex(3)}"
    with rest_client(board_url, world.key) as rest:
        steps = steps_of(rest)

        create_deal(rest, SeedDeal(name, 4_200, "Lead", None, ()), steps)
        # Long before the server's periodic read of the department could bring it.
        card_of(page, "Lead", name).wait_for(timeout=WAIT_MS)

    assert column_of(page, "Lead").locator(".summary").inner_text() == "1 deal · 4,200"


def _rest_step(rest: httpx.Client, deal_id: str, expected: str) -> str:
    """The deal's step_id once it is ``expected`` (or the last seen, after a while)."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        response = rest.get(f"/deals/{deal_id}")
        assert response.status_code == 200, response.text
        step_id: str = response.json()["step_id"]
        if step_id == expected or time.monotonic() > deadline:
            return step_id
        time.sleep(0.05)


def test_a_card_dragged_to_another_step_is_there_for_rest_and_in_a_second_browser(
    board_url: str, database: Database, world: TenantWorld, open_page: Callable[[], Page]
) -> None:
    deals = seed(board_url, database, world)
    moving = next(deal for deal in SEEDED if deal.step == "Lead")
    target = "Negotiation"
    mover, watcher = open_page(), open_page()
    for page in (mover, watcher):
        sign_in_live(page, board_url, world)

    card_of(mover, "Lead", moving.name).drag_to(column_of(mover, target))

    with rest_client(board_url, world.key) as rest:
        steps = steps_of(rest)
        assert _rest_step(rest, deals[moving.name]["id"], steps[target]) == steps[target]
    card_of(watcher, target, moving.name).wait_for()
    card_of(watcher, "Lead", moving.name).wait_for(state="detached")
    assert card_of(mover, target, moving.name).count() == 1
    landed = [deal for deal in SEEDED if deal.step == target] + [moving]
    assert column_of(watcher, target).locator(".summary").inner_text() == (
        f"{len(landed)} deals · {sum(deal.volume or 0 for deal in landed):,}"
    )


def _deal_once(graphql: httpx.Client, deal_id: str, version: int) -> tuple[int, str]:
    """The deal's version and step once its version is ``version`` or more (or after a while)."""
    query = "query ($id: UUID!) { deal(id: $id) { version stepId } }"
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        response = graphql.post("/graphql", json={"query": query, "variables": {"id": deal_id}})
        assert response.status_code == 200, response.text
        deal = response.json()["data"]["deal"]
        if deal["version"] >= version or time.monotonic() > deadline:
            return deal["version"], deal["stepId"]
        time.sleep(0.05)


def test_a_focused_card_moves_a_step_with_each_arrow_key_pressed_in_a_row(
    board_url: str, world: TenantWorld, open_page: Callable[[], Page]
) -> None:
    with rest_client(board_url, world.key) as rest:
        steps = steps_of(rest)
        first, second = list(steps)[:2]
        deal = create_deal(rest, SeedDeal("Moved by keys", 100, first, None, ()), steps)
    with httpx.Client(base_url=board_url, headers=world.key.headers, timeout=10) as graphql:
        created, _ = _deal_once(graphql, deal["id"], 0)
        page = open_page()
        sign_in_live(page, board_url, world)

        card_of(page, first, deal["name"]).focus()
        # Each key moves the card from where the key before showed it, before the server
        # answers; the three moves reach the server in the order they were made.
        for key in ("ArrowRight", "ArrowLeft", "ArrowRight"):
            page.keyboard.press(key)

        assert _deal_once(graphql, deal["id"], created + 3) == (created + 3, steps[second])
    card_of(page, second, deal["name"]).wait_for()
    # Still focused, where it went: the next key moves it on.
    assert page.evaluate("() => document.activeElement.dataset.dealId") == deal["id"]


def _alert(page: Page) -> str:
    alert = page.get_by_role("alert")
    alert.wait_for()
    text: str = alert.inner_text()
    return text


def test_a_wrong_key_gets_a_clear_message_and_is_not_kept(
    board_url: str, make_tenant: Callable[..., TenantWorld], open_page: Callable[[], Page]
) -> None:
    world = make_tenant(departments=2)
    never_issued = f"dbk_{secrets.token_hex(16)}_{secrets.token_urlsafe(32)}"
    cases: list[tuple[str, uuid.UUID | None, str]] = [
        (never_issued, world.department.id, "This key was not accepted"),
        # A department key without its department, or naming another.
        (world.key.api_key, None, "a department key also needs its department's id"),
        (world.key.api_key, world.departments[1].id, "does not give access to the department"),
    ]
    page = open_page()

    for api_key, department, expected in cases:
        sign_in(page, board_url, api_key, department)

        assert expected in _alert(page), (api_key, department)
        assert page.get_by_label("API key").is_visible()
        assert page.locator("#board").is_hidden()
        assert page.evaluate("() => sessionStorage.length") == 0


def test_a_tenant_wide_key_chooses_the_department_whose_board_it_shows(
    board_url: str, database: Database, open_page: Callable[[], Page]
) -> None:
    world = build_tenant(database, departments=2)
    second = TenantWorld(world.tenant, world.departments[1:], world.keys[1:])
    seed(board_url, database, second, SEEDED[:2])
    tenant_key = admin.issue_key(database, world.tenant.id, None, "dashboard").api_key
    page = open_page()

    sign_in(page, board_url, tenant_key, None)

    assert "tenant-wide" in _alert(page)
    picker = page.get_by_label("Department", exact=True)
    names = picker.locator("option").all_inner_texts()
    assert sorted(names) == sorted(department.name for department in world.departments)
    picker.select_option(label=second.department.name)
    page.get_by_role("button", name="Show its board").click()
    wait_until_live(page)
    for deal in SEEDED[:2]:
        card_of(page, deal.step, deal.name).wait_for()
    assert page.locator("#department-name").inner_text() == second.department.name
