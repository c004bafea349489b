"""Reads served by the Citus worker that holds the tenant's schema, not through the coordinator.

Through the coordinator a read costs two backends: the coordinator parses and plans it, then
sends the worker the statement as text with its values written in, which the worker parses and
plans afresh each time (it keeps no plan for it). Citus 11 and later give every node the
cluster's metadata, so any node runs a distributed query; on the node that holds the schema's
tables it runs it locally. A read sent there directly, on a connection of its own that prepares
the statement as the coordinator's would, costs that one backend only (docs/scaling.md).

``WorkerReads`` keeps where each tenant schema lives (``Placements``: looked up on the
coordinator once per schema, kept for ``PLACEMENT_SECONDS``) and a ``TenantAffinePool`` for each
worker, with the coordinator's pool's connection settings and tenant limits. A move changes
where a schema lives: until its placement is looked up again, its reads go to the node it left,
which still answers them right (it routes them to the new node, as the coordinator would),
only slower.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from time import monotonic
from typing import Any, NamedTuple

import psycopg
from psycopg.conninfo import make_conninfo

from dealbase.db.pool import PoolSettings, TenantAffinePool

# How long a schema's placement is believed before it is looked up again: a moved tenant's reads
# go through its former node this long at most.
PLACEMENT_SECONDS = 60.0

# The worker holding the schema's tables, by Citus's catalog (readable by any role). Not the
# citus_shards view, which asks every worker for its shards' sizes at each call. No row: the schema
# is not distributed, or lives on the coordinator (group 0); it is read there.
NODE_OF_SCHEMA = (
    "SELECT n.nodename, n.nodeport FROM pg_dist_schema d"
    " JOIN pg_dist_partition p ON p.colocationid = d.colocationid"
    " JOIN pg_dist_placement pl ON pl.shardid ="
    " (SELECT min(s.shardid) FROM pg_dist_shard s WHERE s.logicalrelid = p.logicalrelid)"
    " JOIN pg_dist_node n ON n.groupid = pl.groupid"
    " WHERE d.schemaid = to_regnamespace(%s) AND n.noderole = 'primary' AND n.groupid <> 0"
    " LIMIT 1"
)


class WorkerNode(NamedTuple):
    """A worker as ``pg_dist_node`` names it."""

    host: str
    port: int


async def node_of_schema(
    connection: psycopg.AsyncConnection[Any], schema: str
) -> WorkerNode | None:
    """The worker holding ``schema``'s tables, asked of the coordinator on ``connection`` (in
    autocommit mode); None: read it on the coordinator."""
    cursor = await connection.execute(NODE_OF_SCHEMA, (schema,))
    row = await cursor.fetchone()
    return None if row is None else WorkerNode(row[0], int(row[1]))


# A schema's node, looked up on the coordinator.
LookUp = Callable[[str], Awaitable[WorkerNode | None]]


class Placements:
    """Where each schema lives, each looked up once and believed for ``seconds`` by ``clock``
    (monotonic, in seconds: tests move it rather than wait).

    A schema whose placement is not known, or no longer believed, is looked up once however
    many reads ask at that moment: they all wait for the one lookup. A lookup that fails
    fails them all, and is not remembered: the next read tries again.
    """

    def __init__(
        self,
        look_up: LookUp,
        *,
        seconds: float = PLACEMENT_SECONDS,
        clock: Callable[[], float] = monotonic,
    ) -> None:
        self._look_up = look_up
        self._seconds = seconds
        self._clock = clock
        # Each schema's node (None: the coordinator) and until when it is believed.
        self._known: dict[str, tuple[WorkerNode | None, float]] = {}
        self._looking: dict[str, asyncio.Task[WorkerNode | None]] = {}

    async def node_of(self, schema: str) -> WorkerNode | None:
        known = self._known.get(schema)
        if known is not None and self._clock() < known[1]:
            return known[0]
        looking = self._looking.get(schema)
        loop = asyncio.get_running_loop()
        if looking is None or looking.get_loop() is not loop:
            looking = loop.create_task(self._looked_up(schema))
            looking.add_done_callback(_retrieve_exception)
            self._looking[schema] = looking
        # Shielded: a caller cancelled (its client gone) leaves the lookup to the others.
        return await asyncio.shield(looking)

    def forget(self, schema: str) -> None:
        """Looks ``schema`` up again at its next read."""
        self._known.pop(schema, None)

    async def _looked_up(self, schema: str) -> WorkerNode | None:
        try:
            node = await self._look_up(schema)
            self._known[schema] = (node, self._clock() + self._seconds)
            return node
        finally:
            self._looking.pop(schema, None)


def _retrieve_exception(task: asyncio.Task[Any]) -> None:
    """Marks a failed lookup's exception seen: its callers may all have given up."""
    if not task.cancelled():
        task.exception()


class WorkerReads:
    """A ``TenantAffinePool`` for each worker a read went to, opened (in ``open``'s event loop)
    as it is first needed, and the ``Placements`` that say which.

    Each pool connects with the coordinator's conninfo, its host and port those of the worker,
    with the coordinator's pool's ``settings``.
    """

    def __init__(self, conninfo: str, placements: Placements, settings: PoolSettings) -> None:
        self.conninfo = conninfo
        self.placements = placements
        self.settings = settings
        self.pools: dict[WorkerNode, TenantAffinePool] = {}
        self._opened: set[WorkerNode] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def conninfo_of(self, node: WorkerNode) -> str:
        """The coordinator's conninfo (user, database, options) with ``node``'s host and port."""
        return make_conninfo(self.conninfo, host=node.host, port=str(node.port))

    async def pool_of(self, schema: str) -> TenantAffinePool | None:
        """The pool of the worker holding ``schema``; None: read it on the coordinator. The
        pool is open only in ``open``'s event loop (on another, connect with its conninfo)."""
        node = await self.placements.node_of(schema)
        if node is None:
            return None
        pool = self.pools.get(node)
        if pool is None:
            pool = self.pools[node] = TenantAffinePool(
                self.conninfo_of(node), self.settings, name=f"reads-on-{node.host}:{node.port}"
            )
        if node not in self._opened and asyncio.get_running_loop() is self._loop:
            pool.open()
            self._opened.add(node)
        return pool

    def open(self) -> None:
        """Lets the pools open in the running event loop, which they then belong to."""
        self._loop = asyncio.get_running_loop()

    async def close(self) -> None:
        """Closes the pools opened; call it in ``open``'s event loop."""
        for node in sorted(self._opened):
            await self.pools[node].close()
        self._opened.clear()
        self._loop = None

    def usage(self) -> tuple[int, int, int]:
        """The open pools' connections in use, idle, and requests waiting for one, summed."""
        in_use = idle = waiting = 0
        for node in self._opened:
            stats = self.pools[node].stats()
            in_use += stats.size - stats.idle
            idle += stats.idle
            waiting += stats.waiting
        return in_use, idle, waiting
