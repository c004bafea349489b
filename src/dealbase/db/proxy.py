"""Whether the service's connections reach PostgreSQL through a proxy such as pgbouncer.

Behind pgbouncer in transaction mode the service needs ``DEALBASE_DB_PGBOUNCER=true`` (no
session state kept between transactions, no prepared statements): without it requests fail
with 5xx and their connections reset. A proxy shows itself by the address PostgreSQL sees a
connection come from: the proxy's, not the one the service's end of it has.
"""

from __future__ import annotations

import ipaddress
import os
import socket

import psycopg

from dealbase.db.database import libpq_url

_SEEN_FROM = (
    "SELECT host(client_addr), client_port FROM pg_stat_activity WHERE pid = pg_backend_pid()"
)


def through_a_proxy(database_url: str) -> bool | None:
    """True when a connection to ``database_url`` reaches PostgreSQL from another address or
    port than its own; None when that cannot be told (a Unix socket, an address PostgreSQL does
    not show)."""
    with psycopg.connect(libpq_url(database_url), autocommit=True, connect_timeout=10) as conn:
        with socket.socket(fileno=os.dup(conn.fileno())) as ours:
            if ours.family not in (socket.AF_INET, socket.AF_INET6):
                return None
            host, port = ours.getsockname()[:2]
        row = conn.execute(_SEEN_FROM).fetchone()
    if row is None or row[0] is None or row[1] is None:
        return None
    seen_host, seen_port = row
    return (ipaddress.ip_address(host), port) != (ipaddress.ip_address(seen_host), seen_port)
