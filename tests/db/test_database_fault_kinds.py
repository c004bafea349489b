"""A database error is named for what it is: a fault a retry may outlive (the connection, a
restart, resources, a deadlock) is a 503 with Retry-After; any other error of the server's is
permanent, a 500 whose log line carries the database's own message."""

from __future__ import annotations

import psycopg
import pytest
from fastapi.testclient import TestClient

from dealbase.db.faults import Fault, fault_of, is_transient
from dealbase.edge import problems
from tests.support import TenantWorld, free_port, logs_of, writes_raise

API = "/api/v1/integration"


def _raised(database_url: str, sql: str) -> psycopg.Error:
    with (
        psycopg.connect(database_url, autocommit=True) as connection,
        pytest.raises(psycopg.Error) as raised,
    ):
        connection.execute(sql)
    return raised.value


def _raising(state: str, message: str = "raised by the test") -> str:
    return f"DO $$ BEGIN RAISE EXCEPTION '{message}' USING ERRCODE = '{state}'; END $$"


@pytest.mark.parametrize(
    "state",
    [
        pytest.param("08006", id="connection failure"),
        pytest.param("53300", id="too many connections"),
        pytest.param("57P01", id="admin shutdown"),
        pytest.param("57P03", id="cannot connect now"),
        pytest.param("40001", id="serialization failure"),
        pytest.param("40P01", id="deadlock"),
    ],
)
def test_faults_a_retry_may_outlive_are_transient(database_url: str, state: str) -> None:
    error = _raised(database_url, _raising(state))

    assert error.sqlstate == state
    assert is_transient(error)


@pytest.mark.parametrize(
    "sql",
    [
        pytest.param("SET max_connections = 5", id="55P02, an OperationalError to psycopg"),
        pytest.param(_raising("55000"), id="55000 object not in prerequisite state"),
        pytest.param(_raising("54001"), id="54001 statement too complex"),
        pytest.param(_raising("58P01"), id="58P01 undefined file"),
        pytest.param("SELECT 1/0", id="22012 division by zero"),
        pytest.param("SELECT * FROM no_such_table", id="42P01 undefined table"),
    ],
)
def test_errors_of_the_request_or_of_the_databases_state_are_permanent(
    database_url: str, sql: str
) -> None:
    assert not is_transient(_raised(database_url, sql))


# What Citus 13.2 answers, word for word (seen on a coordinator and two workers): a worker that
# is down, one lost as it was told to commit, and one that refuses the role a connection is
# opened as.
CITUS_WORKER_DOWN = (
    "connection to the remote node postgres@127.0.0.1:9701 failed with the following error:"
    " Connection refused"
)
CITUS_COMMIT_UNCONFIRMED = (
    "could not commit transaction for shard 102027 on at least one active node"
)
CITUS_LOGIN_REFUSED = (
    "connection to the remote node dealbase_owner@127.0.0.1:9701 failed with the following"
    ' error: FATAL:  role "dealbase_owner" is not permitted to log in'
)


def test_a_citus_worker_out_of_reach_is_transient(database_url: str) -> None:
    error = _raised(database_url, _raising("08006", CITUS_WORKER_DOWN))

    assert is_transient(error)


def test_a_citus_worker_lost_as_it_commits_is_transient_and_other_internal_errors_are_not(
    database_url: str,
) -> None:
    lost = _raised(database_url, _raising("XX000", CITUS_COMMIT_UNCONFIRMED))
    other = _raised(database_url, _raising("XX000", "could not find a plan"))

    assert lost.sqlstate == other.sqlstate == "XX000"
    assert is_transient(lost)
    assert not is_transient(other)


def test_a_citus_worker_refusing_the_role_is_permanent(database_url: str) -> None:
    error = _raised(database_url, _raising("08006", CITUS_LOGIN_REFUSED))

    assert error.sqlstate == "08006"
    assert not is_transient(error)


def test_a_connection_the_server_ended_is_transient(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as victim:
        with psycopg.connect(database_url, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", [victim.info.backend_pid])
        with pytest.raises(psycopg.OperationalError) as raised:
            victim.execute("SELECT 1")

    assert is_transient(raised.value)


def test_a_server_that_is_not_there_is_transient() -> None:
    with pytest.raises(psycopg.OperationalError) as raised:
        psycopg.connect(
            f"postgresql://postgres@127.0.0.1:{free_port()}/postgres", connect_timeout=2
        )

    assert raised.value.sqlstate is None
    assert is_transient(raised.value)


def _customer_count(client: TestClient, world: TenantWorld) -> int:
    listed = client.get(f"{API}/customers", params={"limit": 100}, headers=world.key.headers)
    return len(listed.json()["data"])


def test_a_permanent_database_error_answers_500_with_its_request_id_and_logs_the_message(
    client: TestClient, world: TenantWorld, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with (
        writes_raise(database_url, world.tenant.schema, "customers", "55000") as message,
        logs_of(monkeypatch, problems) as logs,
    ):
        response = client.post(
            f"{API}/customers", json={"last_name": "Refused"}, headers=world.key.headers
        )

    assert response.status_code == 500, response.text
    assert "retry-after" not in response.headers
    problem = response.json()
    assert problem["code"] == "internal_error"
    assert problem["request_id"] == response.headers["x-request-id"]
    assert message not in response.text  # the database's words stay in the log
    logged = [entry for entry in logs if entry["event"] == "unhandled_error"]
    assert len(logged) == 1
    assert message in str(logged[0]["exc_info"])
    assert _customer_count(client, world) == 0


def test_a_transient_database_fault_answers_503_with_retry_after(
    client: TestClient, world: TenantWorld, database_url: str
) -> None:
    with writes_raise(database_url, world.tenant.schema, "customers", "57P03"):
        response = client.post(
            f"{API}/customers", json={"last_name": "Later"}, headers=world.key.headers
        )

    assert response.status_code == 503, response.text
    assert response.json()["code"] == "database_unavailable"
    assert int(response.headers["retry-after"]) > 0
    assert _customer_count(client, world) == 0


@pytest.mark.parametrize(
    ("state", "kind"),
    [
        pytest.param("23505", "unique", id="unique"),
        pytest.param("23502", "not_null", id="not null"),
        pytest.param("23503", "foreign_key", id="foreign key"),
        pytest.param("40001", "serialization", id="serialization"),
        pytest.param("55P03", "lock_timeout", id="lock timeout"),
        pytest.param("23514", None, id="a check: no meaning a repository gives"),
        pytest.param("08006", None, id="a connection's fault"),
    ],
)
def test_a_repository_sees_the_drivers_error_as_a_fault_of_its_kind(
    database_url: str, state: str, kind: str | None
) -> None:
    fault = fault_of(_raised(database_url, _raising(state)))

    assert (fault and fault.kind) == kind


def test_a_fault_names_its_table_column_and_constraint(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(
            "CREATE TEMP TABLE faulted (id int NOT NULL CONSTRAINT faulted_key UNIQUE)"
        )
        connection.execute("INSERT INTO faulted VALUES (1)")
        with pytest.raises(psycopg.Error) as raised:
            connection.execute("INSERT INTO faulted VALUES (1)")
        taken = fault_of(raised.value)
        with pytest.raises(psycopg.Error) as raised:
            connection.execute("INSERT INTO faulted VALUES (NULL)")
        missing = fault_of(raised.value)

    assert taken == Fault("unique", "faulted", None, "faulted_key")
    assert missing == Fault("not_null", "faulted", "id", None)
