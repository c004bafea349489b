"""What running each unit of work as its tenant's role costs: the same unit of work with and
without the switch, on one connection, taking turns.

Run: .venv/bin/python bench/role_switch.py [--server postgresql://postgres@127.0.0.1:5432/postgres]
         [--units 500] [--rounds 11]

A unit of work is POST /customers' transaction: open, insert one customer through the platform
service, commit, on the synchronous pool of one connection (the server's asynchronous pool sends
the same SQL). "As tenant" opens it the way dealbase does, ``BEGIN; SET LOCAL ROLE "t_…"`` in
one round trip; "BEGIN alone" opens it with a plain ``BEGIN``, the statement dealbase sent before
tenant roles. The two take turns, round after round, and the median round of each is reported:
wall time per unit of work (round trips and the server's work included) and the client's CPU.

Logged in as the server's user (a superuser, as the tests and the embedded PostgreSQL are),
both openings are measured; logged in as a login role like the one operators create for the
service (not a superuser, NOINHERIT), whose switch also checks its membership of the tenant role,
only the switch: without it that role may read nothing, which is the point.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql

from dealbase.db import connections as database_module
from dealbase.db.database import Database
from dealbase.migrations.runner import upgrade_control
from dealbase.ops import admin
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.tenancy.registry.tenants import create_tenant
from dealbase.tenancy.scope import Scope

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
Opening = Callable[[str], str]
AS_TENANT: Opening = database_module.switch_to_tenant


def begin_alone(schema: str) -> str:
    return "BEGIN"


def _url(server: str, database: str, user: str | None = None) -> str:
    base, _, query = server.partition("?")
    scheme, _, rest = base.partition("://")
    credentials, _, host_and_path = rest.rpartition("@")
    host = host_and_path.rpartition("/")[0]
    login = user if user is not None else credentials
    return f"{scheme}://{login + '@' if login else ''}{host}/{database}" + (
        f"?{query}" if query else ""
    )


@contextmanager
def scratch(server: str) -> Iterator[tuple[str, str]]:
    """A database of its own and a service-like login role (NOINHERIT, CREATEROLE) owning it;
    both dropped after, with the tenant roles made meanwhile."""
    suffix = secrets.token_hex(4)
    name, login = f"dealbase_role_switch_{suffix}", f"dealbase_role_switch_{suffix}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(
            sql.SQL("CREATE ROLE {} LOGIN NOINHERIT CREATEROLE").format(sql.Identifier(login))
        )
        connection.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(name), sql.Identifier(login)
            )
        )
    try:
        yield name, login
    finally:
        with psycopg.connect(_url(server, name), autocommit=True) as connection:
            roles = [
                role
                for (role,) in connection.execute(
                    "SELECT nspname FROM pg_namespace WHERE nspname ~ '^t_[0-9a-f]{32}$'"
                )
            ]
        with psycopg.connect(server, autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name))
            )
            for role in [*roles, login]:
                connection.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def run_units(
    database: Database, scope: Scope, units: int, opening: Opening
) -> tuple[float, float]:
    """Wall and CPU seconds of ``units`` units of work opened with ``opening``."""
    database_module.switch_to_tenant = opening  # type: ignore[assignment]
    fields = CustomerFields(last_name="Lovelace", first_name="Ada", email="ada@example.com")
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(units):
        with database.unit_of_work(scope) as uow:
            customers.create(uow, fields)
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(
    ways: list[tuple[str, str, Opening]], scope: Scope, units: int, rounds: int
) -> dict[str, tuple[float, float]]:
    """Median wall and CPU µs per unit of work of each (label, URL, opening), taking turns."""
    databases = [Database(url, pool_size=1, max_overflow=0) for _, url, _ in ways]
    taken: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in ways}
    try:
        for database in databases:  # warm: connection, plans, caches
            run_units(database, scope, units, AS_TENANT)
        for _ in range(rounds):
            for database, (label, _, opening) in zip(databases, ways, strict=True):
                taken[label].append(run_units(database, scope, units, opening))
    finally:
        database_module.switch_to_tenant = AS_TENANT  # type: ignore[assignment]
        for database in databases:
            database.dispose()
    return {
        label: (
            statistics.median(wall for wall, _ in figures) / units * 1e6,
            statistics.median(cpu for _, cpu in figures) / units * 1e6,
        )
        for label, figures in taken.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=DEFAULT_SERVER)
    parser.add_argument("--units", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=11)
    arguments = parser.parse_args()
    with scratch(arguments.server) as (name, login):
        service_url = _url(arguments.server, name, login)
        provisioning = Database(service_url, pool_size=1)
        with provisioning.control() as connection:
            upgrade_control(connection)
        tenant = create_tenant(provisioning, "role switch")
        department = admin.create_department(provisioning, tenant.id, "Sales")
        provisioning.dispose()
        scope = tenant.scope.in_department(department.id)
        superuser = _url(arguments.server, name)
        ways = [
            ("superuser, BEGIN alone", superuser, begin_alone),
            ("superuser, as tenant", superuser, AS_TENANT),
            # BEGIN alone cannot run as the service role: it holds no privilege of its own.
            ("service role (NOINHERIT), as tenant", service_url, AS_TENANT),
        ]
        figures = measure(ways, scope, arguments.units, arguments.rounds)
        print(f"{arguments.rounds} rounds of {arguments.units} units of work each, taking turns")
        print(
            "| login role, opened by | wall µs/unit (median round) | ratio | client CPU µs/unit |"
        )
        print("|---|---:|---:|---:|")
        reference = figures[ways[0][0]][0]
        for label, (wall, cpu) in figures.items():
            print(f"| {label} | {wall:.0f} | {wall / reference:.3f} | {cpu:.0f} |")


if __name__ == "__main__":
    main()
