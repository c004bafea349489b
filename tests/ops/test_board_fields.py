"""The board's cards show the custom fields of deals the user chooses (none until one is), each
by its label and its value as a person reads it (a select by its option's label, a date in the
page's language), kept live as values change through REST, and the choice kept in the tab."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx

from dealbase.db.database import Database
from dealbase.ops import admin
from tests.ops.board_browser import API, card_of, rest_client, sign_in_live, wait_until_live
from tests.support import TenantWorld

if TYPE_CHECKING:
    from playwright.sync_api import ConsoleMessage, Locator, Page

CHOOSER = "The custom fields each card shows"


def _define(tenant_wide: httpx.Client, **body: Any) -> dict[str, Any]:
    """A deal field defined through REST with a tenant-wide key; as REST answers it."""
    response = tenant_wide.post("/custom-fields", json={"record": "deal", **body})
    assert response.status_code == 201, response.text
    field: dict[str, Any] = response.json()
    return field


def _admin(board_url: str, database: Database, world: TenantWorld) -> httpx.Client:
    key = admin.issue_key(database, world.tenant.id, None, "fields").api_key
    return httpx.Client(base_url=f"{board_url}{API}", headers={"X-Api-Key": key}, timeout=10)


def _create(rest: httpx.Client, name: str, values: dict[str, Any]) -> dict[str, Any]:
    """A deal with custom values, created through REST (in the first step, Lead)."""
    response = rest.post("/deals", json={"name": name, "custom_fields": values})
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _card_fields(page: Page, deal: str) -> list[str]:
    """The custom fields the deal's card in Lead shows, each as "label: value" (with the spaces
    a date's format may write as narrow no-break spaces as plain ones)."""
    rows: list[list[str]] = (
        card_of(page, "Lead", deal)
        .locator(".fields div")
        .evaluate_all(
            "rows => rows.map((row) => [...row.children].map((each) => each.textContent))"
        )
    )
    return [f"{label}: {' '.join(value.split())}" for label, value in rows]


def _open_chooser(page: Page) -> Locator:
    page.get_by_text("Card fields", exact=True).click()
    return page.get_by_role("group", name=CHOOSER)


def test_a_card_shows_its_chosen_custom_fields_by_label_a_select_by_its_options_label(
    board_url: str, database: Database, world: TenantWorld, open_page: Callable[[], Page]
) -> None:
    with _admin(board_url, database, world) as fields:
        _define(fields, name="region", label="Region", type="text")
        stage = _define(
            fields,
            name="stage",
            label="Stage",
            type="single_select",
            options=[{"label": "Gold"}, {"label": "Silver"}],
        )
        tags = _define(
            fields,
            name="tags",
            label="Tags",
            type="multi_select",
            options=[{"label": "Alpha"}, {"label": "Beta"}],
        )
        _define(fields, name="renewal", label="Renewal", type="date")
        _define(fields, name="signed_at", label="Signed at", type="timestamp")
        _define(fields, name="vip", label="VIP", type="boolean")
        _define(fields, name="revenue", label="Revenue", type="decimal")
        _define(fields, name="notes", label="Notes", type="text")
        _define(fields, name="seats", label="Seats", type="integer")
    gold, alpha, beta = stage["options"][0]["id"], *(option["id"] for option in tags["options"])
    with rest_client(board_url, world.key) as rest:
        _create(
            rest,
            "Engine",
            {
                "region": "EMEA",
                "stage": gold,
                "tags": [beta, alpha],
                "renewal": "2027-01-31",
                "signed_at": "2026-12-01T10:00:00Z",
                "vip": True,
                "revenue": "1234.50",
                "seats": 1200,
            },
        )
        _create(rest, "Plain", {"vip": False})
    page = open_page()
    problems: list[str] = []

    def note_console(message: ConsoleMessage) -> None:
        # A script error, or a file or style the page's policy refuses, is a console error.
        if message.type == "error":
            problems.append(message.text)

    page.on("console", note_console)
    page.on("pageerror", lambda error: problems.append(str(error)))
    sign_in_live(page, board_url, world)

    chooser = _open_chooser(page)
    labels = chooser.get_by_role("checkbox").evaluate_all(
        "boxes => boxes.map((box) => box.labels[0].textContent)"
    )
    assert labels == [
        "Region", "Stage", "Tags", "Renewal", "Signed at", "VIP", "Revenue", "Notes", "Seats"
    ]  # fmt: skip
    for label in labels[:-1]:
        chooser.get_by_label(label, exact=True).check()

    # In the definitions' order; Notes has no value and Seats is not chosen: no line for them.
    assert _card_fields(page, "Engine") == [
        "Region: EMEA",
        "Stage: Gold",
        "Tags: Beta, Alpha",
        "Renewal: Jan 31, 2027",
        "Signed at: Dec 1, 2026, 10:00 AM",
        "VIP: yes",
        "Revenue: 1234.50",
    ]
    assert _card_fields(page, "Plain") == ["VIP: no"]
    # The choice is the tab's: a reload keeps it, and nothing is kept beyond the tab.
    page.reload()
    wait_until_live(page)
    card_of(page, "Lead", "Engine").locator(".fields").wait_for()
    assert _card_fields(page, "Plain") == ["VIP: no"]
    assert page.evaluate("() => localStorage.length") == 0
    assert problems == []


def test_a_card_shows_no_custom_field_until_one_is_chosen_nor_once_it_is_unchosen(
    board_url: str, database: Database, world: TenantWorld, open_page: Callable[[], Page]
) -> None:
    with _admin(board_url, database, world) as fields:
        _define(fields, name="region", label="Region", type="text")
        _define(fields, name="zone", label="Zone", type="text")
    with rest_client(board_url, world.key) as rest:
        _create(rest, "Engine", {"region": "EMEA", "zone": "North"})
    page = open_page()
    sign_in_live(page, board_url, world)
    summary = page.get_by_text("Card fields", exact=True)
    summary.wait_for()

    assert card_of(page, "Lead", "Engine").locator(".fields").count() == 0
    # By the keyboard alone: the list opens with Enter, and Space checks its first field.
    summary.focus()
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    page.keyboard.press("Space")
    assert _card_fields(page, "Engine") == ["Region: EMEA"]
    page.get_by_label("Region", exact=True).uncheck()
    assert card_of(page, "Lead", "Engine").locator(".fields").count() == 0
    assert page.evaluate("() => sessionStorage.getItem('dealbase.board.fields')") is None


def test_a_custom_value_changed_through_rest_shows_on_its_card_live(
    board_url: str, database: Database, world: TenantWorld, open_page: Callable[[], Page]
) -> None:
    with _admin(board_url, database, world) as fields:
        _define(fields, name="region", label="Region", type="text")
        stage = _define(
            fields,
            name="stage",
            label="Stage",
            type="single_select",
            options=[{"label": "Gold"}, {"label": "Silver"}],
        )
    gold, silver = (option["id"] for option in stage["options"])
    with rest_client(board_url, world.key) as rest:
        deal = _create(rest, "Engine", {"region": "EMEA", "stage": gold})
        page = open_page()
        sign_in_live(page, board_url, world)
        chooser = _open_chooser(page)
        for label in ("Region", "Stage"):
            chooser.get_by_label(label, exact=True).check()
        assert _card_fields(page, "Engine") == ["Region: EMEA", "Stage: Gold"]
        values = card_of(page, "Lead", "Engine").locator(".fields dd")

        changed = {"custom_fields": {"region": "APAC", "stage": silver}}
        response = rest.patch(f"/deals/{deal['id']}", json=changed)
        assert response.status_code == 200, response.text
        values.filter(has_text="APAC").wait_for()
        assert _card_fields(page, "Engine") == ["Region: APAC", "Stage: Silver"]

        response = rest.patch(f"/deals/{deal['id']}", json={"custom_fields": {"region": None}})
        assert response.status_code == 200, response.text
        values.filter(has_text="APAC").wait_for(state="detached")
        assert _card_fields(page, "Engine") == ["Stage: Silver"]


def test_a_field_defined_after_the_board_opened_is_offered_once_a_card_shows_it(
    board_url: str, database: Database, world: TenantWorld, open_page: Callable[[], Page]
) -> None:
    page = open_page()
    sign_in_live(page, board_url, world)
    summary = page.get_by_text("Card fields", exact=True)
    assert summary.is_hidden()

    with _admin(board_url, database, world) as fields:
        stage = _define(
            fields, name="stage", label="Stage", type="single_select", options=[{"label": "Gold"}]
        )
    with rest_client(board_url, world.key) as rest:
        _create(rest, "Engine", {"stage": stage["options"][0]["id"]})

    _open_chooser(page).get_by_label("Stage", exact=True).check()
    assert _card_fields(page, "Engine") == ["Stage: Gold"]
