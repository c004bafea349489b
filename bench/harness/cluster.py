"""The two places a cluster benchmark runs dealbase in, the single server's scratch database and
the Citus cluster's, and what it does there: tenants made in this process, dealbase served and
seeded, the cluster's nodes and versions, a database of the bench's own on every node.

Shared by bench/citus.py, bench/citus_scale.py and bench/citus_network.py.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from dealbase.config import parse_rate
from dealbase.db.database import Database
from dealbase.ops import admin
from dealbase.tenancy.registry.placement import Node
from dealbase.tenancy.registry.tenants import create_tenant
from dealbase.tenancy.scope import Rate
from harness import seed as seeding
from harness.console import sayer
from harness.proc import parent_pid
from harness.processes import Service
from harness.settings import BenchSettings
from harness.stack import (
    GENEROUS_BURST,
    GENEROUS_RATE,
    Tenant,
    dealbase_cli,
    scratch_database,
    start_dealbase,
)

say = sayer("bench: citus")

DEFAULT_CITUS = "postgresql://postgres@127.0.0.1:9700/dealbase"


SINGLE, CLUSTER = "single", "cluster"


# Every dealbase process of the run: the cluster's tenants distributed (on the single server the
# setting is off), webhooks to 127.0.0.1 allowed, and no spare schemas made by a worker, so that
# the provisioning figures and the move see only what the run makes.
COMMON_ENVIRONMENT = {
    "DEALBASE_WEBHOOKS_ALLOW_PRIVATE": "true",
    "DEALBASE_SPARE_TENANT_SCHEMAS": "0",
}


@dataclass
class Place:
    """Where dealbase runs: the single server's scratch database, or the cluster's."""

    name: str
    url: str
    distributed: bool
    database: Database
    # The cluster's reads served by the tenant's worker (DEALBASE_CITUS_READS_ON_WORKERS).
    reads_on_workers: bool = False

    def environment(self) -> dict[str, str]:
        """A dealbase process's settings for this place (beside the bench's own)."""
        environment = {
            **COMMON_ENVIRONMENT,
            "DEALBASE_CITUS_SCHEMA_SHARDING": "true" if self.distributed else "false",
        }
        if self.reads_on_workers:
            environment["DEALBASE_CITUS_READS_ON_WORKERS"] = "true"
        return environment

    def cli(self, *arguments: str) -> tuple[Any, float]:
        """`dealbase ARGUMENTS --json` here; its answer and its seconds (start-up included)."""
        return dealbase_cli(
            self.url,
            *arguments,
            "--json",
            environment={**self.environment(), "DEALBASE_LOG_LEVEL": "warning"},
        )


@dataclass
class Made:
    """The cluster's tenants this run made, deleted at its end."""

    tenants: list[uuid.UUID] = field(default_factory=list)


def generous_rate() -> Rate:
    """A key's or tenant's limit no load of the bench reaches."""
    return Rate(per_second=parse_rate(GENEROUS_RATE), burst=int(GENEROUS_BURST))


def make_tenant(place: Place, made: Made, name: str, employees: int = 5) -> Tenant:
    """A tenant with a department (its six default steps), employees and a key that never
    refuses, as bench/harness/stack.py's provision makes it, in this process."""
    database = place.database
    tenant = create_tenant(database, name, distributed=place.distributed)
    if place.distributed:
        made.tenants.append(tenant.id)
    department = admin.create_department(database, tenant.id, "Sales")
    employee_ids = [
        str(
            admin.create_employee(
                database, tenant.id, department.id, f"Employee {n}", f"employee{n}@example.com"
            ).id
        )
        for n in range(1, employees + 1)
    ]
    key = admin.issue_key(database, tenant.id, department.id, "bench", generous_rate())
    return Tenant(
        tenant_id=str(tenant.id),
        schema=tenant.schema,
        department_id=str(department.id),
        step_ids=tuple(str(step.id) for step in department.steps),
        employee_ids=tuple(employee_ids),
        key_id=str(key.key_id),
        api_key=key.api_key,
        department_keys=(f"{key.api_key} {department.id}",),
    )


@dataclass
class Served:
    place: Place
    tenant: Tenant
    service: Service
    seed: dict[str, int]
    sizes: dict[str, int]


def serve(place: Place, made: Made, settings: BenchSettings, logs: Path) -> Served:
    tenant = make_tenant(place, made, f"citus-bench-{place.name}")
    service, _ = start_dealbase(
        place.url, settings, logs / f"dealbase-{place.name}.log", place.environment()
    )
    try:
        say(f"{place.name}: dealbase serving on {service.base_url}; seeding {tenant.schema}")
        seed = seeding.seed(service.base_url, tenant, settings, linked=True).summary()
        sizes = seeding.check_dealbase(service.base_url, tenant)
    except BaseException:
        service.stop()
        raise
    say(f"{place.name}: seeded {seed}; every read answers the seeded data whole")
    return Served(place, tenant, service, seed, sizes)


def postmasters(place: Place) -> dict[str, int]:
    """The PostgreSQL servers of the place (on this machine), by the parent of a backend:
    the single server, or the coordinator and each worker."""
    urls = {"postgres": place.url}
    if place.distributed:
        urls = {"coordinator": place.url}
        base, _, rest = place.url.partition("@")
        database = rest.partition("/")[2]
        for node in workers(place.url):
            urls[f"worker {node.port}"] = f"{base}@{node.host}:{node.port}/{database}"
    found = {}
    for name, url in urls.items():
        with psycopg.connect(url) as connection:
            row = connection.execute("SELECT pg_backend_pid()").fetchone()
        parent = parent_pid(int(row[0])) if row else None
        if parent is not None:
            found[name] = parent
    return found


def workers(url: str) -> list[Node]:
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT nodename, nodeport FROM pg_dist_node"
            " WHERE noderole = 'primary' AND groupid <> 0 ORDER BY nodeport"
        ).fetchall()
    return [Node(host, port) for host, port in rows]


def cluster_versions(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as connection:
        citus = connection.execute("SELECT citus_version()").fetchone()
        nodes = connection.execute(
            "SELECT nodename || ':' || nodeport, groupid FROM pg_dist_node ORDER BY nodeport"
        ).fetchall()
        settings: dict[str, str] = dict(
            connection.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN ('max_connections',"
                " 'shared_buffers', 'synchronous_commit', 'fsync', 'wal_level')"
            ).fetchall()
        )
    return {
        "citus": citus[0] if citus else None,
        "nodes": [f"{name} (group {group})" for name, group in nodes],
        "coordinator_settings": settings,
    }


def delete_tenants(cluster: Place, made: Made) -> None:
    for tenant_id in made.tenants:
        try:
            admin.delete_tenant(cluster.database, tenant_id, distributed=True)
        except Exception as exc:  # one left behind is said, not fatal
            say(f"could not delete tenant {tenant_id} on the cluster: {exc}")


@contextmanager
def places(
    settings: BenchSettings, citus_url: str, stack: ExitStack, *, reads_on_workers: bool = False
) -> Iterator[dict[str, Place]]:
    single_url = stack.enter_context(scratch_database(settings.database_server))
    single = Place(SINGLE, single_url, False, Database(single_url, pool_size=4))
    cluster = Place(
        CLUSTER,
        citus_url,
        True,
        Database(citus_url, pool_size=4, distributed_schemas=True),
        reads_on_workers=reads_on_workers,
    )
    try:
        yield {SINGLE: single, CLUSTER: cluster}
    finally:
        single.database.dispose()
        cluster.database.dispose()


def node_url(url: str, host: str, port: int, database: str) -> str:
    scheme, _, rest = url.partition("://")
    credentials, _, _ = rest.rpartition("@")
    return f"{scheme}://{credentials}{'@' if credentials else ''}{host}:{port}/{database}"


@contextmanager
def own_cluster_database(citus_url: str) -> Iterator[tuple[str, list[tuple[str, int]]]]:
    """A Citus database of the bench's own on every node (tests/citus/conftest.py's way); its
    URL on the coordinator and the workers. Dropped afterwards with its tenant roles."""
    name = f"dealbase_bench_scale_{secrets.token_hex(4)}"
    with psycopg.connect(citus_url) as connection:
        coordinator = connection.execute(
            "SELECT nodename, nodeport FROM pg_dist_node WHERE groupid = 0"
        ).fetchone()
        workers = connection.execute(
            "SELECT nodename, nodeport FROM pg_dist_node"
            " WHERE noderole = 'primary' AND groupid <> 0 ORDER BY nodeport"
        ).fetchall()
    if coordinator is None:
        raise RuntimeError(f"{citus_url}: no coordinator in pg_dist_node")
    nodes = [(str(host), int(port)) for host, port in [coordinator, *workers]]
    made = []
    try:
        for host, port in nodes:
            with psycopg.connect(node_url(citus_url, host, port, "postgres"), autocommit=True) as c:
                c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            made.append((host, port))
            with psycopg.connect(node_url(citus_url, host, port, name), autocommit=True) as c:
                c.execute("CREATE EXTENSION citus")
        url = node_url(citus_url, *nodes[0], name)
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("SELECT citus_set_coordinator_host(%s, %s)", nodes[0])
            for worker in nodes[1:]:
                connection.execute("SELECT citus_add_node(%s, %s)", worker)
        yield url, nodes[1:]
    finally:
        roles: list[str] = []
        if made:
            with psycopg.connect(node_url(citus_url, *nodes[0], name)) as connection:
                roles = (
                    [
                        role
                        for (role,) in connection.execute(
                            "SELECT rolname FROM pg_roles WHERE rolname ~ '^t_[0-9a-f]{32}$'"
                            " AND rolname IN (SELECT nspname FROM pg_namespace"
                            "   UNION SELECT schema_name FROM control.tenants)"
                        )
                    ]
                    if _has_control(connection)
                    else []
                )
        for host, port in made:
            with psycopg.connect(node_url(citus_url, host, port, "postgres"), autocommit=True) as c:
                c.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
                # Citus made each tenant role on every node; the database's objects are gone.
                for role in roles:
                    c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        say(f"dropped {name} on {len(made)} nodes, and {len(roles)} tenant roles")


def _has_control(connection: psycopg.Connection[Any]) -> bool:
    row = connection.execute("SELECT to_regclass('control.tenants') IS NOT NULL").fetchone()
    return bool(row and row[0])
