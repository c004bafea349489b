"""The pipeline board in a real browser: dealbase served over a real socket (uvicorn in a thread,
with the HTTP protocol ``dealbase serve`` gives it), Debian's chromium driven by Playwright, and
a department seeded through REST.

Run as a script, it writes the screenshot of the documentation:

    .venv/bin/python -m tests.ops.board_browser docs/images/board.png

(against DEALBASE_TEST_DATABASE_URL's server, else the tests' embedded one).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from uvicorn import Config, Server

from dealbase.app import create_app
from dealbase.config import Settings
from dealbase.db.database import Database
from dealbase.ops import admin
from tests.support import IN_CI, Credentials, TenantWorld, free_port

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Locator, Page

API = "/api/v1/integration"
# Whatever language the machine speaks, volumes are written as the tests expect (1,250,000).
LOCALE = "en-US"
WAIT_MS = 15_000
# The board's server reads a department without a notice this seldom: what a page shows within
# WAIT_MS came by the change's announcement.
POLL_SECONDS = 3600.0


def chromium() -> str:
    """The system chromium's path. Missing, it or playwright skips the test with what to
    install, except under CI=true, where it fails: CI must run these tests."""
    missing = []
    path = shutil.which("chromium")
    if path is None:
        missing.append("Debian's chromium (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (pip install -e '.[dev]')")
    if path is None or missing:
        message = f"the board's browser tests need {' and '.join(missing)}"
        if IN_CI:
            pytest.fail(f"CI=true, but {message}", pytrace=False)
        pytest.skip(message)
    return path


@contextmanager
def launched_browser(executable: str) -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # The system's chromium: Playwright downloads no browser of its own.
        browser = playwright.chromium.launch(executable_path=executable)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def served(settings: Settings) -> Iterator[str]:
    """The app on a free loopback port until the block ends; yields its base URL."""
    port = free_port()
    config = Config(
        create_app(settings),
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    server = Server(config)
    thread = threading.Thread(target=server.run, name="board-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive(), "the server stopped while starting"
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


@dataclass(frozen=True)
class SeedDeal:
    name: str
    volume: int | None
    step: str
    employee: str | None
    customers: tuple[Mapping[str, str], ...]


# A department's board as a sales team might have it: every step used, deals with and without
# an employee, a volume and customers.
SEEDED = (
    SeedDeal(
        "Analytical engine, 2 units",
        250_000,
        "Lead",
        None,
        ({"first_name": "Ada", "last_name": "Lovelace"},),
    ),
    SeedDeal(
        "Difference engine service",
        48_000,
        "Lead",
        "Dana Mills",
        ({"last_name": "Babbage", "company": "Babbage & Sons"},),
    ),
    SeedDeal(
        "Loom cards, yearly supply",
        12_500,
        "Qualified",
        "Omar Haddad",
        ({"first_name": "Joseph", "last_name": "Jacquard"},),
    ),
    SeedDeal(
        "Tabulating machines",
        730_000,
        "Proposal",
        "Dana Mills",
        (
            {"first_name": "Herman", "last_name": "Hollerith", "company": "TMC"},
            {"first_name": "Grace", "last_name": "Hopper"},
        ),
    ),
    SeedDeal("Slide rules for the lab", None, "Negotiation", None, ()),
    SeedDeal(
        "Relay computer upgrade",
        1_250_000,
        "Won",
        "Omar Haddad",
        ({"first_name": "Konrad", "last_name": "Zuse"},),
    ),
    SeedDeal(
        "Mechanical calculator fleet",
        90_000,
        "Lost",
        "Dana Mills",
        ({"first_name": "Blaise", "last_name": "Pascal"},),
    ),
)


def rest_client(base_url: str, credentials: Credentials) -> httpx.Client:
    """The REST API as the key's integration calls it (one connection for every call)."""
    return httpx.Client(base_url=f"{base_url}{API}", headers=credentials.headers, timeout=10)


def steps_of(rest: httpx.Client) -> dict[str, str]:
    """The department's step ids by name."""
    response = rest.get("/steps")
    assert response.status_code == 200, response.text
    return {step["name"]: step["id"] for step in response.json()["data"]}


def create_deal(rest: httpx.Client, deal: SeedDeal, steps: Mapping[str, str]) -> dict[str, Any]:
    """The deal created and placed through REST, as REST then answers it."""
    body: dict[str, Any] = {"name": deal.name, "customers": list(deal.customers)}
    if deal.volume is not None:
        body["volume"] = deal.volume
    response = rest.post("/deals", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    if created["step_id"] == steps[deal.step]:
        return created
    response = rest.patch(f"/deals/{created['id']}", json={"step_id": steps[deal.step]})
    assert response.status_code == 200, response.text
    placed: dict[str, Any] = response.json()
    return placed


def seed(
    base_url: str, database: Database, world: TenantWorld, deals: tuple[SeedDeal, ...] = SEEDED
) -> dict[str, dict[str, Any]]:
    """``deals`` in the world's first department, each assigned to its employee (made here);
    REST's answers by deal name."""
    employees: dict[str, uuid.UUID] = {}
    made = {}
    with rest_client(base_url, world.key) as rest:
        steps = steps_of(rest)
        for deal in deals:
            created = create_deal(rest, deal, steps)
            if deal.employee is not None:
                if deal.employee not in employees:
                    employees[deal.employee] = admin.create_employee(
                        database, world.tenant.id, world.department.id, deal.employee, None
                    ).id
                response = rest.patch(
                    f"/deals/{created['id']}", json={"employee_id": str(employees[deal.employee])}
                )
                assert response.status_code == 200, response.text
                created = response.json()
            made[deal.name] = created
    return made


def sign_in(page: Page, base_url: str, api_key: str, department: uuid.UUID | None) -> None:
    """Opens the board and pastes the key (and the department id, when given)."""
    page.goto(f"{base_url}/board")
    page.get_by_label("API key").fill(api_key)
    if department is not None:
        page.get_by_label("Department id").fill(str(department))
    page.get_by_role("button", name="Open the board").click()


def wait_until_live(page: Page) -> None:
    """Returns once the subscription has delivered the board."""
    page.get_by_role("status").filter(has_text="Live").wait_for(timeout=15_000)


def sign_in_live(page: Page, base_url: str, world: TenantWorld) -> None:
    """Signs in with the world's department key; returns once the board is live."""
    sign_in(page, base_url, world.key.api_key, world.department.id)
    wait_until_live(page)


def column_of(page: Page, step: str) -> Locator:
    return page.get_by_role("region", name=step, exact=True)


def card_of(page: Page, step: str, deal: str) -> Locator:
    return (
        column_of(page, step)
        .locator(".card")
        .filter(has=page.get_by_role("heading", name=deal, exact=True))
    )


# The screenshot's custom fields of deals, Region and Priority: each seeded deal's values, in
# SEEDED's order.
_REGIONS = ("EMEA", "Americas", "EMEA", "APAC", "EMEA", "Americas", "APAC")
_PRIORITIES = ("High", "Low", "Low", "High", None, "High", "Low")


def _define_shown_fields(
    base_url: str, database: Database, world: TenantWorld, made: dict[str, dict[str, Any]]
) -> None:
    """The screenshot's fields defined (a text and a select) and set on the seeded deals."""
    tenant_key = admin.issue_key(database, world.tenant.id, None, "fields").api_key
    with httpx.Client(base_url=f"{base_url}{API}", headers={"X-Api-Key": tenant_key}) as fields:
        region = {"record": "deal", "name": "region", "label": "Region", "type": "text"}
        fields.post("/custom-fields", json=region).raise_for_status()
        priority = {**region, "name": "priority", "label": "Priority", "type": "single_select"}
        options = [{"label": "High"}, {"label": "Low"}]
        answer = fields.post("/custom-fields", json={**priority, "options": options})
        answer.raise_for_status()
    option_ids = {option["label"]: option["id"] for option in answer.json()["options"]}
    with rest_client(base_url, world.key) as rest:
        for deal, region_of, priority_of in zip(made.values(), _REGIONS, _PRIORITIES, strict=True):
            values = {"region": region_of, "priority": priority_of and option_ids[priority_of]}
            response = rest.patch(f"/deals/{deal['id']}", json={"custom_fields": values})
            response.raise_for_status()


def _write_screenshot(target: Path) -> None:
    from dealbase.migrations.runner import upgrade_control
    from dealbase.tenancy.registry.tenants import create_tenant
    from tests.conftest import EMBEDDED_POSTGRES_DIR
    from tests.support import scratch_database, server_url

    with (
        tempfile.TemporaryDirectory() as data_dir,
        scratch_database(server_url(EMBEDDED_POSTGRES_DIR), "board") as url,
    ):
        database = Database(url, pool_size=2)
        with database.control() as connection:
            upgrade_control(connection)
        tenant = create_tenant(database, "analytical-engines")
        department = admin.create_department(database, tenant.id, "Sales, London")
        key = admin.issue_key(database, tenant.id, department.id, "board")
        world = TenantWorld(
            tenant, (department,), (Credentials(key.key_id, key.api_key, department.id),)
        )
        settings = Settings(database_url=url, data_dir=Path(data_dir), log_level="warning")
        with served(settings) as base_url, launched_browser(chromium()) as browser:
            _define_shown_fields(base_url, database, world, seed(base_url, database, world))
            page = browser.new_page(viewport={"width": 1560, "height": 400}, locale=LOCALE)
            sign_in(page, base_url, world.key.api_key, world.department.id)
            wait_until_live(page)
            page.get_by_text("Card fields", exact=True).click()
            for label in ("Region", "Priority"):
                page.get_by_label(label, exact=True).check()
            page.screenshot(path=str(target), full_page=True)
            page.close()
        database.dispose()


if __name__ == "__main__":
    _write_screenshot(Path(sys.argv[1]))
