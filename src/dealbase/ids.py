"""Row ids: UUIDv7 (RFC 9562), so new rows land at the right edge of every primary-key index."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_millis = 0
_last_counter = 0


def new_id() -> uuid.UUID:
    """A UUIDv7 that is monotonic within this process, even within one millisecond."""
    global _last_millis, _last_counter
    with _lock:
        millis = time.time_ns() // 1_000_000
        if millis <= _last_millis:
            millis = _last_millis
            _last_counter += 1
            if _last_counter >= 1 << 12:  # 12-bit counter exhausted: borrow the next millisecond
                millis += 1
                _last_counter = 0
        else:
            _last_counter = 0
        _last_millis = millis
        counter = _last_counter
    random_tail = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= counter << 64
    value |= 0b10 << 62
    value |= random_tail
    return uuid.UUID(int=value)
