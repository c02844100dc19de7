"""One attempt as the runner holds it while its agent runs: stopping it, waiting for it.

An attempt's agent is stopped for one of three reasons: its timeout passed (``timeout``), the
runner is shutting down (``release``), or the store ended the attempt meanwhile (``ended``:
cancelled, or expired by the watchdog). The runner reports the outcome accordingly.
"""

from __future__ import annotations

import asyncio
import traceback
from dataclasses import dataclass
from typing import Any, Literal

from fulmen.agent.workers import AgentError

__all__ = ["RunningAttempt", "StopReason", "error_text"]

StopReason = Literal["timeout", "release", "ended"]

_RECANCEL_S = 0.5  # how often a stopping agent is cancelled again
_MAX_ERROR_CHARS = 32_000


@dataclass
class RunningAttempt:
    """The task running an attempt's agent, and why it was stopped (``None``: it was not)."""

    task: asyncio.Task[Any] | None = None
    reason: StopReason | None = None

    def stop(self, reason: StopReason) -> None:
        """Stop the agent (cancel its task); the first reason given is kept."""
        if self.reason is None:
            self.reason = reason
        if self.task is not None:
            self.task.cancel()

    async def watch(self, task: asyncio.Task[Any], timeout_s: float | None) -> None:
        """Wait for the agent; stop it at its timeout, and cancel again while it is stopping.

        Cancelling again covers a stop requested before the task started and a cancellation
        lost inside the agent (see ``fulmen.tracing.tasks``).
        """
        self.task = task
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s if timeout_s is not None else None
        while not task.done():
            if self.reason is not None:
                task.cancel()
            wait = _RECANCEL_S
            if deadline is not None and self.reason is None:
                wait = min(wait, max(deadline - loop.time(), 0.0))
            await asyncio.wait({task}, timeout=wait)
            if deadline is not None and loop.time() >= deadline and not task.done():
                self.stop("timeout")


def error_text(exc: BaseException) -> str:
    """Return the traceback to store as an attempt's error (the worker's, for a process)."""
    if isinstance(exc, AgentError):
        text = exc.traceback_text
    else:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text if len(text) <= _MAX_ERROR_CHARS else "...\n" + text[-_MAX_ERROR_CHARS:]
