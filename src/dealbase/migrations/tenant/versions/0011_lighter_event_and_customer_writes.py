"""What PostgreSQL does for each event and customer written, made smaller; the rows and the JSON
they show stay the same.

- ``customer_api_json`` (t0010) returns one expression, ``row_to_json`` of a row of the schema's
  type ``customer_api_shape`` (the JSON's names, in its order). PL/pgSQL evaluates a body of one
  expression directly, where t0010's ``SELECT ... FROM (SELECT ...)`` started an executor for
  each call: the same JSON text, for less of PostgreSQL's work at every write of a customer.
- The events' position key is partial, ``WHERE position IS NOT NULL``: an event goes in
  unnumbered, and its null position took an entry in the key that no read looks for.
- The events' ``data`` and ``previous`` are compressed with lz4 where the server has it (pglz
  stays where it does not): a deal's event (the deal and its customers) passes PostgreSQL's
  2 kB threshold, and lz4 compresses it for less CPU than pglz.

Each change was counted in PostgreSQL's instructions (a callgrind replay): commit 97ed3bb.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from alembic import op

revision = "t0011"
down_revision = "t0010"


def _t0010() -> ModuleType:
    """Revision t0010's module: the function's arguments and its definition before this one."""
    path = Path(__file__).with_name("0010_customers_keep_their_json.py")
    spec = importlib.util.spec_from_file_location("dealbase_tenant_t0010", path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_SHAPE = "customer_api_shape"
# Written in by ``_run_in_schema``: the tenant's id as a text literal, and the schema's name.
_TENANT = "TENANT_ID"
_SCHEMA = "SCHEMA_NAME"


def _definitions() -> tuple[str, str]:
    """The type, and the function that returns its row as JSON."""
    earlier = _t0010()
    names = ("id", "external_id", "tenant_id", *earlier._TEXT[1:], "birthday", "note")
    shape = ", ".join(f"{name} text" for name in (*names, "created_at", "updated_at"))
    shown = ", ".join(
        [
            "id::text",
            "external_id",
            f"{_TENANT}::text",
            *earlier._TEXT[1:],
            "to_char(birthday, 'YYYY-MM-DD')",
            "note",
            f"to_char(created_at AT TIME ZONE 'UTC', {earlier._TIMESTAMP})",
            f"to_char(updated_at AT TIME ZONE 'UTC', {earlier._TIMESTAMP})",
        ]
    )
    function = (
        earlier._function()
        .split(" AS $body$")[0]
        .replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    )
    body = f"BEGIN RETURN row_to_json(ROW({shown})::{_SCHEMA}.{_SHAPE}); END"
    return f"CREATE TYPE {_SHAPE} AS ({shape})", f"{function} AS $body${body}$body$"


def _run_in_schema(statement: str) -> None:
    """Runs ``statement`` with the tenant's id and the schema's name written in: the runner's
    search_path names the tenant's schema first, and its name, past "t_", is the tenant's id in
    hex. (Written in by concatenation: a percent sign in this text reaches PostgreSQL doubled,
    which format() would read as a literal one.)"""
    written = {
        _TENANT: "quote_literal(CAST(CAST(substr(current_schema(), 3) AS uuid) AS text))",
        _SCHEMA: "quote_ident(current_schema())",
    }
    pieces = [
        written.get(part, f"$piece${part}$piece$")
        for part in re.split(f"({_TENANT}|{_SCHEMA})", statement)
    ]
    op.execute(f"DO $do$ BEGIN EXECUTE {' || '.join(pieces)}; END $do$")


def upgrade() -> None:
    shape, function = _definitions()
    op.execute(shape)
    _run_in_schema(function)
    op.drop_constraint("events_department_id_position_key", "events", type_="unique")
    op.create_index(
        "events_position",
        "events",
        ["department_id", "position"],
        unique=True,
        postgresql_where=sa.text("position IS NOT NULL"),
    )
    # A server built without lz4 refuses the method (feature_not_supported): pglz stays.
    op.execute(
        "DO $do$ BEGIN"
        " ALTER TABLE events ALTER COLUMN data SET COMPRESSION lz4,"
        " ALTER COLUMN previous SET COMPRESSION lz4;"
        " EXCEPTION WHEN feature_not_supported THEN NULL; END $do$"
    )


def downgrade() -> None:
    op.execute(
        "ALTER TABLE events ALTER COLUMN data SET COMPRESSION pglz,"
        " ALTER COLUMN previous SET COMPRESSION pglz"
    )
    op.drop_index("events_position", "events")
    op.create_unique_constraint(
        "events_department_id_position_key", "events", ["department_id", "position"]
    )
    _run_in_schema(_t0010()._function().replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
    op.execute(f"DROP TYPE {_SHAPE}")
