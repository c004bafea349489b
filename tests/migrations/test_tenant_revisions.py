"""Data migrations of the tenant tree, checked on a schema made at the revision before them."""

from __future__ import annotations

from sqlalchemy import text

from dealbase.migrations.runner import upgrade_tenant
from dealbase.tenancy.database import Database


def test_t0003_marks_the_default_pipelines_won_and_lost_steps(database: Database) -> None:
    schema = "t_" + "3" * 32
    with database.control() as connection:
        upgrade_tenant(connection, schema, "t0002")
        connection.execute(
            text(
                f"""
                INSERT INTO "{schema}".departments VALUES
                    ('00000000-0000-7000-8000-000000000001', 'Sales', now(), now());
                INSERT INTO "{schema}".steps (id, department_id, name, position, created_at, updated_at)
                SELECT gen_random_uuid(), '00000000-0000-7000-8000-000000000001', name, position, now(), now()
                FROM unnest(ARRAY['Lead', 'Won', 'Lost']) WITH ORDINALITY AS s(name, position);
                """
            )
        )
        upgrade_tenant(connection, schema)
        rows = connection.execute(text(f'SELECT name, kind FROM "{schema}".steps')).all()
        kinds = {str(name): str(kind) for name, kind in rows}
        connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))

    assert kinds == {"Lead": "open", "Won": "won", "Lost": "lost"}
