"""Row ids: UUIDv7 (RFC 9562), so new rows land at the right edge of every primary-key index."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_millis = 0
_last_counter = 0

_COUNTERS = 1 << 12  # a millisecond's ids
_MILLIS = (1 << 48) - 1
_RANDOM_TAIL = (1 << 62) - 1
_VERSION_AND_VARIANT = 0x7 << 76 | 0b10 << 62


def new_id() -> uuid.UUID:
    """A UUIDv7 that is monotonic within this process, even within one millisecond."""
    return new_ids(1)[0]


def new_ids(count: int) -> list[uuid.UUID]:
    """``count`` (up to 4,096) new ids, in increasing order: one reading of the clock and of
    random bytes for them all, which a deal's several ids would otherwise each pay for."""
    global _last_millis, _last_counter
    if not 0 < count <= _COUNTERS:
        raise ValueError(f"1 to {_COUNTERS} ids at a time, not {count}")
    with _lock:
        millis = time.time_ns() // 1_000_000
        if millis <= _last_millis:
            millis, counter = _last_millis, _last_counter + 1
        else:
            counter = 0
        if counter + count > _COUNTERS:  # the 12-bit counter exhausted: borrow the next millisecond
            millis, counter = millis + 1, 0
        _last_millis, _last_counter = millis, counter + count - 1
    random = os.urandom(8 * count)
    stamp = (millis & _MILLIS) << 80 | _VERSION_AND_VARIANT
    return [
        uuid.UUID(
            int=stamp
            | (counter + index) << 64
            | int.from_bytes(random[8 * index : 8 * index + 8], "big") & _RANDOM_TAIL
        )
        for index in range(count)
    ]
