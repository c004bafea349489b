"""A deal's create on a distributed schema (``deals.creation``): the department's first step read
by a round trip of its own, then the deal, its customers, their links and their events in
statements Citus routes whole, sent with the COMMIT. Its answer, its events (their data to the
character), its errors and what it leaves written are the single server's, whose one statement
makes them. And an upserted deal's insert, given its first step the same way."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest
from sqlalchemy import Text, cast, delete, select

from dealbase.db import transactions
from dealbase.db.database import Database
from dealbase.errors import Conflict, DomainError
from dealbase.platform.custom_fields.definitions import DEFINITIONS
from dealbase.platform.customers import service as customers
from dealbase.platform.customers.models import CustomerFields
from dealbase.platform.deals import service as deals
from dealbase.platform.deals.models import DealCreate, DealUpsert
from dealbase.platform.resources import customer_json, deal_json
from dealbase.platform.tables import deals as deals_table
from dealbase.platform.tables import events, steps
from dealbase.platform.validation import validated
from dealbase.platform.webhooks import service as endpoints
from dealbase.platform.webhooks.models import Checked, WebhookEndpointFields
from dealbase.tenancy.scope import Scope
from tests.citus.conftest import forget_wakeups, wakeups
from tests.citus.plans import assert_routed_whole, statements_sent
from tests.platform.deals.test_create import DEAL_CREATES, rows_written
from tests.platform.test_resources import EVERY_FIELD
from tests.support import TenantWorld, build_tenant

SERVERS = ("single server", "distributed schema")


@pytest.fixture
def on(request: pytest.FixtureRequest) -> Callable[[str], tuple[Database, TenantWorld]]:
    """A fresh tenant of the single server, or of the cluster (a distributed schema), with its
    database."""

    def tenant(server: str) -> tuple[Database, TenantWorld]:
        distributed = server == "distributed schema"
        database: Database = request.getfixturevalue(
            "cluster_database" if distributed else "database"
        )
        return database, build_tenant(database, distributed=distributed)

    return tenant


def _deal(customers_given: list[dict[str, Any]], **fields: Any) -> DealCreate:
    return validated(
        DealCreate, {"name": "Engine 'ünïcødé'", **fields, "customers": customers_given}
    )


def _scope(world: TenantWorld) -> Scope:
    return world.tenant.scope.in_department(world.department.id)


def _events(database: Database, world: TenantWorld) -> list[tuple[str, str]]:
    """The tenant's events in the order they are numbered: (type, data as its text)."""
    with database.unit_of_work(world.tenant.scope) as uow:
        rows = uow.connection.execute(
            select(events.c.type, cast(events.c.data, Text)).order_by(
                events.c.sequence, events.c.id
            )
        )
        return [(row[0], row[1]) for row in rows]


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_MOMENT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")


def _masked(texts: list[str]) -> list[str]:
    """``texts`` with each id and moment named by its order of first appearance in them: equal
    for two servers' writes of the same values, to the character, ids and clocks aside."""
    seen: dict[str, str] = {}

    def named(kind: str) -> Callable[[re.Match[str]], str]:
        return lambda match: seen.setdefault(match[0], f"<{kind} {len(seen)}>")

    return [_MOMENT.sub(named("moment"), _UUID.sub(named("id"), text)) for text in texts]


@DEAL_CREATES
def test_a_create_answers_and_records_what_the_single_server_does(
    on: Callable[[str], tuple[Database, TenantWorld]],
    given: list[dict[str, Any]],
    fields: dict[str, Any],
) -> None:
    written: dict[str, list[str]] = {}
    for server in SERVERS:
        database, world = on(server)
        with database.unit_of_work(_scope(world)) as uow:
            deal_id, version, text = deals.create_later_as_json(uow, _deal(given, **fields)).read()
        with database.unit_of_work(_scope(world)) as uow:
            shown = deal_json(deals.RECORD.get(uow, deal_id))
        recorded = _events(database, world)

        assert version == 1
        assert json.loads(text) == shown and list(json.loads(text)) == list(shown)
        assert [(kind, json.loads(data)) for kind, data in recorded] == [
            *(("customer.created", customer) for customer in shown["customers"]),
            ("deal.created", shown),
        ]
        # The event's data is the answer, as PostgreSQL wrote it.
        assert recorded[-1][1] == text
        written[server] = _masked([text, *(f"{kind} {data}" for kind, data in recorded)])

    assert written["distributed schema"] == written["single server"]


def test_a_create_read_before_its_commit_is_the_deal_as_read_again(
    on: Callable[[str], tuple[Database, TenantWorld]],
) -> None:
    database, world = on("distributed schema")
    with database.unit_of_work(_scope(world)) as uow:
        created = deals.create(uow, _deal([{"last_name": "A"}, EVERY_FIELD, {"last_name": "C"}]))
    with database.unit_of_work(_scope(world)) as uow:
        assert deals.RECORD.get(uow, created.id) == created
    assert [customer_json(customer) for customer in created.customers] == [
        json.loads(data) for kind, data in _events(database, world) if kind == "customer.created"
    ]


def _failure(database: Database, world: TenantWorld, taken: str) -> DomainError:
    """The error of a create that meets ``taken``: an external id taken (the deal's, a
    customer's, or both), or no step to start in."""
    scope = _scope(world)
    with database.unit_of_work(scope) as uow:
        deals.create(uow, _deal([{"last_name": "Kept", "external_id": "crm-1"}], external_id="o-1"))
        if taken == "no step":
            uow.connection.execute(delete(deals_table))
            uow.connection.execute(delete(steps))
    before = rows_written(database, world)
    fields = _deal(
        [
            {"last_name": "New"},
            {
                "last_name": "Again",
                "external_id": "crm-1" if taken in ("a customer's", "both") else None,
            },
        ],
        external_id="o-1" if taken in ("the deal's", "both") else None,
    )
    with pytest.raises(DomainError) as raised, database.unit_of_work(scope) as uow:
        deals.create_later_as_json(uow, fields)
    assert rows_written(database, world) == before, "the failed create wrote something"
    return raised.value


@pytest.mark.parametrize("taken", ["the deal's", "a customer's", "both", "no step"])
def test_a_failed_create_writes_nothing_and_fails_as_on_a_single_server(
    on: Callable[[str], tuple[Database, TenantWorld]], taken: str
) -> None:
    failed = {server: _failure(*on(server), taken) for server in SERVERS}

    single, distributed = failed["single server"], failed["distributed schema"]
    assert (type(distributed), str(distributed)) == (type(single), str(single))
    assert ("Another deal" in str(distributed)) is (taken in ("the deal's", "both"))
    assert (type(distributed) is Conflict) is (taken == "no step")


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many statements each round trip the units of work meanwhile send holds."""
    counted: list[int] = []
    alone = transactions._round_trip

    def counting(connection: Any, calls: list[Any]) -> Any:
        counted.append(len(calls))
        return alone(connection, calls)

    monkeypatch.setattr(transactions, "_round_trip", counting)
    return counted


@pytest.fixture
def fields_kept() -> Iterator[None]:
    """The tenants' custom fields kept in the process once read, as an app's are while its
    LISTEN connection hears of their changes (``custom_fields.definitions``)."""
    DEFINITIONS.heard(True)
    yield
    DEFINITIONS.heard(False)


@pytest.mark.parametrize("as_json", [True, False], ids=["REST", "GraphQL"])
def test_a_create_is_two_round_trips_of_statements_routed_whole(
    cluster_database: Database,
    citus_url: str,
    monkeypatch: pytest.MonkeyPatch,
    round_trips: list[int],
    fields_kept: None,
    as_json: bool,
) -> None:
    """The first step read, then everything else with the COMMIT (GraphQL's, which reads the
    deal before, then the COMMIT alone, as on a single server): an insert into each table,
    whatever the number of customers (a row each)."""
    world = build_tenant(cluster_database, distributed=True)
    fields = _deal([{"last_name": "A"}, {"last_name": "B", "external_id": "crm-2"}])
    with cluster_database.unit_of_work(_scope(world)) as uow:
        deals.RECORD.fitted(uow)  # the tenant's fields read, and kept
    round_trips.clear()  # the tenant's making's
    with statements_sent(monkeypatch) as sent, cluster_database.unit_of_work(_scope(world)) as uow:
        if as_json:
            deals.create_later_as_json(uow, fields)
        else:
            deals.create(uow, fields)

    assert len(round_trips) == (2 if as_json else 3), round_trips
    inserts = [each.sql.split(" (")[0] for each in sent if each.sql.startswith("INSERT")]
    assert [re.sub(r'"?t_[0-9a-f]{32}"?\.', "", each) for each in inserts] == [
        "INSERT INTO deals",
        "INSERT INTO customers",
        "INSERT INTO deal_customers",
        "INSERT INTO events",
    ]
    assert_routed_whole(citus_url, sent)


def test_a_customer_create_beside_it_keeps_its_own_event_and_one_sequence(
    on: Callable[[str], tuple[Database, TenantWorld]],
) -> None:
    """A deal's create and a customer's in one transaction: each event once, in the order they
    were recorded, all of the transaction's one number (``events.sequence``), which the
    statements Citus evaluates on the coordinator take once and keep."""
    database, world = on("distributed schema")
    with database.unit_of_work(_scope(world)) as uow:
        alone = customers.create(uow, CustomerFields(last_name="Alone"))
        created = deals.create(uow, _deal([{"last_name": "B"}, {"last_name": "C"}]))
        customers.create(uow, CustomerFields(last_name="After"))
    assert [(kind, json.loads(data)["id"]) for kind, data in _events(database, world)] == [
        ("customer.created", str(alone.id)),
        *(("customer.created", str(customer.id)) for customer in created.customers),
        ("deal.created", str(created.id)),
        ("customer.created", mock.ANY),
    ]
    with database.unit_of_work(world.tenant.scope) as uow:
        sequences = uow.connection.execute(select(events.c.sequence).distinct()).all()
    assert len(sequences) == 1, sequences


def test_a_create_wakes_the_webhook_worker_where_an_endpoint_listens(
    on: Callable[[str], tuple[Database, TenantWorld]], citus_url: str
) -> None:
    database, world = on("distributed schema")
    scope = _scope(world)
    with database.unit_of_work(scope) as uow:
        deals.create_later_as_json(uow, _deal([]))
    try:
        assert wakeups(citus_url, scope.schema) == 0
        with database.unit_of_work(scope) as uow:
            endpoints.create(
                uow, Checked(WebhookEndpointFields(url="https://8.8.8.8/hooks", events=["*"]))
            )
        woken = wakeups(citus_url, scope.schema)
        with database.unit_of_work(scope) as uow:
            deals.create_later_as_json(uow, _deal([{"last_name": "A"}]))
        assert wakeups(citus_url, scope.schema) == woken + 1
    finally:
        forget_wakeups(citus_url, scope.schema)


@pytest.mark.parametrize("where", ["its first step", "a step given", "no step"])
def test_an_upserted_deal_starts_where_it_does_on_a_single_server(
    on: Callable[[str], tuple[Database, TenantWorld]],
    citus_url: str,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """Its insert is given the first step read before it, or the step the body names; each of
    its statements is routed whole."""
    found: dict[str, tuple[str, Any]] = {}
    for server in SERVERS:
        database, world = on(server)
        scope = _scope(world)
        with database.unit_of_work(scope) as uow:
            ordered = uow.connection.execute(select(steps.c.id).order_by(steps.c.position))
            step_ids = [step_id for (step_id,) in ordered]
            if where == "no step":
                uow.connection.execute(delete(steps))
        given = {"step_id": step_ids[1]} if where == "a step given" else {}
        fields = DealUpsert(name="Upserted", **given)
        with statements_sent(monkeypatch) as sent:
            try:
                with database.unit_of_work(scope) as uow:
                    result = deals.RECORD.upsert(uow, "deal-1", fields).read()
            except Conflict as conflict:
                found[server] = ("conflict", str(conflict))
            else:
                assert result.record is not None
                found[server] = (result.outcome, step_ids.index(result.record.step_id))
        if server == "distributed schema":
            assert_routed_whole(citus_url, sent)

    assert found["distributed schema"] == found["single server"]
    outcome, detail = found["single server"]
    if where == "no step":
        assert outcome == "conflict" and "no pipeline steps" in detail
    else:
        assert (outcome, detail) == ("created", 0 if where == "its first step" else 1)
