"""Keeps the spare tenant schemas topped up (``tenancy.spare_schemas``), beside the deliveries."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

import structlog

from dealbase.db.database import Database
from dealbase.errors import DomainError
from dealbase.tenancy.registry.spare_schemas import prepare_spare_schema

log = structlog.get_logger("dealbase.worker")

# How often a worker with enough spares looks again: tenants taken in between wait that long to
# be replaced, one indexed count a look.
CHECK_EVERY = timedelta(seconds=5)


class SpareSchemaKeeper:
    def __init__(self, database: Database, wanted: int, *, distributed: bool) -> None:
        self.database = database
        self.wanted = wanted
        self.distributed = distributed

    async def run(self, stop: asyncio.Event) -> None:
        """Makes spares one at a time until there are ``wanted``, then looks again every
        ``CHECK_EVERY``, until ``stop`` is set."""
        while self.wanted and not stop.is_set():
            try:
                made = await asyncio.to_thread(self.prepare_one)
            except DomainError as failed:  # the database is down: look again later
                log.warning("spare_schema_failed", error=failed.detail)
                made = None
            if made is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), CHECK_EVERY.total_seconds())

    def prepare_one(self) -> str | None:
        return prepare_spare_schema(self.database, self.wanted, distributed=self.distributed)
