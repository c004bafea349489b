"""Runs the two Alembic trees programmatically, always on a connection inside a transaction.

PostgreSQL DDL is transactional, so a tenant's upgrade either reaches head or leaves the schema
as it was; a later run resumes from the revision each schema records in its own version table.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, func, select, text
from sqlalchemy.pool import NullPool

from dealbase.tenancy.control_tables import CONTROL_SCHEMA
from dealbase.tenancy.database import sqlalchemy_url
from dealbase.tenancy.roles import (
    TENANT_OWNER_ROLE,
    ensure_roles,
    ensure_shared_roles,
    repair_grants,
)

_TREES = Path(__file__).parent
# Alembic's op and context are process-wide proxies: one migration at a time per process.
_alembic_in_use = threading.Lock()


def _config(tree: str, connection: Connection, schema: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_TREES / tree))
    config.attributes["connection"] = connection
    config.attributes["schema"] = schema
    return config


def head_revision(tree: str) -> str | None:
    config = Config()
    config.set_main_option("script_location", str(_TREES / tree))
    return ScriptDirectory.from_config(config).get_current_head()


def current_revision(connection: Connection, schema: str) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table_schema": schema})
    return context.get_current_revision()


def _lock(connection: Connection, name: str) -> None:
    """Serialises two migrators of the same schema (two deploys at once) for this transaction."""
    connection.execute(
        select(func.pg_advisory_xact_lock(func.hashtext(f"dealbase:migrate:{name}")))
    )


def upgrade_control(connection: Connection) -> None:
    _lock(connection, CONTROL_SCHEMA)
    ensure_shared_roles(connection)
    connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {CONTROL_SCHEMA}"))
    with _alembic_in_use:
        command.upgrade(_config("control", connection, CONTROL_SCHEMA), "head")


def upgrade_tenant(connection: Connection, schema: str, target: str = "head") -> list[str]:
    """Creates the schema if needed and brings it to ``target``, in the caller's transaction, and
    leaves the tenant's role and its grants as ``tenancy.roles`` has them; returns what it had
    to repair (nothing, for a tenant already in order)."""
    _lock(connection, schema)
    repairs = ensure_roles(connection, schema)
    existed = connection.execute(
        text("SELECT 1 FROM pg_namespace WHERE nspname = :schema"), {"schema": schema}
    ).first()
    # The migrations run as the owner, so what they create is the owner's, not the login role's.
    connection.execute(
        text(f'CREATE SCHEMA IF NOT EXISTS "{schema}" AUTHORIZATION "{TENANT_OWNER_ROLE}"')
    )
    connection.execute(text(f'SET LOCAL ROLE "{TENANT_OWNER_ROLE}"'))
    if existed:
        repairs += repair_grants(connection, schema)
    connection.execute(select(func.set_config("search_path", schema, True)))
    with _alembic_in_use:
        command.upgrade(_config("tenant", connection, schema), target)
    # What the migrations just created is granted now: that is provisioning, not a repair.
    repair_grants(connection, schema)
    connection.execute(text("SET LOCAL ROLE NONE"))
    return repairs


@dataclass(frozen=True, slots=True)
class TenantMigration:
    schema: str
    error: str | None
    repairs: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None


def upgrade_tenants(
    database_url: str,
    schemas: Iterable[str],
    *,
    concurrency: int,
    on_done: Callable[[TenantMigration], None] = lambda _: None,
) -> list[TenantMigration]:
    """Upgrades every schema, ``concurrency`` at a time; one failing tenant never stops the rest.

    Alembic's ``op`` and ``context`` are process-wide proxies, so parallel upgrades need
    processes of their own, not threads.
    """
    schemas = list(schemas)
    results = []
    if concurrency == 1 or len(schemas) <= 1:
        _start_worker(database_url)
        for schema in schemas:
            result = _upgrade_in_worker(schema)
            on_done(result)
            results.append(result)
        return results
    with ProcessPoolExecutor(
        max_workers=min(concurrency, len(schemas)),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_worker,
        initargs=(database_url,),
    ) as pool:
        futures = [pool.submit(_upgrade_in_worker, schema) for schema in schemas]
        for future in as_completed(futures):
            result = future.result()
            on_done(result)
            results.append(result)
    return results


_worker_engine: Engine | None = None


def _start_worker(database_url: str) -> None:
    global _worker_engine
    _worker_engine = create_engine(sqlalchemy_url(database_url), poolclass=NullPool)


def _upgrade_in_worker(schema: str) -> TenantMigration:
    assert _worker_engine is not None, "_start_worker runs first"
    try:
        with _worker_engine.begin() as connection:
            repairs = upgrade_tenant(connection, schema)
    except Exception as exc:  # reported per tenant by name; the run goes on
        return TenantMigration(schema, f"{type(exc).__name__}: {exc}".splitlines()[0])
    return TenantMigration(schema, None, tuple(repairs))
