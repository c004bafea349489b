"""Each tenant's live custom fields, as every request on its records needs them: kept in the
process while its LISTEN connection hears of their changes (``DefinitionChangeListener``), read
by the unit of work otherwise.

A change of a schema's fields notifies ``CHANGES_CHANNEL`` with the schema's name once it is
done (``repository.definitions_locked``). Between the change and the notice a process may still
use the fields it kept: a value of a new field is refused as unknown. A column is dropped only
once its field is archived, which takes it out of every statement by an earlier change and its
own notice; a write that names it still (the archive and the delete a moment apart, the notice
of the first not yet heard) fails.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from functools import partial

from dealbase.db.notifications import Notifications, Subscriber
from dealbase.db.transactions import TenantConnection
from dealbase.platform.custom_fields import repository
from dealbase.platform.custom_fields.models import CustomField, RecordKind
from dealbase.platform.custom_fields.repository import CHANGES_CHANNEL

# A schema's live fields of each record kind, oldest first (no key: none).
LiveFields = Mapping[RecordKind, tuple[CustomField, ...]]

# Schemas kept at most; past that the cache starts again.
_SCHEMAS_KEPT = 20_000


class Definitions:
    """The live fields of each schema this process has served, while they can be trusted."""

    def __init__(self) -> None:
        self._by_schema: dict[str, LiveFields] = {}
        self._lock = threading.Lock()
        # Listeners hearing the channel now: the kept fields are trusted while any does.
        self._hearing = 0
        # Moved on by every forgetting: a read that began before one is not kept.
        self._generation = 0

    def of(self, connection: TenantConnection, schema: str) -> LiveFields:
        """The schema's live fields: kept ones, or read by ``connection`` (in that schema)."""
        found = self._by_schema.get(schema)
        if found is not None and self._hearing:
            return found
        generation = self._generation
        with connection.before_the_last():
            read = live_fields(repository.list_fields(connection, None))
        with self._lock:
            if self._hearing and generation == self._generation:
                if len(self._by_schema) >= _SCHEMAS_KEPT:
                    self._by_schema.clear()
                self._by_schema[schema] = read
        return read

    def forget(self, schema: str | None) -> None:
        """Drops the schema's fields (None: every schema's)."""
        with self._lock:
            self._generation += 1
            if schema is None:
                self._by_schema.clear()
            else:
                self._by_schema.pop(schema, None)

    def heard(self, up: bool) -> None:
        """A listener has started (``up``) or stopped hearing the channel."""
        with self._lock:
            self._hearing = max(0, self._hearing + (1 if up else -1))
        self.forget(None)


def live_fields(fields: list[CustomField]) -> LiveFields:
    by_record: dict[RecordKind, list[CustomField]] = {}
    for field in fields:
        if not field.archived:
            by_record.setdefault(field.record, []).append(field)
    return {record: tuple(each) for record, each in by_record.items()}


# The process's: units of work of every app of the process share it.
DEFINITIONS = Definitions()


class DefinitionChangeListener:
    """``DEFINITIONS``' subscriber to ``CHANGES_CHANNEL`` on the process's LISTEN connection."""

    def __init__(self, notifications: Notifications, definitions: Definitions = DEFINITIONS):
        self._notifications = notifications
        self._definitions = definitions
        self._up = False
        self._subscriber = Subscriber(
            {CHANGES_CHANNEL: definitions.forget},
            on_up=partial(self._heard, True),
            on_down=partial(self._heard, False),
        )

    def _heard(self, up: bool) -> None:
        if up != self._up:
            self._up = up
            self._definitions.heard(up)

    def start(self) -> None:
        self._notifications.subscribe(self._subscriber)

    def stop(self) -> None:
        self._notifications.unsubscribe(self._subscriber)
        self._heard(False)
