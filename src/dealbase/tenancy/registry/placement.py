"""Where tenants live on a Citus cluster, and moving them: each tenant's schema is a distributed
schema whose tables are placed together on one worker (docs/scaling.md).

A move copies the schema's tables to the other worker by logical replication while the tenant
keeps working, then blocks its writes for the moment the placements switch over (Citus's
``citus_schema_move``); the requests that wait then answer late, not wrong. Both operations run
outside a transaction: Citus commits their steps as they go.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import psycopg

from dealbase.db.database import libpq_url
from dealbase.errors import Invalid
from dealbase.tenancy.scope import checked_schema_name

# Citus's shard_transfer_mode: "auto" replicates logically (writes go on while the tables are
# copied) where every table has a replica identity, which a tenant's tables do.
TransferMode = Literal["auto", "force_logical", "block_writes"]
_NODE = re.compile(r"(?P<host>[A-Za-z0-9.\-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]):(?P<port>[0-9]{1,5})")


@dataclass(frozen=True, slots=True)
class Node:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Node:
        """``HOST:PORT`` (an IPv6 address in brackets), as the cluster's metadata names nodes."""
        match = _NODE.fullmatch(text)
        if match is None or not 1 <= int(match["port"]) <= 65535:
            raise Invalid.of("node", "invalid", "A node is HOST:PORT, as citus_shards names it.")
        return cls(match["host"].strip("[]"), int(match["port"]))

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def tenant_node(database_url: str, schema: str) -> Node | None:
    """The worker that holds the schema's tables; None when it is not a distributed schema."""
    with psycopg.connect(libpq_url(database_url)) as connection:
        row = connection.execute(
            "SELECT s.nodename, s.nodeport FROM citus_schemas c"
            " JOIN citus_shards s ON s.colocation_id = c.colocation_id"
            " WHERE c.schema_name = %s::regnamespace LIMIT 1",
            (checked_schema_name(schema),),
        ).fetchone()
    return None if row is None else Node(row[0], row[1])


def move_tenant(
    database_url: str, schema: str, to: Node, mode: TransferMode = "auto"
) -> Node | None:
    """Moves the schema's tables to the worker ``to``; returns the worker they were on (None
    when they were there already, and nothing moved)."""
    source = tenant_node(database_url, schema)
    if source is None:
        raise Invalid.of("tenant", "not_distributed", f"{schema} is not a distributed schema.")
    if source == to:
        return None
    with psycopg.connect(libpq_url(database_url), autocommit=True) as connection:
        connection.execute(
            "SELECT citus_schema_move(%s::regnamespace, %s, %s, %s::citus.shard_transfer_mode)",
            (schema, to.host, to.port, mode),
        )
    return source


def rebalance(database_url: str, mode: TransferMode = "auto") -> int:
    """Spreads the distributed schemas (and any other shards) evenly over the workers, as
    Citus's background rebalancer does, and waits until done; returns how many moves it made."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as connection:
        started = connection.execute(
            "SELECT citus_rebalance_start(shard_transfer_mode => %s::citus.shard_transfer_mode)",
            (mode,),
        ).fetchone()
        if started is None or started[0] is None:
            return 0
        connection.execute("SELECT citus_rebalance_wait()")
        moves = connection.execute(
            "SELECT count(*) FROM pg_dist_background_task WHERE job_id = %s"
            " AND status = 'done' AND command LIKE '%%citus_move_shard_placement%%'",
            (started[0],),
        ).fetchone()
    return 0 if moves is None else int(moves[0])
