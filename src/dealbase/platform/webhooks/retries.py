"""When a failed delivery is tried again, when it gives up, and when its endpoint is disabled."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta

FIRST_RETRY = timedelta(seconds=5)
LONGEST_WAIT = timedelta(hours=12)
# A delivery that fails this long or longer after it began gives up (its last wait may reach
# past it by up to LONGEST_WAIT); an endpoint none of whose attempts succeeded for this long is
# disabled.
GIVE_UP_AFTER = timedelta(days=3)
# Each wait is stretched or shrunk by up to a fifth, so that receivers that failed together
# are not retried together.
JITTER = (0.8, 1.2)

# 5 s doubled 14 times is past 12 h: more doublings change nothing (and would overflow).
_DOUBLINGS_TO_LONGEST = 14

Jitter = Callable[[], float]


def random_jitter() -> float:
    # Spreads retries; it guards nothing, so no cryptographic source is needed.
    return random.uniform(*JITTER)


def wait_after(failed_attempts: int, retry_after: timedelta | None, jitter: float) -> timedelta:
    """How long to wait after the ``failed_attempts``-th failure in a row: 5 s, doubling, at
    most 12 h, times ``jitter``; never sooner than the receiver's ``Retry-After`` (itself at most
    12 h)."""
    doublings = min(failed_attempts - 1, _DOUBLINGS_TO_LONGEST)
    backoff: timedelta = min(FIRST_RETRY * 2**doublings, LONGEST_WAIT) * jitter
    if retry_after is None:
        return backoff
    honoured: timedelta = min(retry_after, LONGEST_WAIT)
    return max(backoff, honoured)
