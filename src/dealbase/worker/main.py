"""``dealbase worker``'s process: its database, sender and spare schemas, run until SIGTERM or
Ctrl-C. The CLI reads the options and calls ``run_worker``."""

from __future__ import annotations

import asyncio
import signal
import ssl
import sys

from prometheus_client import start_http_server

from dealbase.config import Settings, SettingsError
from dealbase.db.database import Database
from dealbase.platform.webhooks.addresses import AddressPolicy
from dealbase.worker.delivery import DeliveryWorker
from dealbase.worker.limits import WorkerLimits
from dealbase.worker.sending import Sender, trusted_authorities
from dealbase.worker.spares import SpareSchemaKeeper


def run_worker(settings: Settings, database_url: str, limits: WorkerLimits) -> None:
    """Delivers webhooks and keeps the spare schemas topped up until SIGTERM or SIGINT.

    Raises ``SettingsError`` when the certificate authorities to trust hold none OpenSSL can
    read, before anything starts."""
    if settings.metrics_port is not None:
        start_http_server(settings.metrics_port, addr=settings.host)
    asyncio.run(_deliver_until_stopped(settings, database_url, limits))


def _sender(settings: Settings) -> Sender:
    try:
        trusted = trusted_authorities(settings.webhooks_ca_bundle)
    except ssl.SSLError as unreadable:
        raise SettingsError(
            "The certificate authorities to trust (DEALBASE_WEBHOOKS_CA_BUNDLE, SSL_CERT_FILE,"
            f" SSL_CERT_DIR) hold none OpenSSL can read: {unreadable}"
        ) from None
    return Sender(AddressPolicy(allow_private=settings.webhooks_allow_private), trusted)


async def _deliver_until_stopped(
    settings: Settings, database_url: str, limits: WorkerLimits
) -> None:
    sender = _sender(settings)
    database = Database.from_settings(
        settings, database_url, pool_size=limits.tenants_at_once, max_overflow=0
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for stopping in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(stopping, stop.set)
    await database.open()
    print("dealbase worker: delivering webhooks (SIGTERM or Ctrl-C stops)", file=sys.stderr)
    spares = SpareSchemaKeeper(
        database, settings.spare_tenant_schemas, distributed=settings.citus_schema_sharding
    )
    try:
        await asyncio.gather(
            DeliveryWorker(database, sender, limits=limits).run(stop), spares.run(stop)
        )
    finally:
        await sender.close()
        await database.close()
