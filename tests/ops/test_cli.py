"""The ``dealbase`` command, run in-process against real PostgreSQL: its JSON output and its errors."""

from __future__ import annotations

import hashlib
import re
import secrets
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from dealbase.config import load_settings
from dealbase.db.database import Database
from dealbase.graphql_api.live.protocol import MAX_MESSAGE_BYTES
from dealbase.ops import admin, serving
from dealbase.ops.cli.top_level import SERVER_GC_YOUNG_THRESHOLD
from dealbase.tenancy.callers.api_keys import parse_api_key
from dealbase.tenancy.callers.authentication import KeyCache
from dealbase.tenancy.callers.key_usage import record_uses
from dealbase.tenancy.control_tables import api_keys
from dealbase.tenancy.scope import schema_for_tenant
from tests.ops.conftest import CliRun, RunCli, invoke_cli
from tests.support import TenantWorld, scratch_database, writes_raise

UNKNOWN = str(uuid.UUID(int=0x5EED))
TIMESTAMP_SHAPE = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$"
# How long a key change may take to reach the running server's key cache before a test fails:
# a bound for failing, not a margin to pass (PostgreSQL's notice takes milliseconds). The
# one-second promise is tests/ops/test_serve.py's.
NOTICE_TIMEOUT_S = 30.0


def _unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(5)}"


def _headers(api_key: str, department_id: str) -> dict[str, str]:
    return {"X-Api-Key": api_key, "X-Department-Id": department_id}


def _create_customer_status(client: TestClient, api_key: str, department_id: str) -> int:
    response = client.post(
        "/api/v1/integration/customers",
        json={"last_name": "Hopper"},
        headers=_headers(api_key, department_id),
    )
    status: int = response.status_code
    return status


def _key_cache(client: TestClient) -> KeyCache:
    cache: KeyCache = client.app.state.authenticator.cache  # type: ignore[attr-defined]
    return cache


def _wait_until_the_server_drops(client: TestClient, key_id: str) -> None:
    """Returns once the running server has heard of the key's change and dropped what it had
    cached of it."""
    deadline = time.monotonic() + NOTICE_TIMEOUT_S
    while _key_cache(client).get(uuid.UUID(key_id)) is not None:
        assert time.monotonic() < deadline, f"the server still caches the key {key_id}"
        time.sleep(0.01)


def _assert_one_line_failure(run: CliRun) -> None:
    assert run.exit_code in (1, 2), str(run)
    assert not run.crashed, str(run)
    assert "Traceback" not in run.stdout + run.stderr, str(run)
    assert run.stdout == "", str(run)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, str(run)
    assert lines[0].strip(), str(run)


def _tenant(run_cli: RunCli) -> dict[str, Any]:
    created: dict[str, Any] = run_cli("tenant", "create", _unique("cli"), "--json").json()
    return created


def _department(run_cli: RunCli, tenant_id: str, name: str = "Sales") -> dict[str, Any]:
    created: dict[str, Any] = run_cli(
        "department", "create", "--tenant", tenant_id, name, "--json"
    ).json()
    return created


def _issue(run_cli: RunCli, tenant_id: str, department_id: str, *extra: str) -> CliRun:
    return run_cli(
        "key", "issue", "--tenant", tenant_id, "--department", department_id, *extra, "--json"
    )


def _key(run_cli: RunCli, tenant_id: str, department_id: str, *extra: str) -> dict[str, Any]:
    issued: dict[str, Any] = _issue(run_cli, tenant_id, department_id, *extra).json()
    return issued


def _tenant_and_department(run_cli: RunCli) -> tuple[dict[str, Any], dict[str, Any]]:
    tenant = _tenant(run_cli)
    return tenant, _department(run_cli, tenant["id"])


def _tenant_department_and_key(
    run_cli: RunCli,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    tenant, department = _tenant_and_department(run_cli)
    return tenant, department, _key(run_cli, tenant["id"], department["id"])


@pytest.mark.parametrize("group", [(), ("tenant",), ("department",), ("employee",), ("key",)])
def test_a_group_named_without_a_command_answers_with_its_help(
    run_cli: RunCli, group: tuple[str, ...]
) -> None:
    run = run_cli(*group)

    assert (run.exit_code, run.stderr) == (0, ""), str(run)
    assert " ".join((*group, "[OPTIONS] COMMAND [ARGS]...")) in run.stdout, str(run)


def test_tenant_create_json_prints_exactly_id_name_and_schema(run_cli: RunCli) -> None:
    name = _unique("acme")
    run = run_cli("tenant", "create", name, "--json")

    created = run.json()
    assert set(created) == {"id", "name", "schema"}
    assert created["name"] == name
    assert created["schema"] == schema_for_tenant(uuid.UUID(created["id"]))
    assert run.stdout.count("\n") == 1, "exactly one JSON value, on one line"


def test_tenant_create_refuses_a_duplicate_name_in_one_line(run_cli: RunCli) -> None:
    name = _unique("twice")
    run_cli("tenant", "create", name, "--json").json()

    _assert_one_line_failure(run_cli("tenant", "create", name, "--json"))


def test_tenant_list_json_is_an_array_holding_each_created_tenant(run_cli: RunCli) -> None:
    first, second = _tenant(run_cli), _tenant(run_cli)

    listed = run_cli("tenant", "list", "--json").json()

    assert isinstance(listed, list)
    by_id = {item["id"]: item for item in listed}
    for created in (first, second):
        assert {key: by_id[created["id"]][key] for key in ("id", "name", "schema")} == created


def test_department_create_json_has_id_name_and_steps_at_positions_one_to_n(
    run_cli: RunCli,
) -> None:
    tenant = _tenant(run_cli)

    department = _department(run_cli, tenant["id"], "Field sales")

    assert set(department) == {"id", "name", "steps"}
    assert department["name"] == "Field sales"
    uuid.UUID(department["id"])
    steps = department["steps"]
    assert len(steps) >= 1
    assert all(set(step) == {"id", "name", "position"} for step in steps)
    assert [step["position"] for step in steps] == list(range(1, len(steps) + 1))
    assert len({step["id"] for step in steps}) == len(steps)


def test_new_deals_start_at_the_first_step_the_cli_printed(
    run_cli: RunCli, client: TestClient
) -> None:
    _, department, key = _tenant_department_and_key(run_cli)

    response = client.post(
        "/api/v1/integration/deals",
        json={"name": "Pilot", "customers": [{"last_name": "Liskov"}]},
        headers=_headers(key["api_key"], department["id"]),
    )

    assert response.status_code == 201, response.text
    first_step = next(step for step in department["steps"] if step["position"] == 1)
    assert response.json()["step_id"] == first_step["id"]


@pytest.mark.parametrize("email", ["grace@example.com", None])
def test_employee_create_json_has_exactly_id_name_email_and_department_id(
    run_cli: RunCli, email: str | None
) -> None:
    tenant, department = _tenant_and_department(run_cli)
    email_args = ("--email", email) if email else ()

    employee = run_cli(
        "employee",
        "create",
        "--tenant",
        tenant["id"],
        "--department",
        department["id"],
        "Grace Hopper",
        *email_args,
        "--json",
    ).json()

    assert set(employee) == {"id", "name", "email", "department_id"}
    uuid.UUID(employee["id"])
    assert employee["name"] == "Grace Hopper"
    assert employee["email"] == email
    assert employee["department_id"] == department["id"]


def test_key_issue_json_has_exactly_the_documented_keys_and_the_key_authenticates(
    run_cli: RunCli, client: TestClient
) -> None:
    tenant, department = _tenant_and_department(run_cli)

    issued = _key(run_cli, tenant["id"], department["id"], "--name", "crm sync")

    assert set(issued) == {"key_id", "api_key", "tenant_id", "department_id"}
    uuid.UUID(issued["key_id"])
    assert issued["tenant_id"] == tenant["id"]
    assert issued["department_id"] == department["id"]
    assert _create_customer_status(client, issued["api_key"], department["id"]) == 201


def test_key_list_json_lists_every_key_and_never_a_secret(run_cli: RunCli) -> None:
    tenant, department = _tenant_and_department(run_cli)
    issued = [_key(run_cli, tenant["id"], department["id"], "--name", name) for name in ("a", "b")]

    run = run_cli("key", "list", "--tenant", tenant["id"], "--json")

    listed = run.json()
    assert isinstance(listed, list)
    assert sorted(item["key_id"] for item in listed) == sorted(k["key_id"] for k in issued)
    for key in issued:
        # The secret is what follows the key id; it may itself contain "_" (URL-safe base64).
        parsed = parse_api_key(key["api_key"])
        assert parsed is not None
        secret = parsed[1]
        assert key["api_key"] not in run.stdout
        assert secret not in run.stdout
    assert all("api_key" not in item and "secret_hash" not in item for item in listed)


def test_key_revoke_refuses_the_key_on_a_running_server_that_cached_it(
    run_cli: RunCli, client: TestClient
) -> None:
    tenant, department, key = _tenant_department_and_key(run_cli)
    assert _create_customer_status(client, key["api_key"], department["id"]) == 201
    assert _key_cache(client).get(uuid.UUID(key["key_id"])) is not None, "the server caches it"

    revoked = run_cli("key", "revoke", key["key_id"], "--json").json()

    _wait_until_the_server_drops(client, key["key_id"])
    assert _create_customer_status(client, key["api_key"], department["id"]) == 401
    assert revoked["key_id"] == key["key_id"]
    listed = run_cli("key", "list", "--tenant", tenant["id"], "--json").json()
    assert [item["revoked_at"] is not None for item in listed] == [True]


def test_key_rotate_without_grace_gives_a_new_secret_and_refuses_the_old_one(
    run_cli: RunCli, client: TestClient
) -> None:
    _, department, key = _tenant_department_and_key(run_cli)
    assert _create_customer_status(client, key["api_key"], department["id"]) == 201

    rotated = run_cli("key", "rotate", key["key_id"], "--grace-seconds", "0", "--json").json()

    assert rotated["key_id"] == key["key_id"]
    assert rotated["api_key"] != key["api_key"]
    _wait_until_the_server_drops(client, key["key_id"])
    assert _create_customer_status(client, key["api_key"], department["id"]) == 401
    assert _create_customer_status(client, rotated["api_key"], department["id"]) == 201


def test_key_rotate_with_grace_keeps_the_old_secret_working_for_the_grace_period(
    run_cli: RunCli, client: TestClient, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant, department, key = _tenant_department_and_key(run_cli)

    rotated = run_cli("key", "rotate", key["key_id"], "--grace-seconds", "60", "--json").json()

    # The server judges the grace on its authenticator's clock, set here to the moment meant:
    # the grace ends 60 s after the rotation, by the database's clock that wrote both.
    (info,) = (
        k
        for k in admin.list_keys(database, uuid.UUID(tenant["id"]))
        if k.key_id == uuid.UUID(key["key_id"])
    )
    assert info.rotated_at is not None
    authenticator = client.app.state.authenticator  # type: ignore[attr-defined]
    grace_ends = info.rotated_at + timedelta(seconds=60)
    monkeypatch.setattr(authenticator, "now", lambda: grace_ends - timedelta(microseconds=1))
    assert _create_customer_status(client, rotated["api_key"], department["id"]) == 201
    assert _create_customer_status(client, key["api_key"], department["id"]) == 201
    monkeypatch.setattr(authenticator, "now", lambda: grace_ends)
    assert _create_customer_status(client, key["api_key"], department["id"]) == 401
    assert _create_customer_status(client, rotated["api_key"], department["id"]) == 201


def test_key_rotate_of_a_revoked_key_fails_in_one_line(run_cli: RunCli) -> None:
    _, _, key = _tenant_department_and_key(run_cli)
    run_cli("key", "revoke", key["key_id"], "--json").json()

    _assert_one_line_failure(run_cli("key", "rotate", key["key_id"], "--json"))


def _secret(api_key: str) -> str:
    # The secret is what follows the key id; it may itself contain "_" (URL-safe base64).
    parsed = parse_api_key(api_key)
    assert parsed is not None
    return parsed[1]


def _parse_timestamp(value: str) -> datetime:
    assert re.match(TIMESTAMP_SHAPE, value), value
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_key_issue_expires_in_sets_the_expiry_that_key_list_shows(run_cli: RunCli) -> None:
    tenant, department = _tenant_and_department(run_cli)
    before = datetime.now(UTC)

    issued = _key(run_cli, tenant["id"], department["id"], "--expires-in", "90d")
    for_hours = _key(run_cli, tenant["id"], department["id"], "--expires-in", "12h")
    for_minutes = _key(run_cli, tenant["id"], department["id"], "--expires-in", "30m")
    forever = _key(run_cli, tenant["id"], department["id"])

    listed = {
        k["key_id"]: k for k in run_cli("key", "list", "--tenant", tenant["id"], "--json").json()
    }
    expected = {
        issued["key_id"]: timedelta(days=90),
        for_hours["key_id"]: timedelta(hours=12),
        for_minutes["key_id"]: timedelta(minutes=30),
    }
    for key_id, lifetime in expected.items():
        expires_at = _parse_timestamp(listed[key_id]["expires_at"])
        assert before + lifetime <= expires_at <= datetime.now(UTC) + lifetime, key_id
    assert listed[forever["key_id"]]["expires_at"] is None


@pytest.mark.parametrize(
    "lifetime",
    [
        "0d",
        "0m",
        "-1d",
        "-90d",
        "soon",
        "90",
        "d",
        "1.5d",
        "90 d",
        "90s",
        "1w",
        "1827d",
        "43801h",
        "99999999d",
        "",
    ],
)
def test_key_issue_refuses_a_lifetime_that_is_not_positive_whole_units_up_to_five_years(
    run_cli: RunCli, world: TenantWorld, lifetime: str
) -> None:
    run = _issue(run_cli, str(world.tenant.id), str(world.department.id), "--expires-in", lifetime)

    _assert_one_line_failure(run)
    assert run.exit_code == 2, str(run)
    assert "--expires-in" in run.stderr, str(run)


def test_key_list_shows_state_last_use_and_expiry(run_cli: RunCli, database: Database) -> None:
    tenant, department = _tenant_and_department(run_cli)
    used = _key(run_cli, tenant["id"], department["id"], "--name", "used", "--expires-in", "1d")
    expired = _key(run_cli, tenant["id"], department["id"], "--name", "expired")
    revoked = _key(run_cli, tenant["id"], department["id"], "--name", "revoked")
    run_cli("key", "revoke", revoked["key_id"], "--json").json()
    last_use = datetime(2026, 11, 23, 9, 30, 15, 123456, tzinfo=UTC)
    with database.control() as connection:
        record_uses(connection, {uuid.UUID(used["key_id"]): last_use})
        connection.execute(
            update(api_keys)
            .where(api_keys.c.id == uuid.UUID(expired["key_id"]))
            .values(expires_at=func.now() - timedelta(seconds=1))
        )

    listed = run_cli("key", "list", "--tenant", tenant["id"], "--json").json()
    human = run_cli("key", "list", "--tenant", tenant["id"])

    assert all(
        set(item)
        == {
            "key_id",
            "name",
            "tenant_id",
            "department_id",
            "created_at",
            "rotated_at",
            "revoked_at",
            "rate",
            "expires_at",
            "last_used_at",
        }
        for item in listed
    )
    by_name = {item["name"]: item for item in listed}
    assert by_name["used"]["last_used_at"] == "2026-11-23T09:30:15.123456Z"
    assert by_name["expired"]["last_used_at"] is None
    lines = {line.split()[-1]: line for line in human.stdout.splitlines()}
    assert human.exit_code == 0 and set(lines) == {"used", "expired", "revoked"}, str(human)
    assert lines["used"].split()[:5] == [
        used["key_id"],
        "active",
        "last",
        "used",
        "2026-11-23T09:30:15.123456Z",
    ]
    assert f"expires {by_name['used']['expires_at']}" in lines["used"]
    assert lines["expired"].split()[:5] == [expired["key_id"], "expired", "last", "used", "never"]
    assert lines["revoked"].split()[1] == "revoked"
    assert "expires never" in lines["revoked"]


def test_key_reset_prints_a_new_key_once_and_a_running_server_refuses_the_old_ones(
    run_cli: RunCli, client: TestClient
) -> None:
    _, department, key = _tenant_department_and_key(run_cli)
    assert _create_customer_status(client, key["api_key"], department["id"]) == 201

    run = run_cli("key", "reset", key["key_id"])
    reset = run_cli("key", "reset", key["key_id"], "--json").json()

    lines = run.stdout.splitlines()
    assert run.exit_code == 0 and lines[0] == f"key {key['key_id']}", str(run)
    assert re.fullmatch(r"new api key \(shown once\): dbk_[0-9a-f]{32}_\S{43}", lines[1]), str(run)
    assert set(reset) == {"key_id", "api_key", "tenant_id", "department_id"}
    assert reset["key_id"] == key["key_id"]
    _wait_until_the_server_drops(client, key["key_id"])
    for older in (key["api_key"], lines[1].rsplit(" ", 1)[1]):
        assert _create_customer_status(client, older, department["id"]) == 401
    assert _create_customer_status(client, reset["api_key"], department["id"]) == 201


def test_key_reset_of_a_revoked_key_fails_in_one_line(run_cli: RunCli) -> None:
    _, _, key = _tenant_department_and_key(run_cli)
    run_cli("key", "revoke", key["key_id"], "--json").json()

    run = run_cli("key", "reset", key["key_id"], "--json")

    _assert_one_line_failure(run)
    assert "revoked" in run.stderr


def test_key_audit_lists_every_change_oldest_first_and_never_a_secret(
    run_cli: RunCli, database: Database
) -> None:
    tenant, department = _tenant_and_department(run_cli)
    key = _key(
        run_cli,
        tenant["id"],
        department["id"],
        "--name",
        "crm",
        "--expires-in",
        "7d",
        "--rate",
        "5/s",
        "--burst",
        "10",
    )
    run_cli("key", "update", key["key_id"], "--rate", "2/s", "--burst", "4", "--json").json()
    rotated = run_cli("key", "rotate", key["key_id"], "--grace-seconds", "30", "--json").json()
    reset = run_cli("key", "reset", key["key_id"], "--json").json()
    run_cli("key", "revoke", key["key_id"], "--json").json()
    with database.control() as connection:
        secret_hash = connection.execute(
            select(api_keys.c.secret_hash).where(api_keys.c.id == uuid.UUID(key["key_id"]))
        ).scalar_one()

    as_json = run_cli("key", "audit", "--tenant", tenant["id"], "--json")
    human = run_cli("key", "audit", "--tenant", tenant["id"])

    records = as_json.json()
    assert [r["action"] for r in records] == ["issue", "rate", "rotate", "reset", "revoke"]
    assert all(
        set(r) == {"at", "tenant_id", "key_id", "action", "actor", "details"} for r in records
    )
    assert {(r["tenant_id"], r["key_id"], r["actor"]) for r in records} == {
        (tenant["id"], key["key_id"], admin.operator())
    }
    ats = [_parse_timestamp(r["at"]) for r in records]
    assert ats == sorted(ats)
    assert records[0]["details"] == {
        "name": "crm",
        "department_id": department["id"],
        "expires_at": records[0]["details"]["expires_at"],
        "rate_per_second": 5.0,
        "rate_burst": 10,
    }
    _parse_timestamp(records[0]["details"]["expires_at"])
    assert [r["details"] for r in records[1:]] == [
        {"rate_per_second": 2.0, "rate_burst": 4},
        {"grace_seconds": 30},
        {},
        {},
    ]
    assert human.exit_code == 0, str(human)
    assert [line.split()[1] for line in human.stdout.splitlines()] == [
        "issue",
        "rate",
        "rotate",
        "reset",
        "revoke",
    ]
    assert "grace_seconds=30" in human.stdout and 'name="crm"' in human.stdout
    assert "rate_burst=4 rate_per_second=2.0" in human.stdout
    output = as_json.stdout + as_json.stderr + human.stdout + human.stderr
    for api_key in (key["api_key"], rotated["api_key"], reset["api_key"]):
        assert _secret(api_key) not in output
        assert hashlib.sha256(_secret(api_key).encode()).hexdigest() not in output
    assert bytes(secret_hash).hex() not in output


def test_demo_twice_gives_the_same_tenant_department_employee_and_a_working_key(
    run_cli: RunCli, client: TestClient
) -> None:
    first = run_cli("demo", "--json").json()
    second = run_cli("demo", "--json").json()

    same = ("tenant_id", "department_id", "employee_id", "key_id", "api_key")
    assert {name: second[name] for name in same} == {name: first[name] for name in same}
    assert _create_customer_status(client, second["api_key"], second["department_id"]) == 201


@pytest.mark.parametrize(
    "command",
    [
        # Ids that name nothing.
        pytest.param(("department", "create", "--tenant", UNKNOWN, "Sales"), id="department"),
        pytest.param(
            ("employee", "create", "--tenant", "{tenant}", "--department", UNKNOWN, "Ann"),
            id="employee-in-unknown-department",
        ),
        pytest.param(
            ("employee", "create", "--tenant", UNKNOWN, "--department", "{department}", "Ann"),
            id="employee-in-unknown-tenant",
        ),
        pytest.param(
            ("key", "issue", "--tenant", "{tenant}", "--department", UNKNOWN),
            id="key-for-unknown-department",
        ),
        pytest.param(
            ("key", "issue", "--tenant", UNKNOWN, "--department", "{department}"),
            id="key-for-unknown-tenant",
        ),
        pytest.param(("key", "list", "--tenant", UNKNOWN), id="key-list"),
        pytest.param(("key", "revoke", UNKNOWN), id="key-revoke"),
        pytest.param(("key", "rotate", UNKNOWN), id="key-rotate"),
        pytest.param(("key", "reset", UNKNOWN), id="key-reset"),
        pytest.param(("key", "audit", "--tenant", UNKNOWN), id="key-audit"),
        # Arguments malformed, missing or unknown.
        pytest.param(("key", "revoke", "not-a-uuid"), id="malformed-key-id"),
        pytest.param(("key", "rotate", UNKNOWN, "--grace-seconds", "-1"), id="negative-grace"),
        pytest.param(("key", "rotate", UNKNOWN, "--grace-seconds", "soon"), id="non-int-grace"),
        pytest.param(("department", "create", "--tenant", "nope", "Sales"), id="malformed-tenant"),
        pytest.param(("department", "create", "--tenant", "{tenant}"), id="missing-name"),
        pytest.param(("key", "issue", "--tenant", "{tenant}"), id="missing-department"),
        pytest.param(("tenant", "create", "   "), id="blank-tenant-name"),
        pytest.param(("department", "create", "--tenant", "{tenant}", ""), id="empty-department"),
        pytest.param(
            ("employee", "create", "--tenant", "{tenant}", "--department", "{department}", ""),
            id="empty-employee-name",
        ),
        pytest.param(
            (
                "employee",
                "create",
                "--tenant",
                "{tenant}",
                "--department",
                "{department}",
                "Ann",
                "--email",
                "not an email",
            ),
            id="malformed-email",
        ),
        pytest.param(("tenant", "frobnicate"), id="unknown-command"),
        pytest.param(("tenant", "list", "--colour"), id="unknown-option"),
    ],
)
def test_an_unknown_id_or_a_bad_argument_gives_one_line_on_stderr_and_exit_1_or_2(
    run_cli: RunCli, world: TenantWorld, command: tuple[str, ...]
) -> None:
    known = {"tenant": str(world.tenant.id), "department": str(world.department.id)}
    args = tuple(part.format(**known) for part in command)

    _assert_one_line_failure(run_cli(*args, "--json"))


@pytest.mark.parametrize(
    ("setting", "value", "command"),
    [
        ("DEALBASE_PORT", "abc", ("tenant", "list", "--json")),
        ("DEALBASE_PORT", "abc", ("serve",)),
        ("DEALBASE_PORT", "abc", ("demo", "--json")),
        ("DEALBASE_PORT", "70000", ("serve",)),
        ("DEALBASE_DATABASE_URL", "mysql://root@localhost/x", ("tenant", "list", "--json")),
        ("DEALBASE_LOG_FORMAT", "xml", ("migrate", "--json")),
        ("DEALBASE_REDIS_URL", "http://localhost", ("serve",)),
    ],
)
def test_an_invalid_setting_stops_with_one_line_naming_it(
    run_cli: RunCli, setting: str, value: str, command: tuple[str, ...]
) -> None:
    run = run_cli(*command, env={setting: value})

    assert run.exit_code != 0, str(run)
    _assert_one_line_failure(run)
    assert setting in run.stderr, str(run)


def test_an_unreachable_database_gives_one_line_and_exit_1(run_cli: RunCli) -> None:
    run = run_cli(
        "tenant",
        "list",
        "--json",
        env={"DEALBASE_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/nowhere"},
    )

    assert run.exit_code == 1, str(run)
    _assert_one_line_failure(run)


def test_a_permanent_database_error_prints_the_databases_message_not_try_again(
    run_cli: RunCli, database_url: str
) -> None:
    tenant = _tenant(run_cli)
    with writes_raise(database_url, tenant["schema"], "departments", "55000") as message:
        run = run_cli("department", "create", "--tenant", tenant["id"], "Refused")

    assert run.exit_code == 1, str(run)
    _assert_one_line_failure(run)
    assert message in run.stderr, str(run)
    assert "try again" not in run.stderr, str(run)


def test_a_transient_database_fault_says_to_try_again(run_cli: RunCli, database_url: str) -> None:
    tenant = _tenant(run_cli)
    with writes_raise(database_url, tenant["schema"], "departments", "57P03"):
        run = run_cli("department", "create", "--tenant", tenant["id"], "Later")

    assert run.exit_code == 1, str(run)
    _assert_one_line_failure(run)
    assert "try again" in run.stderr, str(run)


def test_a_database_never_migrated_gives_one_line_not_a_traceback(
    postgres_server: str, cli_env: dict[str, str | None]
) -> None:
    with scratch_database(postgres_server, "unmigrated") as url:
        run = invoke_cli(
            ("key", "revoke", UNKNOWN, "--json"), {**cli_env, "DEALBASE_DATABASE_URL": url}
        )

    _assert_one_line_failure(run)


def test_serve_bounds_websocket_messages_and_writes_by_the_settings(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    served: list[tuple[uvicorn.Config, float]] = []
    monkeypatch.setattr(serving, "run", lambda config, write: served.append((config, write)))
    run = run_cli(
        "serve", env={"DEALBASE_WRITE_TIMEOUT_SECONDS": "7", "PROMETHEUS_MULTIPROC_DIR": None}
    )

    assert run.exit_code == 0, str(run)
    ((config, write_timeout),) = served
    assert write_timeout == 7
    # A WebSocket message is bounded as the app bounds it, and never inflated.
    assert (config.ws_max_size, config.ws_per_message_deflate) == (MAX_MESSAGE_BYTES, False)


@pytest.mark.parametrize(
    ("told_freeze", "told_threshold", "frozen", "threshold"),
    [(None, None, True, SERVER_GC_YOUNG_THRESHOLD), ("false", "2000", False, 2000)],
)
def test_serve_has_its_workers_freeze_their_startup_objects_and_collect_young_ones_less_often_unless_told(
    run_cli: RunCli,
    monkeypatch: pytest.MonkeyPatch,
    told_freeze: str | None,
    told_threshold: str | None,
    frozen: bool,
    threshold: int,
) -> None:
    """Workers build their app from the environment ``dealbase serve`` hands them."""
    workers_would: list[tuple[bool, int | None]] = []

    def serve(_config: object, _write_timeout: float) -> None:
        settings = load_settings()
        workers_would.append((settings.freeze_startup_objects, settings.gc_young_threshold))

    monkeypatch.setattr(serving, "run", serve)
    # Named, so that the runner puts back what the command sets in this process's environment.
    run = run_cli(
        "serve",
        env={
            "DEALBASE_FREEZE_STARTUP_OBJECTS": told_freeze,
            "DEALBASE_GC_YOUNG_THRESHOLD": told_threshold,
            "PROMETHEUS_MULTIPROC_DIR": None,
        },
    )

    assert run.exit_code == 0, str(run)
    assert workers_would == [(frozen, threshold)]
