"""What reading a GraphQL document costs per request: parse, validate and the guards.

Times the dashboard query (the first 50 deals, each with its step, employee and customers)
through ``build_schema(settings).execute`` with execution skipped, so the figure is everything
that happens before a resolver runs: the extensions, parsing, validation, the depth, alias and
token limits and the cost estimate. Two documents are timed: the same text on every request (a
dashboard refreshing) and a new text on every request (a comment numbers it), which no cache can
answer; each with the document cache on (its default size) and off
(``graphql_document_cache_size=0``), the four taking turns so that their ratios come from the
same moments of the same run. The parts are also timed alone, straight through graphql-core.

With ``--database-url`` (a PostgreSQL server the script may create a scratch database on) it
also times the whole request, serially, through two apps (``TestClient``, no network; the cache
on and off) over 50 seeded deals with 3 customers each, for scale.

    .venv/bin/python bench/graphql_documents.py
    .venv/bin/python bench/graphql_documents.py --database-url postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from graphql import parse, specified_rules, validate
from strawberry.extensions import SchemaExtension
from strawberry.types import ExecutionResult

from dealbase.config import Settings
from dealbase.graphql_api.schema import build_schema

# The document bench/wrk/graphql.lua sends in `make bench`.
DASHBOARD = (Path(__file__).resolve().parent / "queries" / "dashboard.graphql").read_text()
VARIABLES = {"first": 50}
# A setting the code before the cache ignores, so the script times that code too (as if every
# figure were with the cache off).
CACHE_OFF = {"graphql_document_cache_size": 0}


class _SkipExecution(SchemaExtension):
    """Stops a request where execution would begin: Strawberry runs no resolver when an
    ``on_execute`` hook has already set the result."""

    def on_execute(self) -> Iterator[None]:
        self.execution_context.result = ExecutionResult(data={}, errors=None)
        yield


def _figures(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"mean {statistics.fmean(samples) * 1e6:8.1f} µs  median "
        f"{statistics.median(samples) * 1e6:8.1f} µs  p99 {p99 * 1e6:8.1f} µs"
    )


def _timed(
    calls: dict[str, Callable[[int], Any]], repeat: int, warmup: int = 200
) -> dict[str, list[float]]:
    """Times each call ``repeat`` times, the calls taking turns, so a machine busy with other
    work slows each of them alike and their ratios hold."""
    for index in range(warmup):
        for call in calls.values():
            call(-1 - index)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for index in range(repeat):
        for name, call in calls.items():
            started = time.perf_counter()
            call(index)
            samples[name].append(time.perf_counter() - started)
    return samples


def _report(samples: dict[str, list[float]], baseline: str) -> None:
    """Each figure, and its median as a ratio of the baseline's."""
    reference = statistics.median(samples[baseline])
    for name, timed in samples.items():
        ratio = statistics.median(timed) / reference
        print(f"  {name:<34} {_figures(timed)}  x{ratio:5.2f}")


def pre_execution(repeat: int) -> None:
    settings = Settings()
    loop = asyncio.new_event_loop()

    def runner(update: dict[str, Any]) -> Callable[[str], None]:
        schema = build_schema(settings.model_copy(update=update))
        schema.extensions = (*schema.extensions, _SkipExecution)

        def run(query: str) -> None:
            result = loop.run_until_complete(schema.execute(query, VARIABLES))
            assert not result.errors, result.errors

        return run

    cached, uncached = runner({}), runner(CACHE_OFF)
    print(f"pre-execution of the dashboard query, {repeat} requests each (ratio: of the first)")
    _report(
        _timed(
            {
                "same document, cache off": lambda _: uncached(DASHBOARD),
                "same document, cache on": lambda _: cached(DASHBOARD),
                "new document, cache off": lambda index: uncached(f"{DASHBOARD}# {index}"),
                "new document, cache on": lambda index: cached(f"{DASHBOARD}# {index}"),
            },
            repeat,
        ),
        baseline="same document, cache off",
    )
    loop.close()

    graphql_schema = build_schema(settings)._schema
    document = parse(DASHBOARD, max_tokens=settings.graphql_max_tokens)
    print("  parts alone (graphql-core), ratio: of parsing")
    _report(
        _timed(
            {
                "parse": lambda _: parse(DASHBOARD, max_tokens=settings.graphql_max_tokens),
                "validate (specified rules)": lambda _: validate(
                    graphql_schema, document, specified_rules
                ),
            },
            repeat,
        ),
        baseline="parse",
    )


@contextmanager
def _seeded_apps(server: str) -> Iterator[tuple[dict[str, Any], dict[str, str]]]:
    """Two apps on one scratch database of 50 deals: the document cache on, and off."""
    import psycopg
    from fastapi.testclient import TestClient
    from psycopg import sql

    from dealbase.app import create_app
    from dealbase.db.database import Database
    from dealbase.migrations.runner import upgrade_control
    from dealbase.ops import admin
    from dealbase.tenancy.registry.tenants import create_tenant

    name = f"dealbase_bench_graphql_{secrets.token_hex(4)}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    base, _, query = server.partition("?")
    url = f"{base.rpartition('/')[0]}/{name}" + (f"?{query}" if query else "")
    try:
        database = Database(url, pool_size=1)
        with database.control() as connection:
            upgrade_control(connection)
        tenant = create_tenant(database, "bench")
        department = admin.create_department(database, tenant.id, "Sales")
        issued = admin.issue_key(database, tenant.id, department.id, "bench")
        database.dispose()
        headers = {"X-Api-Key": issued.api_key, "X-Department-Id": str(department.id)}
        settings = Settings(
            database_url=url,
            log_level="warning",
            rate_limit_key="100000/s",
            rate_limit_key_burst=1_000_000,
            rate_limit_tenant="100000/s",
            rate_limit_tenant_burst=1_000_000,
        )
        with ExitStack() as stack:
            clients = {
                name: stack.enter_context(
                    TestClient(create_app(settings.model_copy(update=update)))
                )
                for name, update in (("cache off", CACHE_OFF), ("cache on", {}))
            }
            client = clients["cache on"]
            for index in range(50):
                customers = [{"last_name": f"Customer {index}.{n}"} for n in range(3)]
                response = client.post(
                    "/api/v1/integration/deals",
                    json={"name": f"Deal {index}", "volume": 1000 * index, "customers": customers},
                    headers=headers,
                )
                assert response.status_code == 201, response.text
            yield clients, headers
    finally:
        with psycopg.connect(server, autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def whole_request(server: str, repeat: int) -> None:
    with _seeded_apps(server) as (clients, headers):

        def poster(client: Any) -> Callable[[int], None]:
            def post(_: int) -> None:
                response = client.post(
                    "/graphql", json={"query": DASHBOARD, "variables": VARIABLES}, headers=headers
                )
                body = response.json()
                assert "errors" not in body, body
                assert len(body["data"]["deals"]["edges"]) == 50, body

            return post

        print(
            f"whole dashboard request through the app (TestClient, serial, the same document),"
            f" {repeat} requests each (ratio: of the first)"
        )
        samples = _timed({name: poster(client) for name, client in clients.items()}, repeat, 50)
        _report(samples, baseline="cache off")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3000, help="requests timed per figure")
    parser.add_argument("--database-url", help="also time whole requests on a scratch database")
    args = parser.parse_args()
    pre_execution(args.repeat)
    if args.database_url:
        whole_request(args.database_url, max(1, args.repeat // 10))


if __name__ == "__main__":
    main()
