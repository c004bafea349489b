"""Reads on the workers, without a cluster: where a schema lives is looked up once however many
reads ask, believed until the clock passes its time, looked up again after a failure; a
worker's conninfo is the coordinator's with the node's host and port; the setting is refused
where it cannot work. (tests/citus/test_worker_reads.py: the reads on a real cluster.)"""

from __future__ import annotations

import asyncio

import pytest
from psycopg.conninfo import conninfo_to_dict

from dealbase.config import SettingsError, load_settings
from dealbase.db.database import Database
from dealbase.db.pool import ConnectionTenants, PoolSettings
from dealbase.db.worker_reads import PLACEMENT_SECONDS, Placements, WorkerNode, WorkerReads

WORKER = WorkerNode("10.0.0.7", 5433)
SETTINGS = PoolSettings(
    tenants=ConnectionTenants(None),
    max_size=2,
    timeout=1.0,
    max_lifetime=60.0,
    kwargs={"autocommit": True},
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lookups:
    """A coordinator that answers each lookup when told to, and counts them."""

    def __init__(self, node: WorkerNode | None = WORKER) -> None:
        self.node = node
        self.asked: list[str] = []
        self.answer = asyncio.Event()
        self.answer.set()
        self.fail: Exception | None = None

    async def __call__(self, schema: str) -> WorkerNode | None:
        self.asked.append(schema)
        await self.answer.wait()
        if self.fail is not None:
            raise self.fail
        return self.node


def test_a_placement_is_looked_up_once_and_believed_until_it_expires() -> None:
    async def test() -> None:
        clock, lookups = Clock(), Lookups()
        placements = Placements(lookups, clock=clock)
        assert await placements.node_of("t_a") == WORKER
        clock.now += PLACEMENT_SECONDS - 1
        assert await placements.node_of("t_a") == WORKER
        assert lookups.asked == ["t_a"]
        lookups.node = WorkerNode("10.0.0.8", 5433)  # moved
        clock.now += 1
        assert await placements.node_of("t_a") == WorkerNode("10.0.0.8", 5433)
        assert await placements.node_of("t_b") == WorkerNode("10.0.0.8", 5433)
        assert lookups.asked == ["t_a", "t_a", "t_b"]

    asyncio.run(test())


def test_reads_asking_at_once_wait_for_one_lookup() -> None:
    async def test() -> None:
        lookups = Lookups()
        lookups.answer.clear()
        placements = Placements(lookups, clock=Clock())
        reads = [asyncio.create_task(placements.node_of("t_a")) for _ in range(20)]
        await asyncio.sleep(0)
        reads[0].cancel()  # a client gone leaves the lookup to the others
        lookups.answer.set()
        assert await asyncio.gather(*reads[1:]) == [WORKER] * 19
        assert lookups.asked == ["t_a"]

    asyncio.run(test())


def test_a_failed_lookup_fails_its_reads_and_is_not_remembered() -> None:
    async def test() -> None:
        lookups = Lookups()
        lookups.answer.clear()
        lookups.fail = ConnectionError("the coordinator is down")
        placements = Placements(lookups, clock=Clock())
        reads = [asyncio.create_task(placements.node_of("t_a")) for _ in range(3)]
        await asyncio.sleep(0)
        lookups.answer.set()
        failed = await asyncio.gather(*reads, return_exceptions=True)
        assert [type(each) for each in failed] == [ConnectionError] * 3
        lookups.fail = None
        assert await placements.node_of("t_a") == WORKER
        assert lookups.asked == ["t_a", "t_a"]

    asyncio.run(test())


def test_a_schema_not_distributed_is_remembered_as_read_on_the_coordinator() -> None:
    async def test() -> None:
        lookups = Lookups(node=None)
        reads = WorkerReads(
            "postgresql://dealbase@coordinator:5432/dealbase",
            Placements(lookups, clock=Clock()),
            SETTINGS,
        )
        assert await reads.pool_of("t_local") is None
        assert await reads.pool_of("t_local") is None
        assert lookups.asked == ["t_local"]
        assert reads.pools == {}

    asyncio.run(test())


def test_a_workers_pool_connects_as_the_coordinators_but_to_the_node() -> None:
    async def test() -> None:
        reads = WorkerReads(
            "postgresql://dealbase@coordinator:5432/dealbase?sslmode=prefer&options=-c%20a%3D1",
            Placements(Lookups(), clock=Clock()),
            SETTINGS,
        )
        pool = await reads.pool_of("t_a")
        assert pool is not None and pool is await reads.pool_of("t_b")
        assert conninfo_to_dict(pool.conninfo) == {
            "user": "dealbase",
            "host": "10.0.0.7",
            "port": "5433",
            "dbname": "dealbase",
            "sslmode": "prefer",
            "options": "-c a=1",
        }
        assert reads.usage() == (0, 0, 0)  # not opened: ``open`` was not called

    asyncio.run(test())


@pytest.mark.parametrize(
    "environment",
    [
        {"DEALBASE_CITUS_READS_ON_WORKERS": "true"},
        {
            "DEALBASE_CITUS_READS_ON_WORKERS": "true",
            "DEALBASE_CITUS_SCHEMA_SHARDING": "true",
            "DEALBASE_DB_PGBOUNCER": "true",
        },
    ],
)
def test_reads_on_workers_are_refused_where_they_cannot_work(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str]
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match="DEALBASE_CITUS_READS_ON_WORKERS"):
        load_settings()
    with pytest.raises(ValueError, match="distributed schemas"):
        Database("postgresql://dealbase@coordinator/dealbase", reads_on_workers=True)
