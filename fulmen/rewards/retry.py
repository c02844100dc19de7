"""Whether and when a failed judge call is sent again: pure functions over its outcome.

A call is retried when ``fulmen.chat_call`` marks it retryable (429, a 5xx, a connection
error or a timeout) and ``JudgeRetry`` allows another try. The wait is the judge's own
``Retry-After`` when it sent one (seconds or an HTTP date), else the capped, fully jittered
exponential delay of ``fulmen.tracing.backoff.Backoff``, the one every other retry in fulmen
draws from.

>>> retry_after_seconds("7", now=0.0)
7.0
>>> retry_after_seconds("Thu, 01 Jan 1970 00:00:30 GMT", now=10.0)
20.0
>>> retry_after_seconds("soon", now=0.0) is None
True
"""

from __future__ import annotations

import email.utils
import math
from dataclasses import dataclass
from datetime import UTC

from fulmen.chat_call import ChatCall
from fulmen.rewards.config import JudgeRetry
from fulmen.tracing.backoff import Backoff

__all__ = ["RetryDecision", "backoff_of", "retry_after_seconds", "retry_decision"]


@dataclass(frozen=True)
class RetryDecision:
    """What to do after a failed try.

    Attributes:
        wait_s: seconds to wait before the next try; ``None``: give up.
        reason: why it gives up (``""`` when it retries, or when the error is not retryable).
    """

    wait_s: float | None
    reason: str = ""


def backoff_of(retry: JudgeRetry) -> Backoff:
    """Return the ``Backoff`` whose delays ``retry`` configures."""
    return Backoff(
        initial=retry.initial_delay_s, maximum=retry.max_delay_s, deadline=retry.deadline_s
    )


def retry_after_seconds(value: str | None, *, now: float) -> float | None:
    """Return the wait a ``Retry-After`` header asks for, in seconds, never negative.

    ``value`` is a number of seconds or an HTTP date (a date in the past asks for no wait);
    ``now`` is the wall-clock time (``time.time()``) a date is measured from. Returns ``None``
    when there is no header or it says neither.
    """
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if moment.tzinfo is None:  # "-0000" or no zone: HTTP dates are UTC (RFC 9110)
            moment = moment.replace(tzinfo=UTC)
        seconds = moment.timestamp() - now
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def retry_decision(
    call: ChatCall,
    *,
    retry: JudgeRetry,
    backoff: Backoff,
    tries: int,
    elapsed_s: float,
    now: float,
) -> RetryDecision:
    """Decide whether to send a call again after its ``tries``-th try failed as ``call`` did.

    ``elapsed_s`` is the time since the first try began (``retry.deadline_s`` bounds it);
    ``now`` the wall-clock time, for a ``Retry-After`` date.
    """
    if not call.is_retryable:
        return RetryDecision(None)
    if tries >= retry.attempts:
        return RetryDecision(None, f"gave up after {tries} tries (reward.judge.retry.attempts)")
    asked = retry_after_seconds(call.retry_after, now=now)
    wait = asked if asked is not None else backoff.delay(tries)
    if elapsed_s + wait > retry.deadline_s:
        source = f"Retry-After asked for {asked:g} s" if asked is not None else f"{wait:.1f} s"
        return RetryDecision(
            None,
            f"gave up after {tries} tries: the next one ({source}) would start past "
            f"reward.judge.retry.deadline_s ({retry.deadline_s:g} s)",
        )
    return RetryDecision(wait)
