"""Retrying store calls across outages with capped exponential backoff and full jitter.

Only idempotent store calls are retried (every write in the ``Store`` protocol is idempotent by a
caller-chosen id). An error is *transient* when the store could not be reached, failed on its
side (a 5xx: ``StoreUnavailable`` or any ``FulmenError`` whose ``http_status`` is 500 or more,
such as the service's ``internal_error``), or raised something other than a ``FulmenError``. A
4xx ``FulmenError`` (not found, conflict, unauthorized, invalid request) is the store's verdict
on the caller's own request and is raised at once. While a call keeps failing, one warning is
logged per minute, so a long outage is visible without flooding the log.
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

_LOG_EVERY_S = 60.0  # while a call keeps failing, one warning per minute


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
        """Return the delay after ``failures`` consecutive failures, uniform in [0, cap].

        Full jitter: clients that failed together spread their retries over the whole window
        instead of arriving together at its end.
        """
        base = min(self.maximum, self.initial * (2 ** min(max(failures - 1, 0), 62)))
        return random.uniform(0.0, base)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` may go away by retrying (the store was unreachable or restarting)."""
    if isinstance(exc, StoreUnavailable):
        return True
    if isinstance(exc, FulmenError):
        return exc.http_status >= 500
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
    errors are raised at once. Logs the first failure, then one line per ``_LOG_EVERY_S`` while
    failures go on, and one when the call succeeds again.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    failures = 0
    logged_at = started
    while True:
        try:
            result = await call()
        except Exception as exc:
            if not is_transient(exc):
                raise
            failures += 1
            now = loop.time()
            if (backoff.deadline is not None and now - started >= backoff.deadline) or (
                should_stop is not None and should_stop()
            ):
                raise
            if failures == 1 or now - logged_at >= _LOG_EVERY_S:
                logged_at = now
                logger.warning(
                    "%s failed %d times in %.0f s (%s: %s); still retrying",
                    what,
                    failures,
                    now - started,
                    type(exc).__name__,
                    exc,
                )
            await asyncio.sleep(backoff.delay(failures))
        else:
            if failures:
                logger.warning(
                    "%s succeeded after %d failures in %.0f s",
                    what,
                    failures,
                    loop.time() - started,
                )
            return result
