"""What a connection of the event loop's pool keeps between units of work (its tenant's role, the
settings its last statement ran under), and what each unit of work changes where the session is
not known to hold what it needs; without ``Sessions`` (behind pgbouncer) each transaction's
changes end with it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import pytest
from sqlalchemy import func, literal, select, table

from dealbase.db.database import Database
from dealbase.db.sessions import (
    SET_SETTINGS,
    SWITCH_SESSION_TO_ROLE,
    SWITCH_TO_ROLE,
    StatementSettings,
)
from dealbase.db.units import UnitOfWork
from dealbase.platform.reads.service import GENERIC_PLANS
from dealbase.tenancy.scope import Scope, tenant_role
from tests.db.test_transactions import round_trips_sent
from tests.support import TenantWorld

_SHOWN = select(
    func.current_setting("plan_cache_mode"),
    func.current_setting("enable_seqscan"),
    func.current_setting("jit"),
)
_GENERIC = ("force_generic_plan", "off", "off")
# The statements that put the generic plans' settings back to the server's, in a session.
_RESETS = ["RESET enable_seqscan", "RESET jit", "RESET plan_cache_mode"]


def _current_user(uow: UnitOfWork) -> str:
    user: str = uow.connection.execute(select(func.current_user())).scalar_one()
    return user


def _fails(uow: UnitOfWork) -> object:
    return uow.connection.execute(
        select(literal(1)).select_from(table("nowhere")), settings=GENERIC_PLANS
    )


def _shown(settings: StatementSettings | None) -> Callable[[UnitOfWork], tuple[Any, ...]]:
    def work(uow: UnitOfWork) -> tuple[Any, ...]:
        return tuple(uow.connection.execute(_SHOWN, settings=settings).one())

    return work


def _units_on_one_connection(
    database_url: str,
    units: Sequence[tuple[Scope, Callable[[UnitOfWork], Any]]],
    *,
    sessions: bool,
    one_statement: bool = True,
) -> list[Any]:
    """On a pool of one connection, each unit of work in turn in its scope; what each answered
    (``_fails``: the error it raised). ``one_statement``: each is a read of one statement, one
    round trip with its transaction's end."""

    async def units_of_work() -> list[Any]:
        own = Database(database_url, pool_size=1, max_overflow=0, sessions=sessions)
        await own.open()
        answers: list[Any] = []
        try:
            for scope, work in units:
                if work is _fails:
                    with pytest.raises(psycopg.errors.UndefinedTable) as raised:
                        await own.run(scope, work)
                    answers.append(raised.type)
                else:
                    run = own.read if one_statement else own.run
                    answers.append(await run(scope, work))
        finally:
            await own.close()
        return answers

    return asyncio.run(units_of_work())


def _servers_settings(database_url: str) -> tuple[Any, ...]:
    with psycopg.connect(database_url) as connection:
        row = connection.execute(
            "SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan'),"
            " current_setting('jit')"
        ).fetchone()
    assert row is not None
    return tuple(row)


def test_a_connection_keeps_its_tenants_role_between_units_of_work_and_switches_for_another(
    database_url: str, make_tenant: Callable[..., TenantWorld], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = make_tenant().tenant.scope, make_tenant().tenant.scope
    with round_trips_sent(monkeypatch) as sent:
        roles = _units_on_one_connection(
            database_url,
            [(scope, _current_user) for scope in (first, first, second, first)],
            sessions=True,
        )

    assert roles == [tenant_role(scope.schema) for scope in (first, first, second, first)]
    switched = [trip[0] == SWITCH_SESSION_TO_ROLE for trip in sent]
    assert switched == [True, False, True, True]
    # The first also puts back the settings, which a new connection is not known to hold.
    assert [len(trip) for trip in sent] == [2 + len(_RESETS), 1, 2, 2]


def test_after_a_failed_unit_of_work_the_next_switches_the_role_again(
    database_url: str, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a failed transaction switched is rolled back with it, and what the connection held
    before is no longer taken for granted."""
    scope = world.tenant.scope
    units = [(scope, _fails), (scope, _current_user), (scope, _fails), (scope, _current_user)]
    with round_trips_sent(monkeypatch) as sent:
        answers = _units_on_one_connection(database_url, units, sessions=True)

    assert answers[1::2] == [tenant_role(scope.schema)] * 2
    switched = [SWITCH_SESSION_TO_ROLE in trip for trip in sent]
    assert switched == [True, True, False, True]


def test_without_sessions_every_transaction_switches_for_itself(
    database_url: str, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    scope = world.tenant.scope
    with round_trips_sent(monkeypatch) as sent:
        roles = _units_on_one_connection(database_url, [(scope, _current_user)] * 2, sessions=False)

    assert roles == [tenant_role(scope.schema)] * 2
    assert [trip[0] for trip in sent] == [SWITCH_TO_ROLE] * 2


def test_a_connection_keeps_a_statements_settings_until_a_statement_without_them_runs(
    database_url: str, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    scope = world.tenant.scope
    generic, plain = _shown(GENERIC_PLANS), _shown(None)
    units = [(scope, generic), (scope, generic), (scope, plain), (scope, plain), (scope, generic)]
    with round_trips_sent(monkeypatch) as sent:
        shown = _units_on_one_connection(database_url, units, sessions=True)

    servers = _servers_settings(database_url)
    assert servers != _GENERIC
    assert shown == [_GENERIC, _GENERIC, servers, servers, _GENERIC]
    statements = [trip[:-1] for trip in sent]  # what went before each unit's statement
    assert statements == [
        [SWITCH_SESSION_TO_ROLE, SET_SETTINGS],  # nothing else to put back: they are all set
        [],  # the connection holds the role and the settings: the statement alone
        _RESETS,
        [],
        [SET_SETTINGS],
    ]


def test_after_a_failed_unit_of_work_the_next_puts_every_setting_back(
    database_url: str, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed one set the settings; that rolled back with it, and the next, not knowing,
    puts them back to the server's before it runs."""
    scope = world.tenant.scope
    units = [(scope, _shown(GENERIC_PLANS)), (scope, _fails), (scope, _shown(None))]
    with round_trips_sent(monkeypatch) as sent:
        shown = _units_on_one_connection(database_url, units, sessions=True)

    assert shown[2] == _servers_settings(database_url)
    assert sent[2][:-1] == [SWITCH_SESSION_TO_ROLE, *_RESETS]


def test_without_sessions_a_statements_settings_hold_for_it_and_end_with_the_transaction(
    database_url: str, world: TenantWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    scope = world.tenant.scope

    def both(uow: UnitOfWork) -> list[tuple[Any, ...]]:
        return [_shown(GENERIC_PLANS)(uow), _shown(None)(uow), _shown(GENERIC_PLANS)(uow)]

    with round_trips_sent(monkeypatch) as sent:
        [within, after] = _units_on_one_connection(
            database_url,
            [(scope, both), (scope, _shown(None))],
            sessions=False,
            one_statement=False,
        )

    servers = _servers_settings(database_url)
    assert within == [_GENERIC, servers, _GENERIC]
    assert after == servers
    # In the transaction: set for the statement and put back before the next, locally; the
    # next transaction finds the server's.
    assert [trip[:-1] for trip in sent[:3]] == [
        ["BEGIN", SWITCH_TO_ROLE, SET_SETTINGS],
        [f"SET LOCAL {name.removeprefix('RESET ')} TO DEFAULT" for name in _RESETS],
        [SET_SETTINGS],
    ]
    assert sent[3:] == [["COMMIT"], ["BEGIN", SWITCH_TO_ROLE, sent[4][-1]], ["COMMIT"]]


def test_settings_named_by_anything_but_a_settings_name_are_refused() -> None:
    with pytest.raises(ValueError, match="not settings' names"):
        StatementSettings((("jit", "off"), ("jit = off; DROP TABLE deals; --", "x")))
