"""Exporting one tenant's data into a directory of its own.

- ``jsonl``: a ``<table>.jsonl`` file per table of the tenant's schema, one JSON object per row
  (PostgreSQL's ``row_to_json``), in primary-key order, and ``manifest.json`` written last.
  Every table is read in one ``REPEATABLE READ READ ONLY`` transaction, so the files are one
  consistent snapshot, and as the tenant's role, so the export can read nothing but its
  tenant's tables. Rows are streamed from ``COPY`` to the file: no table is held in memory.
- ``pg-dump``: ``pg_dump --format=custom`` of the tenant's schema, for ``pg_restore``.

Both contain the webhook endpoints' signing secrets (docs/security.md): the files are created
readable by their owner only.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO

import orjson
import psycopg
from psycopg import Connection, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import TupleRow

from dealbase.db.database import Database, libpq_url
from dealbase.platform.resources import format_timestamp
from dealbase.tenancy.registry.tenants import Tenant
from dealbase.tenancy.roles import MIGRATION_TABLE, TENANT_OWNER_ROLE
from dealbase.tenancy.scope import checked_schema_name, tenant_role

MANIFEST = "manifest.json"
# Not the tenant's data: the migrations' bookkeeping, and a cache of responses to replay.
NOT_EXPORTED = frozenset({MIGRATION_TABLE, "idempotency_records"})

# Each table of the schema with its primary key's columns, in key order (none: no key).
_TABLES = """
SELECT c.relname,
       coalesce((SELECT array_agg(a.attname ORDER BY k.position)
                   FROM pg_index i
                  CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, position)
                   JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
                  WHERE i.indrelid = c.oid AND i.indisprimary), '{}')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND NOT c.relispartition
 ORDER BY c.relname
"""


class ExportFormat(StrEnum):
    jsonl = "jsonl"
    pg_dump = "pg-dump"


class ExportRefused(Exception):
    """The export cannot be made as asked (its directory, pg_dump); the message says why."""


@dataclass(frozen=True, slots=True)
class ExportedTable:
    table: str
    file: str
    rows: int


@dataclass(frozen=True, slots=True)
class Manifest:
    """What ``manifest.json`` holds: which tenant, at which revision and time, and each file."""

    format: str
    tenant_id: str
    name: str
    schema: str
    schema_revision: str | None
    exported_at: str
    files: list[ExportedTable]


def _prepare(directory: Path) -> None:
    """Creates the directory (owner only) unless it exists empty; refuses any other."""
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ExportRefused(f"{directory} exists and is not an empty directory")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)


def _private_file(path: Path) -> IO[bytes]:
    # Owner only from the start: the data holds webhook signing secrets.
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb")


def export_jsonl(database: Database, tenant: Tenant, directory: Path) -> Manifest:
    _prepare(directory)
    with database.pool.connection() as connection:
        # The owner reads the revision (the tenant's role may not); the snapshot starts with it
        # and holds for every table read after, as the tenant's role. Timestamps come out in
        # UTC whatever the server's time zone.
        connection.execute(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL TIME ZONE 'UTC';"
            f' SET LOCAL ROLE "{TENANT_OWNER_ROLE}"'
        )
        revision, exported_at = _revision_and_time(connection, tenant.schema)
        connection.execute(f'SET LOCAL ROLE "{tenant_role(tenant.schema)}"')
        tables = connection.execute(_TABLES, [tenant.schema]).fetchall()
        files = [
            _export_table(connection, tenant.schema, table, key, directory)
            for table, key in tables
            if table not in NOT_EXPORTED
        ]
    manifest = Manifest(
        format=ExportFormat.jsonl.value,
        tenant_id=str(tenant.id),
        name=tenant.name,
        schema=tenant.schema,
        schema_revision=revision,
        exported_at=exported_at,
        files=files,
    )
    # Last: a directory without its manifest is an export that did not finish.
    with _private_file(directory / MANIFEST) as handle:
        handle.write(orjson.dumps(asdict(manifest), option=orjson.OPT_INDENT_2) + b"\n")
    return manifest


def _revision_and_time(connection: Connection[TupleRow], schema: str) -> tuple[str | None, str]:
    revision = connection.execute(
        sql.SQL("SELECT version_num FROM {}.{}").format(
            sql.Identifier(schema), sql.Identifier(MIGRATION_TABLE)
        )
    ).fetchone()
    now = connection.execute("SELECT now()").fetchone()
    assert now is not None
    return (None if revision is None else str(revision[0])), format_timestamp(now[0])


def _export_table(
    connection: Connection[TupleRow],
    schema: str,
    table: str,
    key: list[str],
    directory: Path,
) -> ExportedTable:
    order = (
        sql.SQL(" ORDER BY {}").format(
            sql.SQL(", ").join(sql.Identifier("t", column) for column in key)
        )
        if key
        else sql.SQL("")
    )
    statement = sql.SQL("COPY (SELECT row_to_json(t) FROM {}.{} t{}) TO STDOUT").format(
        sql.Identifier(schema), sql.Identifier(table), order
    )
    file = f"{table}.jsonl"
    rows = 0
    with (
        _private_file(directory / file) as handle,
        connection.cursor() as cursor,
        cursor.copy(statement) as copy,
    ):
        # As text, psycopg undoes COPY's escaping (a backslash in the JSON comes doubled).
        copy.set_types(["text"])
        for (line,) in copy.rows():
            handle.write(f"{line}\n".encode())
            rows += 1
    return ExportedTable(table, file, rows)


def client_tool_candidates(name: str) -> list[str]:
    """Where PostgreSQL's client program ``name`` may be: on PATH (Debian's is a wrapper that
    picks a version), Debian's per-version ones, then the embedded PostgreSQL's (pgserver
    bundles them)."""
    found = shutil.which(name)
    candidates = [found] if found else []
    candidates += sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    embedded = importlib.util.find_spec("pgserver")
    if embedded is not None and embedded.origin is not None:
        candidates.append(str(Path(embedded.origin).parent / "pginstall" / "bin" / name))
    return candidates


def client_tool(name: str, server_major: int) -> str | None:
    """A ``name`` (pg_dump, pg_restore) of the server's major version or later, which both
    need; None when there is none."""
    for candidate in client_tool_candidates(name):
        if not os.access(candidate, os.X_OK):
            continue
        said = subprocess.run(  # noqa: S603 (a path of ours, no shell)
            [candidate, "--version"], capture_output=True, text=True, check=False
        ).stdout
        version = re.search(r"(\d+)(?:\.\d+)?", said)
        if version is not None and int(version.group(1)) >= server_major:
            return candidate
    return None


def export_pg_dump(database_url: str, tenant: Tenant, directory: Path) -> Path:
    """``pg_dump --format=custom`` of the tenant's schema into ``<schema>.dump``, as the owner
    of the tenant schemas (the login role itself may read none of them)."""
    with psycopg.connect(libpq_url(database_url)) as server:
        server_major = server.info.server_version // 10000
    # pg_dump refuses a server newer than itself.
    pg_dump = client_tool("pg_dump", server_major)
    if pg_dump is None:
        raise ExportRefused(
            f"no pg_dump of PostgreSQL {server_major} or later: install PostgreSQL's client"
            " tools of that version"
        )
    _prepare(directory)
    target = directory / f"{tenant.schema}.dump"
    # pg_dump writes into the file as it finds it, owner only.
    _private_file(target).close()
    # The password goes in the environment: a command line is visible to every local user.
    connection = conninfo_to_dict(libpq_url(database_url))
    password = connection.pop("password", None)
    environment = dict(os.environ)
    if password is not None:
        environment["PGPASSWORD"] = str(password)
    # No shell; every argument is ours, the schema name checked for its shape.
    completed = subprocess.run(  # noqa: S603
        [
            pg_dump,
            "--format=custom",
            f"--schema={checked_schema_name(tenant.schema)}",
            f"--role={TENANT_OWNER_ROLE}",
            "--no-password",
            f"--file={target}",
            f"--dbname={make_conninfo('', **connection)}",
        ],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        target.unlink()
        said = completed.stderr.strip().splitlines() or [f"exit status {completed.returncode}"]
        raise ExportRefused(f"pg_dump failed: {said[0].removeprefix('pg_dump: ')}")
    return target
