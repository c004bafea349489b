"""Authenticating a request without a database round trip for every call.

Each server process keeps the credentials of the keys it has seen. The cache is trusted only
while the process's ``LISTEN`` connection to PostgreSQL is up: revoking or rotating a key sends
a notification on commit, and the listener drops that key at once (suspending, resuming or
deleting a tenant: every key of the tenant). While the listener is down, the cache is bypassed
and every request reads the key from the database, so a lost notification can never keep a
revoked key alive.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

from anyio import to_thread

from dealbase.db.database import Database
from dealbase.db.notifications import Notifications, Subscriber
from dealbase.errors import TenantSuspended, Unauthenticated
from dealbase.tenancy.callers.api_keys import (
    AUTHENTICATION_FAILED,
    KEY_CHANGES_CHANNEL,
    TENANT_NOTICE_PREFIX,
    KeyCredentials,
    load_credentials,
    parse_api_key,
    scope_for_request,
)
from dealbase.tenancy.scope import Scope

MAX_CACHED_KEYS = 10_000


class KeyCache:
    def __init__(self, max_size: int = MAX_CACHED_KEYS) -> None:
        self._entries: OrderedDict[uuid.UUID, KeyCredentials] = OrderedDict()
        self._lock = threading.Lock()
        self._max_size = max_size
        # Bumped by every invalidation: a load that raced one is not stored (it may be stale).
        self._generation = 0
        self.trusted = False

    def get(self, key_id: uuid.UUID) -> KeyCredentials | None:
        with self._lock:
            entry = self._entries.get(key_id)
            if entry is not None:
                self._entries.move_to_end(key_id)
            return entry

    def generation(self) -> int:
        with self._lock:
            return self._generation

    def put(self, credentials: KeyCredentials, loaded_at_generation: int) -> None:
        with self._lock:
            if not self.trusted or loaded_at_generation != self._generation:
                return
            self._entries[credentials.key_id] = credentials
            self._entries.move_to_end(credentials.key_id)
            while len(self._entries) > self._max_size:
                self._entries.popitem(last=False)

    def invalidate(self, key_id: uuid.UUID | None) -> None:
        """Drops one key, or every key when ``key_id`` is None."""
        with self._lock:
            self._generation += 1
            if key_id is None:
                self._entries.clear()
            else:
                self._entries.pop(key_id, None)

    def invalidate_tenant(self, tenant_id: uuid.UUID) -> None:
        """Drops every key of the tenant."""
        with self._lock:
            self._generation += 1
            for key_id in [k for k, c in self._entries.items() if c.tenant_id == tenant_id]:
                del self._entries[key_id]

    def set_trusted(self, trusted: bool) -> None:
        with self._lock:
            self._generation += 1
            self._entries.clear()
            self.trusted = trusted


class KeyChangeListener:
    """The key cache's subscriber to ``dealbase_api_keys`` on the process's LISTEN connection
    (``Notifications``): the cache is trusted while the channel is heard."""

    def __init__(self, notifications: Notifications, cache: KeyCache) -> None:
        self._notifications = notifications
        self._cache = cache
        self._subscriber = Subscriber(
            {KEY_CHANGES_CHANNEL: self._apply},
            on_up=partial(cache.set_trusted, True),
            on_down=partial(cache.set_trusted, False),
        )

    def start(self) -> None:
        self._notifications.subscribe(self._subscriber)

    def stop(self) -> None:
        self._notifications.unsubscribe(self._subscriber)
        self._cache.set_trusted(False)

    def _apply(self, payload: str) -> None:
        tenant = payload.removeprefix(TENANT_NOTICE_PREFIX)
        try:
            if tenant != payload:
                self._cache.invalidate_tenant(uuid.UUID(tenant))
            else:
                self._cache.invalidate(uuid.UUID(payload))
        except ValueError:
            self._cache.invalidate(None)


class Authenticator:
    """Credentials to a Scope. A cached key is answered on the event loop; only a key this
    process has not seen (or any key while the cache is untrusted) reads the database, off it."""

    def __init__(
        self,
        database: Database,
        cache: KeyCache | None = None,
        on_lookup: Callable[[bool], None] = lambda cached: None,
        on_accepted: Callable[[uuid.UUID], None] = lambda key_id: None,
        now: Callable[[], datetime] = partial(datetime.now, UTC),
    ) -> None:
        self._database = database
        self.cache = cache or KeyCache()
        # The clock keys' expiries and rotations' grace periods are judged on (a test's own
        # moves only when the test says so).
        self.now = now
        # Told whether each lookup was answered from the cache (metrics).
        self._on_lookup = on_lookup
        # Told the id of each key accepted (its last use); runs on the event loop: must be cheap.
        self._on_accepted = on_accepted

    async def department_scope(self, api_key: str | None, department_header: str | None) -> Scope:
        """For the integration API: department keys only."""
        return await self._scope(api_key, department_header, tenant_wide_allowed=False)

    async def dashboard_scope(self, api_key: str | None, department_header: str | None) -> Scope:
        """For the dashboards' API: department keys, and tenant-wide keys without a department."""
        return await self._scope(api_key, department_header, tenant_wide_allowed=True)

    async def _scope(
        self, api_key: str | None, department_header: str | None, *, tenant_wide_allowed: bool
    ) -> Scope:
        parsed = parse_api_key(api_key)
        if parsed is None:
            raise Unauthenticated(AUTHENTICATION_FAILED)
        key_id, secret = parsed
        cached = self.cache.get(key_id)
        self._on_lookup(cached is not None)
        if cached is not None:
            try:
                scope = scope_for_request(
                    cached,
                    secret,
                    department_header,
                    tenant_wide_allowed=tenant_wide_allowed,
                    now=self.now(),
                )
            except (Unauthenticated, TenantSuspended):
                # Perhaps a secret issued, or a tenant resumed, a moment ago: the change's
                # notice may not have reached this process yet. The database decides.
                pass
            else:
                self._on_accepted(key_id)
                return scope
        credentials = await to_thread.run_sync(self._load, key_id)
        scope = scope_for_request(
            credentials,
            secret,
            department_header,
            tenant_wide_allowed=tenant_wide_allowed,
            now=self.now(),
        )
        self._on_accepted(key_id)
        return scope

    def _load(self, key_id: uuid.UUID) -> KeyCredentials | None:
        generation = self.cache.generation()
        with self._database.control() as connection:
            credentials = load_credentials(connection, key_id)
        if credentials is not None:
            self.cache.put(credentials, generation)
        return credentials
