"""New row ids: UUIDv7, increasing within the process, and UUIDs like any other."""

from __future__ import annotations

import copy
import time
import uuid

import pytest

from dealbase.ids import new_id, new_ids


def test_a_new_id_is_a_version_7_uuid_of_the_current_millisecond() -> None:
    before = time.time_ns() // 1_000_000
    made = new_id()
    after = time.time_ns() // 1_000_000

    assert made.version == 7
    assert made.variant == uuid.RFC_4122
    assert before <= made.int >> 80 <= after + 1


def test_a_new_id_behaves_as_the_uuid_of_its_value() -> None:
    made = new_id()
    same = uuid.UUID(int=made.int)

    assert made == same
    assert hash(made) == hash(same)
    assert str(made) == str(same)
    assert uuid.UUID(str(made)) == made
    assert copy.deepcopy(made) == made
    assert made.is_safe is uuid.SafeUUID.unknown


def test_new_ids_increase_within_the_process() -> None:
    made = [new_id() for _ in range(10_000)]

    assert made == sorted(made)
    assert len(set(made)) == len(made)


def test_ids_made_together_increase_and_follow_those_made_before() -> None:
    before = new_id()
    together = new_ids(4_000)
    after = new_id()

    assert [before, *together, after] == sorted({before, *together, after})
    assert all(made.version == 7 for made in together)


def test_ids_made_together_are_one_to_a_millisecond_s_worth() -> None:
    with pytest.raises(ValueError, match="4096"):
        new_ids(4_097)
    with pytest.raises(ValueError, match="1 to"):
        new_ids(0)
