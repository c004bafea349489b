"""Runs the two Alembic trees programmatically, always on a connection inside a transaction.

PostgreSQL DDL is transactional, so a tenant's upgrade either reaches head or leaves the schema
as it was; a later run resumes from the revision each schema records in its own version table.

Tenants are many and alike, so the tenant tree is not run through Alembic's online machinery for
each of them (its per-operation round trips and catalog probes cost more than the DDL itself,
and grow with the catalog). Each path from one revision to another is rendered once per process
with Alembic's offline mode and replayed as one script in each tenant's transaction. Tenant
migrations must therefore render offline: statements only, nothing read back through
``op.get_bind()``. The revision a schema reached is also recorded in ``control.tenants``, so that
finding the schemas that are behind is one query, whatever the number of tenants.
"""

from __future__ import annotations

import functools
import io
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import (
    Connection,
    Engine,
    column,
    create_engine,
    func,
    select,
    table,
    text,
    update,
)
from sqlalchemy.pool import QueuePool

from dealbase.db.database import sqlalchemy_url
from dealbase.tenancy.control_tables import CONTROL_SCHEMA, spare_schemas, tenants
from dealbase.tenancy.roles import (
    MIGRATION_TABLE,
    TENANT_OWNER_ROLE,
    ensure_roles,
    ensure_shared_roles,
    repair_grants,
)
from dealbase.tenancy.scope import tenant_role

_TREES = Path(__file__).parent
# Alembic's op and context are process-wide proxies: one run of a tree (the control schema's, or
# rendering a tenant path) at a time per process.
_alembic_in_use = threading.Lock()


def _control_config(connection: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_TREES / "control"))
    config.attributes["connection"] = connection
    return config


@functools.cache
def head_revision(tree: str) -> str | None:
    config = Config()
    config.set_main_option("script_location", str(_TREES / tree))
    return ScriptDirectory.from_config(config).get_current_head()


@functools.cache
def _tenant_revision(target: str) -> str:
    """``target`` as a revision id (``head`` resolved), so that scripts are cached by path."""
    config = Config()
    config.set_main_option("script_location", str(_TREES / "tenant"))
    revision = ScriptDirectory.from_config(config).get_revision(target)
    if revision is None:
        raise ValueError(f"the tenant tree has no revision {target!r}")
    return revision.revision


@functools.cache
def tenant_upgrade_script(from_revision: str | None, to_revision: str) -> str:
    """The SQL that takes a tenant schema from one revision (None: an empty schema) to another,
    version table included, naming no schema and opening no transaction."""
    output = io.StringIO()
    config = Config(output_buffer=output)
    config.set_main_option("script_location", str(_TREES / "tenant"))
    path = to_revision if from_revision is None else f"{from_revision}:{to_revision}"
    with _alembic_in_use:
        command.upgrade(config, path, sql=True)
    return output.getvalue()


def current_revision(connection: Connection, schema: str) -> str | None:
    """The revision in the schema's own version table; None when it has none yet."""
    if (
        connection.execute(select(func.to_regclass(f'"{schema}".{MIGRATION_TABLE}'))).scalar()
        is None
    ):
        return None
    version_table = table(MIGRATION_TABLE, column("version_num"), schema=schema)
    return connection.execute(select(version_table.c.version_num)).scalar_one_or_none()


def lock_schema(connection: Connection, name: str) -> None:
    """Serialises the work that changes a schema's structure, for this transaction: two
    migrators of the same schema (two deploys at once), or a migrator and a tenant's deletion."""
    connection.execute(
        select(func.pg_advisory_xact_lock(func.hashtext(f"dealbase:migrate:{name}")))
    )


def _deleted(connection: Connection, schema: str) -> bool:
    deleted_at = connection.execute(
        select(tenants.c.deleted_at).where(tenants.c.schema_name == schema)
    ).scalar()
    return deleted_at is not None


def upgrade_control(connection: Connection, *, distributed: bool = False) -> None:
    lock_schema(connection, CONTROL_SCHEMA)
    ensure_shared_roles(connection, login=distributed)
    connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {CONTROL_SCHEMA}"))
    with _alembic_in_use:
        command.upgrade(_control_config(connection), "head")


# Citus: a schema created with this on becomes a distributed schema, its tables placed together
# on one node of the cluster (docs/scaling.md). A placeholder setting where Citus is not loaded.
CITUS_SCHEMA_SHARDING = "citus.enable_schema_based_sharding"


def create_distributed_schema(connection: Connection, schema: str) -> None:
    """The tenant's roles, able to log in, and its empty distributed schema, owned by the owner.

    On a Citus cluster this must commit before the schema's tables are made (``upgrade_tenant``
    in a later transaction): Citus sends some of a migration's statements to the workers over
    connections of its own (a sequence a column owns, for one), which do not see a schema that
    the transaction has not committed yet; and a role's LOGIN counts on a worker only once
    committed."""
    lock_schema(connection, schema)
    ensure_roles(connection, schema, login=True)
    connection.execute(select(func.set_config(CITUS_SCHEMA_SHARDING, "on", True)))
    connection.execute(
        text(f'CREATE SCHEMA IF NOT EXISTS "{schema}" AUTHORIZATION "{TENANT_OWNER_ROLE}"')
    )
    connection.execute(select(func.set_config(CITUS_SCHEMA_SHARDING, "off", True)))


def drop_tenant_schema(connection: Connection, schema: str) -> None:
    """Drops the schema with everything in it, in the caller's transaction."""
    lock_schema(connection, schema)
    # The schema and its objects are the owner's, which the login role may become.
    connection.execute(text(f'SET LOCAL ROLE "{TENANT_OWNER_ROLE}"'))
    connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    connection.execute(text("SET LOCAL ROLE NONE"))


def drop_tenant_role(connection: Connection, schema: str) -> None:
    """Drops the schema's role and its memberships (of dealbase_tenants; the login role's of
    it), once nothing grants it a privilege: in the transaction that dropped the schema on a
    single server, after that one committed on a Citus cluster (the worker drops the schema
    over the owner's connection, which the role's drop does not see until then)."""
    connection.execute(text(f'DROP ROLE IF EXISTS "{tenant_role(schema)}"'))


def upgrade_tenant(
    connection: Connection, schema: str, target: str = "head", *, distributed: bool = False
) -> list[str]:
    """Brings the schema to ``target`` in the caller's transaction (creating it first on a
    single server; on a Citus cluster, ``distributed``, ``create_distributed_schema`` made it in
    a transaction of its own), records the revision in ``control``, and leaves the tenant's role
    and its grants as ``tenancy.roles`` has them; returns what it had to repair (nothing, for a
    tenant already in order)."""
    to_revision = _tenant_revision(target)
    lock_schema(connection, schema)
    if _deleted(connection, schema):
        # Deleted after the migrator listed it, while it waited for the lock: nothing to do.
        return []
    repairs = ensure_roles(connection, schema, login=distributed)
    existed = connection.execute(
        text("SELECT 1 FROM pg_namespace WHERE nspname = :schema"), {"schema": schema}
    ).first()
    if not existed:
        if distributed:
            raise RuntimeError(f"{schema}: create_distributed_schema commits it first")
        # The migrations run as the owner, so what they create is the owner's.
        connection.execute(text(f'CREATE SCHEMA "{schema}" AUTHORIZATION "{TENANT_OWNER_ROLE}"'))
    connection.execute(text(f'SET LOCAL ROLE "{TENANT_OWNER_ROLE}"'))
    from_revision = None
    if existed:
        repairs += repair_grants(connection, schema)
        from_revision = current_revision(connection, schema)
    if from_revision != to_revision:
        connection.execute(select(func.set_config("search_path", schema, True)))
        _run_script(connection, tenant_upgrade_script(from_revision, to_revision), distributed)
        # What the migrations just created is granted now: that is provisioning, not a repair.
        repair_grants(connection, schema)
    connection.execute(text("SET LOCAL ROLE NONE"))
    # The schema is a tenant's or a spare (or, in tests, neither): the one row there is.
    for registry in (tenants, spare_schemas):
        connection.execute(
            update(registry)
            .where(registry.c.schema_name == schema)
            .values(schema_revision=to_revision)
        )
    return repairs


def _run_script(connection: Connection, script: str, distributed: bool) -> None:
    driver = connection.connection.driver_connection
    if not distributed:
        # Several statements in one round trip: psycopg sends a query without parameters
        # through the simple query protocol, which allows that.
        driver.execute(script)  # type: ignore[union-attr]
        return
    # Citus passes a statement's text on to the workers as one prepared statement, which holds
    # one command: a script goes one statement at a time. Alembic's offline rendering ends each
    # statement with a semicolon and a blank line.
    for statement in script.split(";\n\n"):
        if statement.strip():
            driver.execute(statement)  # type: ignore[union-attr]


@dataclass(frozen=True, slots=True)
class TenantMigration:
    schema: str
    error: str | None
    repairs: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None


def schemas_behind(connection: Connection) -> list[str]:
    """The schemas of live tenants, then the spare schemas, whose recorded revision is not the
    head: indexed queries, however many tenants there are (a schema that recorded nothing counts
    as behind)."""
    head = _tenant_revision("head")
    behind = connection.execute(
        select(tenants.c.schema_name)
        .where(tenants.c.deleted_at.is_(None), tenants.c.schema_revision.is_distinct_from(head))
        .order_by(tenants.c.created_at, tenants.c.id)
    ).scalars()
    spares = connection.execute(
        select(spare_schemas.c.schema_name)
        .where(spare_schemas.c.schema_revision != head)
        .order_by(spare_schemas.c.created_at)
    ).scalars()
    return [*behind, *spares]


# A backend keeps the catalog entries of every relation it has touched until it ends: a migrator
# connection is replaced after this many tenants, so that its memory stays bounded however many
# tenants one run visits.
TENANTS_PER_CONNECTION = 100


def upgrade_tenants(
    database_url: str,
    schemas: Iterable[str],
    *,
    concurrency: int,
    distributed: bool = False,
    on_done: Callable[[TenantMigration], None] = lambda _: None,
) -> list[TenantMigration]:
    """Upgrades every schema, ``concurrency`` at a time, each in its own transaction; one failing
    tenant never stops the rest. The work is PostgreSQL's (one script a tenant), so threads do."""
    schemas = list(schemas)
    if not schemas:
        return []
    workers = min(concurrency, len(schemas))
    engine = create_engine(
        sqlalchemy_url(database_url), poolclass=QueuePool, pool_size=workers, max_overflow=0
    )
    results = []
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="migrate") as pool:
            futures = [pool.submit(_upgrade_one, engine, schema, distributed) for schema in schemas]
            for future in as_completed(futures):
                result = future.result()
                on_done(result)
                results.append(result)
    finally:
        engine.dispose()
    return results


def _upgrade_one(engine: Engine, schema: str, distributed: bool) -> TenantMigration:
    try:
        with engine.connect() as connection:
            with connection.begin():
                repairs = upgrade_tenant(connection, schema, distributed=distributed)
            visited = connection.info["tenants_visited"] = (
                connection.info.get("tenants_visited", 0) + 1
            )
            if visited >= TENANTS_PER_CONNECTION:
                connection.invalidate()
    except Exception as exc:  # reported per tenant by name; the run goes on
        return TenantMigration(schema, f"{type(exc).__name__}: {exc}".splitlines()[0])
    return TenantMigration(schema, None, tuple(repairs))
