"""PostgreSQL itself keeps tenants apart: a unit of work runs as its tenant's role, which may use
its own schema and nothing else, and migrations create missing roles and repair drifted grants."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from sqlalchemy import func, select, text

from dealbase.db.database import Database
from dealbase.db.transactions import TenantConnection
from dealbase.db.units import UnitOfWork
from dealbase.migrations.runner import upgrade_control, upgrade_tenants
from dealbase.ops import admin
from dealbase.platform.customers import service as customers
from dealbase.platform.tables import customers as customers_table
from dealbase.tenancy.registry.tenants import create_tenant
from dealbase.tenancy.roles import TENANT_OWNER_ROLE, ensure_roles, inheriting_login_role
from dealbase.tenancy.scope import tenant_role
from tests.support import (
    TenantWorld,
    control_at_head,
    database_at,
    non_superuser_login,
    own_database_at_head,
)


def test_a_unit_of_work_runs_as_its_tenants_role_and_the_connection_returns_as_the_login_role(
    database: Database, world: TenantWorld
) -> None:
    with database.unit_of_work(world.tenant.scope) as uow:
        assert uow.connection.execute(select(func.current_user())).scalar() == world.tenant.schema
    with database.pool.connection() as connection:
        row = connection.execute("SELECT current_user, session_user").fetchone()
        assert row is not None and row[0] == row[1]


def test_raw_sql_against_another_tenants_schema_is_refused_inside_a_unit_of_work(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    mine, theirs = make_tenant(), make_tenant()
    other = theirs.tenant.schema
    statements = [
        f'SELECT count(*) FROM "{other}".customers',
        f'SELECT name FROM "{other}".departments',
        f'DELETE FROM "{other}".customers',
        f"INSERT INTO \"{other}\".departments (id, name) VALUES ('{uuid.uuid4()}', 'x')",
        f'CREATE TABLE "{other}".planted (id int)',
    ]
    for statement in statements:
        with (
            pytest.raises(psycopg.errors.InsufficientPrivilege),
            database.unit_of_work(mine.tenant.scope) as uow,
        ):
            uow.connection.execute(text(statement))


def test_a_routing_bug_that_names_another_tenants_schema_gets_a_permission_error(
    database: Database, make_tenant: Callable[..., TenantWorld]
) -> None:
    """The platform's own query, written into the wrong schema inside the caller's transaction:
    what a bug in the application's routing would do. PostgreSQL refuses it."""
    mine, theirs = make_tenant(), make_tenant()
    with database.unit_of_work(mine.tenant.scope) as uow:
        # The transaction opens, as the tenant's role, with the caller's first statement.
        uow.connection.execute(select(func.count()).select_from(customers_table))
        misrouted = TenantConnection(
            uow.connection._connection,  # the very connection and transaction of the caller
            theirs.tenant.schema,
            database.statements,
            role=tenant_role(mine.tenant.schema),
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            customers.RECORD.get(UnitOfWork(misrouted, uow.scope), uuid.uuid4())


def test_a_tenant_role_reads_its_own_tables_but_not_the_control_schema(
    database: Database, world: TenantWorld
) -> None:
    for table in ("control.api_keys", "control.tenants"):
        with (
            pytest.raises(psycopg.errors.InsufficientPrivilege),
            database.unit_of_work(world.tenant.scope) as uow,
        ):
            uow.connection.execute(text(f"SELECT count(*) FROM {table}"))
    with database.unit_of_work(world.tenant.scope) as uow:
        counted = uow.connection.execute(select(func.count()).select_from(customers_table))
        assert counted.scalar() == 0


def test_the_service_login_role_holds_no_privilege_on_any_tenant_schema(
    postgres_server: str,
) -> None:
    """Provisioned by a login role that is not a superuser: it can switch to each tenant's role
    for a unit of work, but on its own it can neither read nor write any tenant's tables."""
    with non_superuser_login(postgres_server) as (login, url), database_at(url) as database:
        control_at_head(database)
        tenant = create_tenant(database, "provisioned by the service's login role")
        department = admin.create_department(database, tenant.id, "Sales")
        with database.unit_of_work(tenant.scope.in_department(department.id)) as uow:
            assert uow.connection.execute(select(func.current_user())).scalar() == tenant.schema
        with psycopg.connect(url, autocommit=True) as connection:
            privileges = connection.execute(
                "SELECT has_schema_privilege(%(login)s, n.oid, 'USAGE'),"
                " has_table_privilege(%(login)s, c.oid, 'SELECT'),"
                " has_table_privilege(%(login)s, c.oid, 'INSERT')"
                " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %(schema)s AND c.relname = 'customers'",
                {"login": login, "schema": tenant.schema},
            ).fetchone()
            assert privileges == (False, False, False)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                connection.execute(f'SELECT count(*) FROM "{tenant.schema}".departments')


def test_the_control_upgrade_lets_the_login_role_switch_to_the_owner_before_any_tenant(
    postgres_server: str,
) -> None:
    """migrate's workers then upgrade tenants in parallel without racing to grant it."""
    with non_superuser_login(postgres_server) as (login, url):
        with database_at(url) as database:
            control_at_head(database)
        with psycopg.connect(url) as connection:
            member = connection.execute(
                "SELECT pg_has_role(%s, %s, 'MEMBER')", [login, TENANT_OWNER_ROLE]
            ).fetchone()
        assert member == (True,)


@pytest.mark.parametrize("inherit", [False, True])
def test_migrate_names_a_login_role_that_would_inherit_every_tenants_privileges(
    postgres_server: str, inherit: bool
) -> None:
    with (
        non_superuser_login(postgres_server, inherit=inherit) as (login, url),
        database_at(url) as database,
        database.control() as connection,
    ):
        upgrade_control(connection)
        version = connection.execute(text("SHOW server_version_num")).scalar_one()
        named = inheriting_login_role(connection)
    # From PostgreSQL 16 each membership is granted without inheritance, whatever the role says.
    assert named == (login if inherit and int(version) < 160000 else None)


def _grants(database_url: str, schema: str) -> set[tuple[str, str, str]]:
    """(object, grantee, privilege) of every grant on the schema and its relations."""
    with psycopg.connect(database_url) as connection:
        rows = connection.execute(
            """
            SELECT n.nspname, coalesce(r.rolname, 'PUBLIC'), a.privilege_type
              FROM pg_namespace n, aclexplode(n.nspacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee
             WHERE n.nspname = %(schema)s AND a.grantee <> n.nspowner
            UNION ALL
            SELECT c.relname, coalesce(r.rolname, 'PUBLIC'), a.privilege_type
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
                   aclexplode(c.relacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee
             WHERE n.nspname = %(schema)s AND a.grantee <> c.relowner
            """,
            {"schema": schema},
        ).fetchall()
    return {(str(obj), str(grantee), str(privilege)) for obj, grantee, privilege in rows}


def _shape(database_url: str, schema: str) -> set[tuple[str, str, str]]:
    """The schema's grants with its own name written as ``<tenant>``, to compare tenants."""
    return {
        tuple("<tenant>" if part == schema else part for part in grant)  # type: ignore[misc]
        for grant in _grants(database_url, schema)
    }


@pytest.fixture
def own_database(postgres_server: str) -> Iterator[Database]:
    with own_database_at_head(postgres_server, "roles") as database:
        yield database


def test_migrate_repairs_drifted_grants_and_recreates_missing_roles_then_changes_nothing(
    own_database: Database,
) -> None:
    database = own_database
    a = create_tenant(database, "a")
    b = create_tenant(database, "b")
    legacy = create_tenant(database, "created before tenant roles")
    healthy = _grants(database.url, a.schema)
    assert _shape(database.url, b.schema) == _shape(database.url, a.schema)
    assert ("alembic_version", a.schema, "SELECT") not in healthy
    assert {privilege for obj, _, privilege in healthy if obj == "customers"} == {
        "SELECT",
        "INSERT",
        "UPDATE",
        "DELETE",
    }
    with psycopg.connect(database.url, autocommit=True) as connection:
        # Drift: another tenant's role let into b, PUBLIC reading b, a's own grant lost, a
        # tenant role that may log in and is a member of another tenant's role.
        connection.execute(f'GRANT USAGE ON SCHEMA "{b.schema}" TO "{a.schema}"')
        connection.execute(f'GRANT SELECT ON "{b.schema}".customers TO "{a.schema}", PUBLIC')
        connection.execute(f'REVOKE UPDATE ON "{a.schema}".customers FROM "{a.schema}"')
        connection.execute(f'ALTER ROLE "{a.schema}" LOGIN')
        connection.execute(f'GRANT "{b.schema}" TO "{a.schema}"')
        # A tenant as it was before roles: its objects the login role's, and no role at all.
        for kind in ("TABLES", "SEQUENCES"):
            connection.execute(
                f'REVOKE ALL ON ALL {kind} IN SCHEMA "{legacy.schema}" FROM "{legacy.schema}"'
            )
        connection.execute(f'REVOKE ALL ON SCHEMA "{legacy.schema}" FROM "{legacy.schema}"')
        connection.execute(f'ALTER SCHEMA "{legacy.schema}" OWNER TO CURRENT_USER')
        for (table,) in connection.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", [legacy.schema]
        ).fetchall():
            connection.execute(f'ALTER TABLE "{legacy.schema}"."{table}" OWNER TO CURRENT_USER')
        connection.execute(f'DROP ROLE "{legacy.schema}"')
    # No role, no unit of work: its first statement fails with the switch it travels with.
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue),
        database.unit_of_work(legacy.scope) as uow,
    ):
        uow.connection.execute(select(func.count()).select_from(customers_table))

    results = {
        r.schema: r
        for r in upgrade_tenants(database.url, [a.schema, b.schema, legacy.schema], concurrency=1)
    }

    assert all(result.ok for result in results.values())
    assert any("plain role" in repair for repair in results[a.schema].repairs)
    assert any(f"revoked role {b.schema}" in repair for repair in results[a.schema].repairs)
    assert any(
        f"created role {legacy.schema}" == repair for repair in results[legacy.schema].repairs
    )
    assert results[b.schema].repairs
    assert _grants(database.url, a.schema) == healthy
    for tenant in (b, legacy):
        assert _shape(database.url, tenant.schema) == _shape(database.url, a.schema)
    with psycopg.connect(database.url) as connection:
        owners = connection.execute(
            "SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE nspname = %s",
            [legacy.schema],
        ).fetchall()
        assert owners == [(TENANT_OWNER_ROLE,)]
        assert connection.execute(
            "SELECT rolcanlogin FROM pg_roles WHERE rolname = %s", [a.schema]
        ).fetchone() == (False,)
    for tenant in (a, b, legacy):
        with database.unit_of_work(tenant.scope) as uow:
            uow.connection.execute(select(func.count()).select_from(customers_table))

    again = upgrade_tenants(database.url, [a.schema, b.schema, legacy.schema], concurrency=1)
    assert [result.repairs for result in again] == [(), (), ()]


def _can_log_in(database: Database, *roles: str) -> list[bool]:
    with database.control() as connection:
        return [
            bool(
                connection.execute(
                    text("SELECT rolcanlogin FROM pg_roles WHERE rolname = :role"), {"role": role}
                ).scalar_one()
            )
            for role in roles
        ]


@pytest.mark.serial  # the owner role belongs to the whole PostgreSQL server, every test's
def test_the_owner_and_a_tenant_role_may_log_in_on_a_cluster_only(database: Database) -> None:
    """Citus reaches a worker as the current role, so on a cluster (``login``) the roles need
    LOGIN; run for a single server, the same upgrade takes it away again. The owner's is set
    by the control schema's upgrade only, the tenant role's by the tenant's."""
    schema = f"t_{uuid.uuid4().hex}"
    try:
        with database.control() as connection:
            upgrade_control(connection, distributed=True)
            on_cluster = ensure_roles(connection, schema, login=True)
        assert _can_log_in(database, TENANT_OWNER_ROLE, schema) == [True, True]
        with database.control() as connection:
            again = ensure_roles(connection, schema, login=True)
        with database.control() as connection:
            upgrade_control(connection, distributed=False)
            on_one_server = ensure_roles(connection, schema, login=False)
        assert _can_log_in(database, TENANT_OWNER_ROLE, schema) == [False, False]
    finally:
        with database.control() as connection:
            connection.execute(text(f'DROP ROLE IF EXISTS "{schema}"'))
            connection.execute(text(f'ALTER ROLE "{TENANT_OWNER_ROLE}" NOLOGIN'))

    assert f"created role {schema}" in on_cluster
    assert again == []
    assert on_one_server == [f"made role {schema} a plain role again"]
