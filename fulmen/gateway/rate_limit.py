"""A token bucket: how many records the gateway may write per minute, bursts included.

The bucket holds up to ``per_minute`` tokens and refills continuously at ``per_minute`` per
60 s; taking never waits, it only says no, so a limit sheds recording and never delays a call.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    """Refilling allowance of ``per_minute`` units a minute, at most ``per_minute`` at once.

    Args:
        per_minute: the refill rate and the burst size.
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(self, per_minute: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute <= 0:
            raise ValueError(f"per_minute must be positive, got {per_minute}")
        self._capacity = float(per_minute)
        self._rate = per_minute / 60.0
        self._clock = clock
        self._tokens = self._capacity
        self._at = clock()

    def has(self, cost: float = 1.0) -> bool:
        """Whether ``cost`` units could be taken now (nothing is taken)."""
        self._refill()
        return self._tokens >= cost

    def take(self, cost: float = 1.0) -> bool:
        """Take ``cost`` units if the bucket holds them; ``False`` (nothing taken) if not."""
        self._refill()
        if self._tokens < cost:
            return False
        self._tokens -= cost
        return True

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._capacity, self._tokens + (now - self._at) * self._rate)
        self._at = now
