"""A tenant moved from one Citus worker to the other under writes (bench/citus.py's part 3):
what the writers and an ordered webhook endpoint see before, during and after the move, and
whether every answer, row and delivery is as it must be."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg
from psycopg import sql

from dealbase.platform.events.service import number_all_committed
from dealbase.tenancy.registry.placement import tenant_node
from dealbase.tenancy.scope import Scope
from harness import seed as seeding
from harness.cluster import Made, Place, Served, make_tenant, postmasters, say, workers
from harness.proc import tree_cpu_seconds
from harness.settings import BenchSettings
from harness.stack import REST_PREFIX, Tenant, analyze
from harness.writers import WRITERS, Writers, WriterTenant, checked, window

BATCH = 1000


# After the writers stop: how long deliveries may take to arrive, and to show a duplicate.
DELIVERY_STALL_SECONDS = 60.0


DUPLICATE_GRACE_SECONDS = 3.0


def _seed_batches(base_url: str, tenant: Tenant, customers: int) -> float:
    """MOVE_CUSTOMERS customers by POST /customers/batch, BATCH at a time; the seconds."""
    started = time.perf_counter()
    with httpx.Client(
        base_url=base_url + REST_PREFIX, headers=tenant.headers, timeout=300
    ) as client:
        for first in range(0, customers, BATCH):
            operations = [
                {
                    "op": "create",
                    "data": {
                        "last_name": f"Held {index:06d}",
                        "first_name": "Grace",
                        "email": f"held{index}@example.com",
                        "city": "Arlington",
                    },
                }
                for index in range(first, min(first + BATCH, customers))
            ]
            response = client.post(
                "/customers/batch",
                content=orjson.dumps({"operations": operations}),
                headers={"content-type": "application/json"},
            )
            results = response.json().get("results") if response.status_code == 200 else None
            if not results or any(r.get("status") != 201 for r in results):
                raise seeding.SeedFailed(
                    f"POST /customers/batch answered {response.status_code}: {response.text[:500]}"
                )
    return time.perf_counter() - started


def move_part(
    cluster: Place, made: Made, settings: BenchSettings, logs: Path, customers: int, served: Served
) -> dict[str, Any]:
    import webhooks  # the receiver of bench/webhooks.py (it imports dealbase itself)

    figures: dict[str, Any] = {"customers_held": customers, "writers": WRITERS}
    failures: list[str] = []
    tenant = make_tenant(cluster, made, "citus-bench-move", employees=0)
    base_url = served.service.base_url
    say(f"move: seeding {customers:,} customers into {tenant.schema} in batches of {BATCH}")
    seconds = _seed_batches(base_url, tenant, customers)
    figures["seed_seconds"] = round(seconds, 2)
    figures["seed_customers_per_second"] = round(customers / seconds, 1)
    # Their events get positions once read (the events feed, a webhook endpoint's creation),
    # a thousand a statement: numbered here, timed, before the endpoint below would.
    started = time.perf_counter()
    scope = Scope(tenant_id=uuid.UUID(tenant.tenant_id), schema=tenant.schema)
    with cluster.database.unit_of_work(scope) as uow:
        number_all_committed(uow, [uuid.UUID(tenant.department_id)])
    figures["numbering_seconds"] = round(time.perf_counter() - started, 2)
    analyze(cluster.url, tenant.schema)
    with ExitStack() as stack:
        receiver = webhooks.Receiver(logs / "receiver.log")
        stack.callback(receiver.stop)
        tag = f"move-{tenant.schema}"
        created = httpx.post(
            f"{base_url}{REST_PREFIX}/webhooks",
            json={"url": receiver.url(tag), "events": ["customer.created"], "ordered": True},
            headers=tenant.headers,
            timeout=60,
        )
        if created.status_code != 201:
            raise seeding.SeedFailed(
                f"POST /webhooks answered {created.status_code}: {created.text[:500]}"
            )
        worker = webhooks.Worker(
            cluster.url, logs / "worker-cluster.log", environment=cluster.environment()
        )
        stack.callback(worker.stop)
        worker.wait_ready()
        source = tenant_node(cluster.url, tenant.schema)
        if source is None:
            raise seeding.SeedFailed(f"{tenant.schema} is not a distributed schema")
        target = next(node for node in workers(cluster.url) if node != source)
        say(f"move: {WRITERS} writers for {settings.seconds} s, then the move {source} -> {target}")
        # The source worker's CPU in each window: what the copy costs it beside the writes.
        source_server = postmasters(cluster)[f"worker {source.port}"]
        cpu_at: list[float] = []
        writer_tenant = WriterTenant(tenant.schema, tenant.api_key, tenant.department_id)
        with Writers(base_url, [[writer_tenant]] * WRITERS, "move") as writers:
            time.sleep(1)  # the writers' first requests (connections, a warm server)
            before_start = time.monotonic()
            cpu_at.append(tree_cpu_seconds(source_server))
            time.sleep(settings.seconds)
            command_start = time.monotonic()
            cpu_at.append(tree_cpu_seconds(source_server))
            moved, took = cluster.cli(
                "tenant", "move", tenant.tenant_id, "--node", str(target), "--mode", "auto"
            )
            move_end = time.monotonic()
            cpu_at.append(tree_cpu_seconds(source_server))
            # The move itself, as the command timed it (its start-up and lookup left out).
            move_start = move_end - float(moved["seconds"])
            time.sleep(settings.seconds)
            after_end = time.monotonic()
        # The command's own time around a move: the same command again, with nothing to move.
        again, again_took = cluster.cli("tenant", "move", tenant.tenant_id, "--node", str(target))
        answers = sorted(writers.answers, key=lambda a: a.ended)
        figures.update(
            source=str(source),
            target=str(target),
            placed_after=str(tenant_node(cluster.url, tenant.schema)),
            move_seconds=moved["seconds"],
            move_command_seconds=round(took, 2),
            command_with_nothing_to_move_seconds=round(again_took, 2),
            nothing_moved=again["from"] is None,
            before=window(answers, before_start, move_start),
            during=window(answers, move_start, move_end),
            after=window(answers, move_end, after_end),
            # CPU seconds a second of the source worker's server: while only the writers ran,
            # and from the move command's start to the move's end (its start-up included).
            source_cpu_per_second_before=round(
                (cpu_at[1] - cpu_at[0]) / (command_start - before_start), 3
            ),
            source_cpu_per_second_during_the_command=round(
                (cpu_at[2] - cpu_at[1]) / (move_end - command_start), 3
            ),
        )
        answers_figures, answers_failures, answered_rows = checked(answers, cluster.url, "move")
        figures.update(answers_figures)
        failures += answers_failures
        answered = {customer for _, customer in answered_rows}
        with psycopg.connect(cluster.url) as connection:
            held = connection.execute(
                sql.SQL("SELECT count(*) FROM {}").format(
                    sql.Identifier(tenant.schema, "customers")
                )
            ).fetchone()
        figures["rows_after"] = held[0] if held else None
        # Deliveries: every created customer once, each writer's in its order.
        receiver.wait_for(tag, len(answered), stall=DELIVERY_STALL_SECONDS)
        time.sleep(DUPLICATE_GRACE_SECONDS)
        arrivals = receiver.arrivals(tag)
        delivered: Counter[str] = Counter()
        last_sequence: dict[str, int] = {}
        out_of_order = 0
        for arrival in arrivals:
            data = orjson.loads(arrival.body)["data"]
            delivered[data["id"]] += 1
            writer, _, number = data["last_name"].removeprefix("move-").partition("-")
            if int(number) <= last_sequence.get(writer, 0):
                out_of_order += 1
            last_sequence[writer] = int(number)
        figures["deliveries"] = len(arrivals)
        figures["deliveries_lost"] = len(answered - set(delivered))
        figures["deliveries_duplicated"] = sum(n - 1 for n in delivered.values() if n > 1)
        figures["deliveries_of_rows_without_a_201"] = len(set(delivered) - answered)
        figures["deliveries_out_of_writer_order"] = out_of_order
        if figures["deliveries_lost"] or figures["deliveries_duplicated"] or out_of_order:
            failures.append(
                f"deliveries: {figures['deliveries_lost']} lost, {figures['deliveries_duplicated']}"
                f" sent twice, {out_of_order} out of a writer's order"
            )
        figures["worker_errors"] = worker.problems(("error",))[:5]
    figures["failures"] = failures
    return figures
