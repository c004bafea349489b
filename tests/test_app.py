"""The app's own start-up: what ``create_app`` does once its lifespan has begun."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from dealbase.app import create_app
from dealbase.config import Settings


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
