"""The SQL of deliveries: made from the events outbox, leased by workers, and their log."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import (
    BindParameter,
    Boolean,
    ColumnElement,
    Integer,
    and_,
    bindparam,
    case,
    cast,
    column,
    delete,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert

from dealbase.db.statements import Record, built_once, dataclass_of_row
from dealbase.db.transactions import TenantConnection
from dealbase.ids import new_id
from dealbase.platform.event_types import ALL_EVENTS
from dealbase.platform.events.models import Event, event_json
from dealbase.platform.pagination import PageRequest
from dealbase.platform.tables import (
    event_positions,
    events,
    webhook_attempts,
    webhook_deliveries,
    webhook_endpoints,
)
from dealbase.platform.webhooks.delivery_models import Attempt, Delivery, Outgoing

_deliveries = webhook_deliveries
_endpoints = webhook_endpoints

# A UUIDv7 made by PostgreSQL (15 has no function for it), as RFC 9562's method 3: the
# millisecond clock in the first six bytes, then the version and the fraction of the millisecond
# in 12 bits, then a random UUID's remaining bytes. Deliveries are listed by id, newest first, as
# every row the service makes, and one scan makes many within a millisecond: the fraction (per
# row, clock_timestamp() being per call) keeps them in the order they were made. (Its readings
# of the clock may straddle a millisecond and swap two neighbours in the log; nothing but the
# log's order depends on ids.)
_MILLIS = "extract(epoch FROM clock_timestamp()) * 1000"
_NEW_UUID7: ColumnElement[uuid.UUID] = literal_column(
    "encode(overlay(overlay(uuid_send(gen_random_uuid())"
    f" placing substring(int8send(floor({_MILLIS})::bigint) FROM 3) FROM 1 FOR 6)"
    f" placing substring(int4send(28672 + floor(({_MILLIS} - floor({_MILLIS})) * 4096)::int)"
    " FROM 3) FROM 7 FOR 2), 'hex')::uuid"
)


# The columns of a delivery a scan makes, in the order its statements give them.
_MADE = (
    "id",
    "endpoint_id",
    "event_id",
    "event_type",
    "position",
    "state",
    "next_attempt_at",
    "created_at",
    "started_at",
)


def _behind_query() -> Any:
    """The enabled endpoints with events they have not seen: each one's position so far
    (``since``) and its department's last (``upto``), the endpoint locked."""
    return (
        select(
            _endpoints.c.id,
            _endpoints.c.department_id,
            _endpoints.c.event_types,
            _endpoints.c.ordered,
            _endpoints.c.scanned_position.label("since"),
            event_positions.c.last_position.label("upto"),
        )
        .join(event_positions, event_positions.c.department_id == _endpoints.c.department_id)
        .where(
            _endpoints.c.enabled, event_positions.c.last_position > _endpoints.c.scanned_position
        )
        # An endpoint another worker is scanning, or its owner changing, is waited for (briefly:
        # both are short transactions), not skipped: a skipped one would have nothing to wake a
        # worker for its events again. Locked in id order, so that two scans never deadlock.
        .order_by(_endpoints.c.id)
        .with_for_update(of=_endpoints)
    )


def _advance(behind: Any) -> Any:
    """Each endpoint of ``behind`` moved past what it saw."""
    return (
        update(_endpoints)
        .where(_endpoints.c.id == behind.c.id)
        .values(scanned_position=behind.c.upto)
    )


def _unseen(behind: Any, delivery_id: ColumnElement[uuid.UUID]) -> Any:
    """The deliveries (``_MADE``'s columns, the id ``delivery_id``) of the events each endpoint
    of ``behind`` subscribes to and has not seen, pending and due at the parameter ``now``."""
    subscribed = or_(
        events.c.type == func.any(behind.c.event_types),
        behind.c.event_types == literal([ALL_EVENTS], _endpoints.c.event_types.type),
    )
    return (
        select(
            delivery_id,
            behind.c.id,
            events.c.id,
            events.c.type,
            # Only an ordered endpoint's deliveries keep their place in line.
            case((behind.c.ordered, events.c.position), else_=None),
            literal("pending"),
            bindparam("now"),
            bindparam("now"),
            bindparam("now"),
        )
        .join_from(
            behind,
            events,
            and_(
                events.c.department_id == behind.c.department_id,
                events.c.position > behind.c.since,
                events.c.position <= behind.c.upto,
            ),
        )
        .where(subscribed)
        .order_by(behind.c.id, events.c.position)
    )


def _scan_statement() -> Any:
    """Deliveries of the events each enabled endpoint has not yet seen, in one statement."""
    behind = _behind_query().cte("behind")
    return (
        pg_insert(_deliveries)
        .from_select(list(_MADE), _unseen(behind, _NEW_UUID7))
        .on_conflict_do_nothing(index_elements=["endpoint_id", "event_id"])
        .add_cte(_advance(behind).cte("advanced"))
    )


def _advance_statement() -> Any:
    """A distributed schema's scan is two statements that Citus routes whole, where it runs
    ``_scan_statement`` as subplans whose rows it pulls through the coordinator (for the
    data-modifying CTE, and for the volatile functions of the ids in an INSERT ... SELECT).

    The first moves the endpoints on, and answers where each stood."""
    behind = _behind_query().subquery("behind")
    return _advance(behind).returning(_endpoints.c.id, behind.c.since)


def _make_statement() -> Any:
    """The second: the deliveries of the endpoints the first moved on (the parameters
    ``endpoint_ids`` and each one's ``since``), between where each stood and where it stands.

    Their ids are numbered from one the worker makes (``ids.new_id``, the parameter ``first``):
    the k-th delivery's is it with k in its last four bytes, the same UUIDv7 (its version and
    variant are in the bytes before), and in the order made, as the single server's clock
    readings are. Different scans' differ in the twelve bytes before (the millisecond, the
    process's counter and 30 random bits)."""
    seen = (
        func.unnest(
            bindparam("endpoint_ids", type_=ARRAY(_endpoints.c.id.type)),
            bindparam("since", type_=ARRAY(_endpoints.c.scanned_position.type)),
        )
        .table_valued(
            column("endpoint_id", _endpoints.c.id.type),
            column("since", _endpoints.c.scanned_position.type),
        )
        .render_derived(name="seen")
    )
    behind = (
        select(
            _endpoints.c.id,
            _endpoints.c.department_id,
            _endpoints.c.event_types,
            _endpoints.c.ordered,
            seen.c.since,
            _endpoints.c.scanned_position.label("upto"),
        )
        .join_from(seen, _endpoints, _endpoints.c.id == seen.c.endpoint_id)
        .subquery("behind")
    )
    number = func.row_number().over(order_by=(behind.c.id, events.c.position))
    first = func.uuid_send(bindparam("first", type_=_deliveries.c.id.type))
    bytes_ = func.overlay(
        first, func.int4send(cast(number, Integer)), literal_column("13"), literal_column("4")
    )
    numbered = cast(func.encode(bytes_, literal_column("'hex'")), _deliveries.c.id.type)
    return (
        pg_insert(_deliveries)
        .from_select(list(_MADE), _unseen(behind, numbered))
        .on_conflict_do_nothing(index_elements=["endpoint_id", "event_id"])
    )


_SCAN = built_once(_scan_statement())
_ADVANCE = built_once(_advance_statement())
_MAKE = built_once(_make_statement())


def subscribing_departments(connection: TenantConnection) -> list[uuid.UUID]:
    """The departments with an enabled endpoint, whose events a scan reads."""
    found = connection.execute(
        select(_endpoints.c.department_id).where(_endpoints.c.enabled).distinct()
    )
    return [department_id for (department_id,) in found]


def scan(connection: TenantConnection, now: datetime) -> None:
    """Makes a pending delivery, due ``now``, of every event an enabled endpoint subscribes to
    and has not seen, and moves each endpoint past what it saw.

    One statement on a single server. On a distributed schema two, each routed whole to the
    tenant's worker: the first moves the endpoints on and answers where each stood; the second,
    which needs that, makes the deliveries. It goes with the transaction's next round trip (the
    worker's lease, in a step), so the scan costs no round trip more there; both commit, or
    neither."""
    if not connection.distributed:
        connection.execute(_SCAN, {"now": now})
        return
    advanced = connection.execute(_ADVANCE).all()
    if advanced:
        endpoint_ids, since = zip(*advanced, strict=True)
        connection.defer(
            _MAKE,
            {
                "endpoint_ids": list(endpoint_ids),
                "since": list(since),
                "first": new_id(),
                "now": now,
            },
        )


def _due(now: BindParameter[datetime], deliveries: Any) -> ColumnElement[bool]:
    return and_(
        deliveries.c.next_attempt_at <= now,
        or_(deliveries.c.leased_until.is_(None), deliveries.c.leased_until <= now),
    )


def _heads() -> Any:
    """Each enabled ordered endpoint's earliest pending delivery: the only one of its
    deliveries that may go (``webhook_deliveries_pending`` finds it in one probe)."""
    head = (
        select(_deliveries.c.id, _deliveries.c.next_attempt_at, _deliveries.c.leased_until)
        .where(
            _deliveries.c.endpoint_id == _endpoints.c.id,
            _deliveries.c.state == "pending",
            _deliveries.c.position.is_not(None),
        )
        .order_by(_deliveries.c.position)
        .limit(1)
        .lateral("head")
    )
    return select(head).select_from(_endpoints).join(head, true()).where(_endpoints.c.enabled)


def _loose() -> Any:
    """Pending deliveries that go in any order: of endpoints that are not ordered, and tests."""
    return (
        select(_deliveries.c.id, _deliveries.c.next_attempt_at, _deliveries.c.leased_until)
        .join(_endpoints, _endpoints.c.id == _deliveries.c.endpoint_id)
        .where(
            _deliveries.c.state == "pending",
            _deliveries.c.position.is_(None),
            _endpoints.c.enabled,
        )
    )


def _eligible(now: BindParameter[datetime]) -> Any:
    """The deliveries due now that may go: the heads, and the loose ones due first."""
    heads = _heads().subquery("heads")
    loose = _loose().subquery("loose")
    return union_all(
        select(heads.c.id, heads.c.next_attempt_at).where(_due(now, heads)),
        select(loose.c.id, loose.c.next_attempt_at)
        .where(_due(now, loose))
        .order_by(loose.c.next_attempt_at)
        .limit(bindparam("limit")),
    ).subquery("eligible")


def _leased(now: BindParameter[datetime]) -> Any:
    """The CTE ``leased``: the eligible deliveries locked and leased until ``until``."""
    # Locked now, and checked again on the locked row: another worker may have leased or
    # settled one since this statement's snapshot.
    candidates = (
        select(_deliveries.c.id)
        .where(
            _deliveries.c.id.in_(select(_eligible(now).c.id)),
            _deliveries.c.state == "pending",
            _due(now, _deliveries),
        )
        .order_by(_deliveries.c.next_attempt_at)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
        .cte("candidates")
    )
    return (
        update(_deliveries)
        .where(_deliveries.c.id.in_(select(candidates.c.id)))
        .values(leased_until=bindparam("until"))
        .returning(
            _deliveries.c.id,
            _deliveries.c.endpoint_id,
            _deliveries.c.event_id,
            _deliveries.c.payload,
            _deliveries.c.attempt_count,
            _deliveries.c.started_at,
            _deliveries.c.leased_until,
        )
        .cte("leased")
    )


def _lease_statement() -> Any:
    now: BindParameter[datetime] = bindparam("now")
    leased = _leased(now)
    # The secret a rotation replaced signs until its overlap ends.
    previous_secret = case(
        (_endpoints.c.previous_secret_expires_at > now, _endpoints.c.previous_secret),
        else_=None,
    )
    return (
        select(
            leased.c.id.label("delivery_id"),
            leased.c.endpoint_id,
            leased.c.payload,
            leased.c.attempt_count,
            leased.c.started_at,
            leased.c.leased_until,
            _endpoints.c.url,
            _endpoints.c.secret,
            previous_secret.label("previous_secret"),
            _endpoints.c.failing_since,
            *[column.label(f"event_{column.name}") for column in events.c],
        )
        .join_from(leased, _endpoints, _endpoints.c.id == leased.c.endpoint_id)
        .outerjoin(events, events.c.id == leased.c.event_id)
    )


_LEASE = built_once(_lease_statement())


def _body(row: Record, tenant_id: uuid.UUID) -> tuple[str, bytes]:
    """The message id and the body: the event as the feed shows it, or the test event."""
    if row["event_id"] is None:
        payload = row["payload"]
        return str(payload["id"]), orjson.dumps(payload)
    event = Event(
        id=row["event_id"],
        tenant_id=tenant_id,
        department_id=row["event_department_id"],
        position=row["event_position"],
        type=row["event_type"],
        data=row["event_data"],
        changed_fields=row["event_changed_fields"],
        previous=row["event_previous"],
        created_at=row["event_created_at"],
    )
    return str(event.id), orjson.dumps(event_json(event))


def lease(
    connection: TenantConnection,
    tenant_id: uuid.UUID,
    now: datetime,
    until: datetime,
    limit: int,
) -> list[Outgoing]:
    """Up to ``limit`` deliveries due at ``now``, leased to the caller until ``until``: none
    another worker holds, and of an ordered endpoint only its earliest pending one."""
    rows = connection.execute(_LEASE, {"now": now, "until": until, "limit": limit}).mappings()
    leased = []
    for row in rows:
        message_id, body = _body(row, tenant_id)
        secrets = (row["secret"],) + (
            () if row["previous_secret"] is None else (row["previous_secret"],)
        )
        leased.append(
            Outgoing(
                delivery_id=row["delivery_id"],
                endpoint_id=row["endpoint_id"],
                url=row["url"],
                secrets=secrets,
                message_id=message_id,
                body=body,
                attempt_count=row["attempt_count"],
                started_at=row["started_at"],
                leased_until=row["leased_until"],
                failing_since=row["failing_since"],
            )
        )
    return leased


_RECORD_ATTEMPT = insert(webhook_attempts).values(
    id=bindparam("attempt_id"),
    delivery_id=bindparam("delivery_id"),
    attempted_at=bindparam("attempted_at"),
    status_code=bindparam("status_code"),
    duration_ms=bindparam("duration_ms"),
    error=bindparam("error"),
)
# Only while the lease is the caller's: a worker whose lease ran out (and whose delivery another
# worker took) leaves the state to that worker; its attempt is still logged.
_SETTLE = built_once(
    update(_deliveries)
    .where(
        _deliveries.c.id == bindparam("delivery_id"),
        _deliveries.c.leased_until == bindparam("held_until"),
    )
    .values(
        state=bindparam("new_state"),
        attempt_count=_deliveries.c.attempt_count + 1,
        next_attempt_at=bindparam("retry_at"),
        delivered_at=bindparam("succeeded_at"),
        leased_until=None,
    )
)
_MARK_ENDPOINT = built_once(
    update(_endpoints)
    .where(_endpoints.c.id == bindparam("endpoint_id"))
    .values(
        failing_since=case(
            (bindparam("succeeded", type_=Boolean), None),
            else_=func.coalesce(_endpoints.c.failing_since, bindparam("failed_at")),
        ),
        enabled=_endpoints.c.enabled & ~bindparam("disable", type_=Boolean),
        disabled_reason=case(
            (bindparam("disable", type_=Boolean), bindparam("reason")),
            else_=_endpoints.c.disabled_reason,
        ),
    )
)


def record(
    connection: TenantConnection,
    attempts: Sequence[Mapping[str, object]],
    settled: Sequence[Mapping[str, object]],
    endpoints: Sequence[Mapping[str, object]],
) -> None:
    """Logs attempts, moves their deliveries on, and marks their endpoints failing, healthy or
    disabled: each in one round trip."""
    connection.execute(_RECORD_ATTEMPT, attempts)
    connection.execute(_SETTLE, settled)
    if endpoints:
        connection.execute(_MARK_ENDPOINT, endpoints)


def next_due(connection: TenantConnection) -> datetime | None:
    """When the schema next has a delivery to try: the earliest retry of an enabled endpoint's
    pending delivery that its order lets go next, or the end of a lease (a worker that died
    holding it)."""
    waiting = union_all(_heads(), _loose()).subquery("waiting")
    due = func.greatest(waiting.c.next_attempt_at, waiting.c.leased_until)
    found = connection.execute(select(func.min(due))).scalar()
    return found if isinstance(found, datetime) else None


def _to_attempt(row: Record) -> Attempt:
    return dataclass_of_row(Attempt, row)


_DELIVERY_COLUMNS = [
    _deliveries.c.id,
    _deliveries.c.endpoint_id,
    _deliveries.c.event_id,
    _deliveries.c.event_type,
    _deliveries.c.state,
    _deliveries.c.attempt_count,
    _deliveries.c.next_attempt_at,
    _deliveries.c.created_at,
    _deliveries.c.delivered_at,
]


def _with_attempts(connection: TenantConnection, rows: Sequence[Record]) -> list[Delivery]:
    ids = [row["id"] for row in rows]
    attempts: dict[uuid.UUID, list[Attempt]] = {delivery_id: [] for delivery_id in ids}
    if ids:
        found = connection.execute(
            select(webhook_attempts)
            .where(webhook_attempts.c.delivery_id.in_(ids))
            .order_by(webhook_attempts.c.delivery_id, webhook_attempts.c.id)
        ).mappings()
        for attempt in found:
            attempts[attempt["delivery_id"]].append(_to_attempt(attempt))
    return [Delivery(**row, attempts=attempts[row["id"]]) for row in rows]


def list_deliveries(
    connection: TenantConnection, endpoint_id: uuid.UUID, page: PageRequest
) -> list[Delivery]:
    """The endpoint's deliveries, newest first, each with its attempts in order."""
    query = select(*_DELIVERY_COLUMNS).where(_deliveries.c.endpoint_id == endpoint_id)
    if page.after is not None:
        query = query.where(_deliveries.c.id < page.after)
    rows = connection.execute(
        query.order_by(_deliveries.c.id.desc()).limit(page.limit + 1)
    ).mappings()
    return _with_attempts(connection, list(rows))


def count_deliveries(connection: TenantConnection, endpoint_id: uuid.UUID) -> int:
    query = (
        select(func.count())
        .select_from(_deliveries)
        .where(_deliveries.c.endpoint_id == endpoint_id)
    )
    return int(connection.execute(query).scalar_one())


def get_delivery(
    connection: TenantConnection, endpoint_id: uuid.UUID, delivery_id: uuid.UUID
) -> Delivery | None:
    rows = connection.execute(
        select(*_DELIVERY_COLUMNS).where(
            _deliveries.c.endpoint_id == endpoint_id, _deliveries.c.id == delivery_id
        )
    ).mappings()
    found = _with_attempts(connection, list(rows))
    return found[0] if found else None


def redeliver(connection: TenantConnection, endpoint_id: uuid.UUID, delivery_id: uuid.UUID) -> bool:
    """Makes the delivery pending and due now, its three days of retries (and its backoff)
    starting again. A worker sending it now loses its lease, so what that attempt brings is
    logged but settles nothing: the delivery is sent again whatever it brought. False when
    there is no such delivery."""
    changed = connection.execute(
        update(_deliveries)
        .where(_deliveries.c.endpoint_id == endpoint_id, _deliveries.c.id == delivery_id)
        .values(
            state="pending",
            attempt_count=0,
            next_attempt_at=func.now(),
            started_at=func.now(),
            delivered_at=None,
            leased_until=None,
        )
        .returning(_deliveries.c.id)
    ).first()
    return changed is not None


def insert_test(
    connection: TenantConnection, endpoint_id: uuid.UUID, payload: Mapping[str, object]
) -> uuid.UUID:
    """A pending delivery of a test event, due now, sent whatever the endpoint subscribes to."""
    delivery_id = new_id()
    connection.execute(
        insert(_deliveries).values(
            id=delivery_id,
            endpoint_id=endpoint_id,
            event_type=payload["type"],
            payload=payload,
            state="pending",
            next_attempt_at=func.now(),
            created_at=func.now(),
            started_at=func.now(),
        )
    )
    return delivery_id


def purge_tests_older_than(connection: TenantConnection, age: timedelta) -> int:
    """Deletes test deliveries made more than ``age`` ago (a delivery of an event goes with its
    event); returns how many."""
    purged = connection.execute(
        delete(_deliveries)
        .where(_deliveries.c.event_id.is_(None), _deliveries.c.created_at <= func.now() - age)
        .returning(_deliveries.c.id)
    )
    return len(purged.all())
