"""The least a FastAPI service does for dealbase's customer calls: the baseline of `make bench`.

Per request it looks the API key up in the control schema (one ``SELECT``, no cache), checks the
secret's SHA-256 and the department, runs one statement in the tenant's schema and answers with
the row as JSON made by orjson:

- ``POST /api/v1/integration/customers``: ``INSERT ... RETURNING`` (201 and ``Location``);
- ``GET /api/v1/integration/customers/{id}``: one ``SELECT`` by id and department;
- ``GET /api/v1/integration/customers?limit=N``: the first N customers of the department.

Written the way the fastest minimal version is: psycopg 3's ``AsyncConnectionPool`` of autocommit
connections (no ``BEGIN``/``COMMIT`` round trips), statements prepared by psycopg from their
second use on, the SQL of a tenant schema composed once, no pydantic and no FastAPI parameter
models, uvloop and httptools through ``uvicorn[standard]``. What it leaves out, and dealbase does,
is listed in bench/README.md.

    BASELINE_DATABASE_URL=postgresql://... .venv/bin/uvicorn --app-dir bench/baselines \\
        fastapi_psycopg:app --workers 2 --no-access-log
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

PREFIX = "/api/v1/integration"
POOL_SIZE = int(os.environ.get("BASELINE_POOL_SIZE", "10"))
TEXT_FIELDS = (
    "last_name",
    "first_name",
    "company",
    "website",
    "title",
    "phone_1",
    "phone_2",
    "phone_3",
    "phone_1_label",
    "phone_2_label",
    "phone_3_label",
    "email",
    "postcode",
    "address",
    "address_addition",
    "city",
    "country",
    "state",
    "contact_origin",
)
INPUT_FIELDS = (*TEXT_FIELDS, "birthday", "note")
COLUMNS = ("id", *INPUT_FIELDS, "created_at", "updated_at")
KEY_SHAPE = re.compile(r"^dbk_([0-9a-f]{32})_([A-Za-z0-9_-]{43})$")
LOOKUP_KEY = """
SELECT k.secret_hash, k.department_id, k.revoked_at IS NOT NULL, k.tenant_id, t.schema_name
  FROM control.api_keys AS k JOIN control.tenants AS t ON t.id = k.tenant_id
  WHERE k.id = %s
"""
JSON = "application/json"


def uuid7() -> uuid.UUID:
    """A UUIDv7 (time first), as dealbase makes its ids, so inserts land at the index's edge."""
    millis = time.time_ns() // 1_000_000
    random = int.from_bytes(os.urandom(10), "big")
    value = (millis & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (random >> 62 & 0xFFF) << 64
    return uuid.UUID(int=value | 0b10 << 62 | random & ((1 << 62) - 1))


@dataclass(frozen=True, slots=True)
class TenantSql:
    """The statements of one tenant schema, composed once."""

    insert: str
    get: str
    page: str


_tenant_sql: dict[str, TenantSql] = {}


def tenant_sql(schema: str) -> TenantSql:
    found = _tenant_sql.get(schema)
    if found is None:
        table = sql.Identifier(schema, "customers")
        columns = sql.SQL(", ").join(map(sql.Identifier, COLUMNS))
        insert = sql.SQL(
            "INSERT INTO {table} (id, department_id, {inputs}, created_at, updated_at)"
            " VALUES (%s, %s, {placeholders}, now(), now()) RETURNING {columns}"
        ).format(
            table=table,
            inputs=sql.SQL(", ").join(map(sql.Identifier, INPUT_FIELDS)),
            placeholders=sql.SQL(", ").join(sql.Placeholder() * len(INPUT_FIELDS)),
            columns=columns,
        )
        get = sql.SQL("SELECT {columns} FROM {table} WHERE id = %s AND department_id = %s").format(
            columns=columns, table=table
        )
        page = sql.SQL(
            "SELECT {columns} FROM {table} WHERE department_id = %s ORDER BY id LIMIT %s"
        ).format(columns=columns, table=table)
        found = TenantSql(insert.as_string(), get.as_string(), page.as_string())
        _tenant_sql[schema] = found
    return found


pool = AsyncConnectionPool(
    os.environ.get("BASELINE_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    min_size=POOL_SIZE,
    max_size=POOL_SIZE,
    kwargs={"autocommit": True, "prepare_threshold": 1, "options": "-c TimeZone=UTC"},
    open=False,
)


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    await pool.open(wait=True)
    yield
    await pool.close()


app = FastAPI(lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)


def _answer(status: int, body: object, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body, option=orjson.OPT_UTC_Z), status, headers, JSON)


UNAUTHENTICATED = _answer(401, {"code": "unauthenticated"})
FORBIDDEN = _answer(403, {"code": "forbidden"})
NOT_FOUND = _answer(404, {"code": "not_found"})


@dataclass(frozen=True, slots=True)
class Caller:
    tenant_id: uuid.UUID
    department_id: uuid.UUID
    sql: TenantSql


async def authenticate(connection: AsyncConnection[Any], request: Request) -> Caller | Response:
    match = KEY_SHAPE.match(request.headers.get("x-api-key", ""))
    if match is None:
        return UNAUTHENTICATED
    cursor = await connection.execute(LOOKUP_KEY, (uuid.UUID(hex=match.group(1)),))
    row = await cursor.fetchone()
    digest = hashlib.sha256(match.group(2).encode()).digest()
    if row is None or row[2] or not hmac.compare_digest(digest, row[0]):
        return UNAUTHENTICATED
    if row[1] is None or request.headers.get("x-department-id") != str(row[1]):
        return FORBIDDEN
    return Caller(row[3], row[1], tenant_sql(row[4]))


def _customer(caller: Caller, row: tuple[Any, ...]) -> dict[str, Any]:
    customer = dict(zip(COLUMNS, row, strict=True))
    customer["tenant_id"] = caller.tenant_id
    return customer


@app.post(f"{PREFIX}/customers")
async def create_customer(request: Request) -> Response:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        return _answer(400, {"code": "malformed_json"})
    if not isinstance(body, dict) or not isinstance(body.get("last_name"), str):
        return _answer(422, {"code": "validation_failed"})
    async with pool.connection() as connection:
        caller = await authenticate(connection, request)
        if isinstance(caller, Response):
            return caller
        values = [uuid7(), caller.department_id, *(body.get(name) for name in INPUT_FIELDS)]
        cursor = await connection.execute(caller.sql.insert, values)
        row = await cursor.fetchone()
    assert row is not None
    return _answer(201, _customer(caller, row), {"location": f"{PREFIX}/customers/{row[0]}"})


@app.get(f"{PREFIX}/customers/{{customer_id}}")
async def get_customer(customer_id: str, request: Request) -> Response:
    try:
        wanted = uuid.UUID(customer_id)
    except ValueError:
        return NOT_FOUND
    async with pool.connection() as connection:
        caller = await authenticate(connection, request)
        if isinstance(caller, Response):
            return caller
        cursor = await connection.execute(caller.sql.get, (wanted, caller.department_id))
        row = await cursor.fetchone()
    if row is None:
        return NOT_FOUND
    return _answer(200, _customer(caller, row))


@app.get(f"{PREFIX}/customers")
async def list_customers(request: Request) -> Response:
    limit_text = request.query_params.get("limit", "25")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= 100:
        return _answer(422, {"code": "validation_failed"})
    limit = int(limit_text)
    async with pool.connection() as connection:
        caller = await authenticate(connection, request)
        if isinstance(caller, Response):
            return caller
        cursor = await connection.execute(caller.sql.page, (caller.department_id, limit + 1))
        rows = await cursor.fetchall()
    more = len(rows) > limit
    data = [_customer(caller, row) for row in rows[:limit]]
    return _answer(200, {"next_cursor": data[-1]["id"].hex if more else None, "data": data})
