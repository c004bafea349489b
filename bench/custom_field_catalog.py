"""What custom fields cost the shared catalog and the disk: per field, and per indexed field,
measured on real tenants, then scaled to ten thousand tenants at the limits.

    .venv/bin/python bench/custom_field_catalog.py --tenants 20

On a scratch database of its own (made and dropped as `make bench`'s is): N tenants, then on
each of their customers, deals and activities F plain fields (the ten types in turn), then I
indexed ones (filterable text), each through the service as the API defines them. After each
step, pg_catalog's size, pg_class and pg_attribute rows, the database's size and its relations
that have a file. Prints the cost of one field and one indexed field, and what the limits
allow at ten thousand tenants; writes bench/results/custom-field-catalog-<date>.json.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.console import arguments_parser, sayer
from harness.paths import RESULTS
from harness.settings import BenchSettings
from harness.stack import dealbase_cli, scratch_database
from harness.tools import close_results, results_header

from dealbase.db.database import Database
from dealbase.db.schema_changes import SchemaChanges
from dealbase.platform.custom_fields import service
from dealbase.platform.custom_fields.models import CustomFieldFields, FieldType, RecordKind
from dealbase.platform.custom_fields.rules import FIELDS_PER_RECORD, INDEXED_FIELDS_PER_RECORD
from dealbase.platform.validation import validated
from dealbase.tenancy.registry.tenants import create_tenant
from dealbase.tenancy.roles import TENANT_OWNER_ROLE
from dealbase.tenancy.scope import Scope

say = sayer("custom-field-catalog")
RECORDS: tuple[RecordKind, ...] = ("customer", "deal", "activity")
AT_SCALE = 10_000
_CATALOG = (
    "SELECT (SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c"
    "   JOIN pg_namespace n ON n.oid = c.relnamespace"
    "  WHERE n.nspname = 'pg_catalog' AND c.relkind = 'r'),"
    " (SELECT count(*) FROM pg_class), (SELECT count(*) FROM pg_attribute),"
    " pg_database_size(current_database()),"
    " (SELECT count(*) FROM pg_class WHERE relfilenode <> 0 AND relpersistence = 'p')"
)


def catalog(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("CHECKPOINT")
        row = connection.execute(_CATALOG).fetchone()
    assert row is not None
    names = ("catalog_bytes", "pg_class_rows", "pg_attribute_rows", "database_bytes", "files")
    return dict(zip(names, (int(value) for value in row), strict=True))


def definition(record: RecordKind, number: int, *, indexed: bool) -> CustomFieldFields:
    kind = FieldType.TEXT if indexed else list(FieldType)[number % len(FieldType)]
    body: dict[str, Any] = {
        "record": record,
        "name": f"{'indexed' if indexed else 'plain'}_{number}",
        "label": f"Field {number}",
        "type": kind.value,
        "filterable": indexed,
    }
    if kind in (FieldType.SINGLE_SELECT, FieldType.MULTI_SELECT):
        body["options"] = [{"label": label} for label in ("Gold", "Silver", "Bronze")]
    return validated(CustomFieldFields, body)


async def define_all(
    changes: SchemaChanges, scopes: list[Scope], count: int, indexed: bool
) -> None:
    for scope in scopes:
        for record in RECORDS:
            for number in range(count):
                await service.define(changes, scope, definition(record, number, indexed=indexed))


def per_field(before: dict[str, int], after: dict[str, int], fields: int) -> dict[str, float]:
    return {name: round((after[name] - before[name]) / fields, 2) for name in before}


def main() -> int:
    parser = arguments_parser(__doc__)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--fields", type=int, default=FIELDS_PER_RECORD - INDEXED_FIELDS_PER_RECORD)
    parser.add_argument("--indexed", type=int, default=INDEXED_FIELDS_PER_RECORD)
    arguments = parser.parse_args()
    settings = BenchSettings.from_environment()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    figures = results_header(stamp, tenants=arguments.tenants)
    RESULTS.mkdir(exist_ok=True)
    with scratch_database(settings.database_server) as url:
        dealbase_cli(url, "migrate", "--json")
        database = Database(url, pool_size=2)
        changes = SchemaChanges(url, TENANT_OWNER_ROLE)
        try:
            scopes = [
                create_tenant(database, f"catalog-{number}").scope
                for number in range(arguments.tenants)
            ]
            bare = catalog(url)
            asyncio.run(define_all(changes, scopes, arguments.fields, indexed=False))
            plain = catalog(url)
            asyncio.run(define_all(changes, scopes, arguments.indexed, indexed=True))
            indexed = catalog(url)
        finally:
            changes.dispose()
            database.dispose()
    per_tenant_kinds = arguments.tenants * len(RECORDS)
    figures["steps"] = {"bare": bare, "plain": plain, "indexed": indexed}
    figures["per_plain_field"] = per_field(bare, plain, per_tenant_kinds * arguments.fields)
    figures["per_indexed_field"] = per_field(plain, indexed, per_tenant_kinds * arguments.indexed)
    limits = {
        "fields": AT_SCALE * len(RECORDS) * (FIELDS_PER_RECORD - INDEXED_FIELDS_PER_RECORD),
        "indexed": AT_SCALE * len(RECORDS) * INDEXED_FIELDS_PER_RECORD,
    }
    figures["at_limits_for_10000_tenants"] = {
        name: round(
            figures["per_plain_field"][name] * limits["fields"]
            + figures["per_indexed_field"][name] * limits["indexed"]
        )
        for name in bare
    }
    lines = [
        f"{arguments.tenants} tenants, {arguments.fields} plain and {arguments.indexed} indexed"
        " fields on each record kind",
        f"one plain field:   {figures['per_plain_field']}",
        f"one indexed field: {figures['per_indexed_field']}",
        f"at the limits, {AT_SCALE} tenants: {figures['at_limits_for_10000_tenants']}",
    ]
    close_results("custom-field-catalog", stamp, figures, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
