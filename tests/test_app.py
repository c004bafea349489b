"""The app's own start-up: what ``create_app`` does once its lifespan has begun."""

from __future__ import annotations

import gc
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from dealbase.app import create_app
from dealbase.config import Settings
from tests.support import TenantWorld

API = "/api/v1/integration"
UNKNOWN = uuid.UUID("01a23628-0000-7000-8000-000000000000")


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The garbage collector's permanent generation as it was: this process builds many apps."""
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_an_app_told_to_freeze_its_startup_objects_freezes_them_once_started(
    settings: Settings,
) -> None:
    app = create_app(settings.model_copy(update={"freeze_startup_objects": True}))
    assert gc.get_freeze_count() == 0
    with TestClient(app) as client:
        assert gc.get_freeze_count() > 10_000
        assert client.get("/healthz").status_code == 200


def test_an_app_told_a_young_threshold_collects_by_it_while_it_runs_and_puts_back_the_one_before(
    settings: Settings,
) -> None:
    before = gc.get_threshold()
    app = create_app(settings.model_copy(update={"gc_young_threshold": before[0] + 1_234}))
    with TestClient(app) as client:
        assert gc.get_threshold() == (before[0] + 1_234, *before[1:])
        assert client.get("/healthz").status_code == 200
    assert gc.get_threshold() == before


def test_an_app_keeps_the_collectors_thresholds_by_default(settings: Settings) -> None:
    before = gc.get_threshold()
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200
        assert gc.get_threshold() == before


@pytest.mark.usefixtures("unfrozen")
def test_an_app_freezes_nothing_by_default(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200
        assert gc.get_freeze_count() == 0


def _exchange(client: TestClient, world: TenantWorld) -> list[tuple[int, list[str], object]]:
    """A create, its read, a page, a refusal of each kind: statuses, header names and bodies
    without the ids and times that differ from one app to the other."""
    headers = world.key.headers
    created = client.post(f"{API}/customers", json={"last_name": "Lovelace"}, headers=headers)
    location = created.headers["location"]
    answers = [
        created,
        client.get(location, headers=headers),
        client.get(f"{API}/customers?limit=1", headers=headers),
        client.get(f"{API}/customers/{UNKNOWN}", headers=headers),
        client.post(f"{API}/customers", json={"last_name": ""}, headers=headers),
        client.post(f"{API}/customers", json={"last_name": "Byron"}),
        client.delete(f"{API}/customers", headers=headers),
        client.get(f"{API}/nowhere", headers=headers),
    ]
    volatile = {"id", "created_at", "updated_at", "request_id", "next_cursor", "customer_number"}

    def steady(body: object) -> object:
        if isinstance(body, dict):
            return {key: steady(value) for key, value in body.items() if key not in volatile}
        if isinstance(body, list):
            return [steady(item) for item in body]
        return body

    return [
        (answer.status_code, sorted(answer.headers.keys()), steady(answer.json()))
        for answer in answers
    ]


def test_the_route_shortcuts_answer_as_fastapis_own_routing_does(
    settings: Settings, world: TenantWorld
) -> None:
    with TestClient(create_app(settings)) as client:
        shortcut = _exchange(client, world)
    plain_settings = settings.model_copy(update={"route_shortcuts": False})
    with TestClient(create_app(plain_settings)) as client:
        plain = _exchange(client, world)

    assert [status for status, _, _ in shortcut] == [201, 200, 200, 404, 422, 401, 405, 404]
    assert shortcut == plain
