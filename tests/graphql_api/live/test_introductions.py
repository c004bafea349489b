"""The caps on WebSockets that have not introduced themselves yet (``Introductions``): so many per
client address, so many in the process, each place given back as its connection leaves. The
same caps on sockets of a running app are in test_abuse_bounds.py."""

from __future__ import annotations

from dealbase.graphql_api.live.introductions import Introductions


def test_once_the_process_holds_its_cap_a_new_address_is_refused_and_nothing_counted() -> None:
    waiting = Introductions(per_address=2, in_all=3)
    assert [waiting.enter(address) for address in ("a", "b", "c")] == [True, True, True]

    assert waiting.enter("d") is False
    assert waiting.enter("a") is False  # under its own cap, over the process's
    assert len(waiting) == 3


def test_a_connection_that_leaves_gives_its_place_back_to_any_address() -> None:
    waiting = Introductions(per_address=2, in_all=2)
    assert waiting.enter("a") and waiting.enter("b")
    assert not waiting.enter("c")

    waiting.leave("a")

    assert len(waiting) == 1
    assert waiting.enter("c") is True
    assert not waiting.enter("a")


def test_an_address_holds_at_most_its_cap_while_others_still_enter() -> None:
    waiting = Introductions(per_address=2, in_all=10)
    assert waiting.enter("a") and waiting.enter("a")

    assert waiting.enter("a") is False
    assert waiting.enter("b") is True
    assert len(waiting) == 3
    # One of its connections leaving lets the address in once more, and only once.
    waiting.leave("a")
    assert waiting.enter("a") is True
    assert waiting.enter("a") is False


def test_an_address_whose_connections_all_left_starts_again_from_none() -> None:
    waiting = Introductions(per_address=1, in_all=10)
    for _ in range(3):
        assert waiting.enter("a")
        waiting.leave("a")

    assert len(waiting) == 0
    assert waiting.enter("a") is True
