"""Each migration test gets a database of its own, so sabotaged tenants never reach other tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dealbase.db.database import Database
from dealbase.migrations.runner import upgrade_control
from tests.support import scratch_database


@pytest.fixture
def empty_database_url(postgres_server: str) -> Iterator[str]:
    """A new database with nothing in it, dropped afterwards."""
    with scratch_database(postgres_server, "migrate") as url:
        yield url


@pytest.fixture
def migrated_database(empty_database_url: str) -> Iterator[Database]:
    """A database of its own with the control schema at head and no tenant yet."""
    database = Database(empty_database_url, pool_size=2)
    with database.control() as connection:
        upgrade_control(connection)
    yield database
    database.dispose()
