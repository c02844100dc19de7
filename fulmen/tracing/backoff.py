"""Retrying store calls across short outages with capped, jittered exponential backoff.

Only idempotent store calls are retried (every write in the ``Store`` protocol is idempotent by a
caller-chosen id). An error is *transient* when the store could not be reached or answered with
something other than a ``FulmenError``; a ``FulmenError`` other than ``StoreUnavailable`` is the
store's verdict and is raised at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from fulmen.errors import FulmenError, StoreUnavailable

__all__ = ["Backoff", "is_transient", "retry_call"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Delays between retries: ``initial * 2**n`` seconds, capped at ``maximum``, with jitter.

    Attributes:
        initial: the first delay in seconds.
        maximum: the largest delay in seconds.
        deadline: give up (re-raise) after this many seconds of failures; ``None`` never does.
    """

    initial: float = 0.05
    maximum: float = 2.0
    deadline: float | None = 300.0

    def delay(self, failures: int) -> float:
        """Return the delay after ``failures`` consecutive failures (jitter in the upper half)."""
        base = min(self.maximum, self.initial * (2 ** max(failures - 1, 0)))
        return base / 2 + random.random() * base / 2


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` may go away by retrying (the store was unreachable or restarting)."""
    if isinstance(exc, StoreUnavailable):
        return True
    if isinstance(exc, FulmenError):
        return False
    return isinstance(exc, Exception)


async def retry_call(
    call: Callable[[], Awaitable[T]],
    *,
    backoff: Backoff,
    what: str,
    should_stop: Callable[[], bool] | None = None,
) -> T:
    """Await ``call()`` until it succeeds, retrying transient errors per ``backoff``.

    Raises the last error once the deadline passes or ``should_stop()`` turns true; non-transient
    errors are raised at once.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    failures = 0
    while True:
        try:
            return await call()
        except Exception as exc:
            if not is_transient(exc):
                raise
            failures += 1
            elapsed = loop.time() - started
            if (backoff.deadline is not None and elapsed >= backoff.deadline) or (
                should_stop is not None and should_stop()
            ):
                raise
            delay = backoff.delay(failures)
            if failures == 1 or failures % 20 == 0:
                logger.warning("%s failed (%s: %s); retrying", what, type(exc).__name__, exc)
            await asyncio.sleep(delay)
