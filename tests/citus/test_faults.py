"""Faults as a Citus cluster gives them, named for what they are."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from dealbase.db.faults import is_transient


def test_a_worker_refusing_the_role_a_query_runs_as_is_a_permanent_error(citus_url: str) -> None:
    """The coordinator opens its connection to the worker holding a distributed schema as the
    current role; a role that may not log in there is refused for good, though Citus reports it
    as a connection failure (08006) like a worker that is down."""
    name = f"citus_probe_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(citus_url, autocommit=True) as admin:
        admin.execute("SET citus.enable_schema_based_sharding = on")
        admin.execute(f"CREATE SCHEMA {name}")
        admin.execute(f"CREATE TABLE {name}.items (id int)")
        admin.execute(f"CREATE ROLE {name} NOLOGIN")
        admin.execute(f"GRANT USAGE ON SCHEMA {name} TO {name}")
        admin.execute(f"GRANT SELECT ON {name}.items TO {name}")
        try:
            with psycopg.connect(citus_url) as connection:
                connection.execute(f"SET LOCAL ROLE {name}")
                with pytest.raises(psycopg.Error) as raised:
                    connection.execute(f"SELECT * FROM {name}.items")
        finally:
            admin.execute(f"DROP SCHEMA {name} CASCADE")
            admin.execute(f"DROP ROLE {name}")

    assert raised.value.sqlstate == "08006", str(raised.value)
    assert "is not permitted to log in" in str(raised.value)
    assert not is_transient(raised.value)
