"""Customers no longer keep their JSON in their rows: the column ``api_json`` (t0010), the
function ``customer_api_json`` that computed it and its type ``customer_api_shape`` (t0011) go.

A record's JSON is declared once, in the code (``platform.resources``), and PostgreSQL makes a
customer's from its row when it is read or written, as it makes a deal's and an activity's: no
migration spells out the API's shape, and a change of it is no migration.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "t0012"
down_revision = "t0011"


def upgrade() -> None:
    op.execute("ALTER TABLE customers DROP COLUMN api_json")
    op.execute("DROP FUNCTION customer_api_json")
    op.execute("DROP TYPE customer_api_shape")


def _revision(file_name: str) -> ModuleType:
    path = Path(__file__).with_name(file_name)
    spec = importlib.util.spec_from_file_location(f"dealbase_tenant_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def downgrade() -> None:
    # The type and the function as t0011 made them, then t0010's column (one rewrite).
    t0011 = _revision("0011_lighter_event_and_customer_writes.py")
    shape, function = t0011._definitions()
    op.execute(shape)
    t0011._run_in_schema(function)
    arguments = ", ".join(_revision("0010_customers_keep_their_json.py")._ARGUMENTS)
    op.execute(
        "ALTER TABLE customers ADD COLUMN api_json json"
        f" GENERATED ALWAYS AS (customer_api_json({arguments})) STORED"
    )
