"""Stopping background asyncio tasks reliably.

On Python 3.11 a cancellation can be lost: when ``asyncio.wait_for`` sees its inner awaitable
finish at the moment its task is cancelled, it returns the result and the task runs on
(CPython bpo-42130; 3.12 rewrote ``wait_for`` on ``asyncio.timeout``). A loop that relies on
one ``cancel()`` may then never stop, so fulmen's background loops also check a flag and are
stopped with ``cancel_and_wait``.
"""

from __future__ import annotations

import asyncio

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(task: asyncio.Task[object], *, interval: float = 0.2) -> None:
    """Cancel ``task`` and wait until it is done, cancelling again if a cancel was lost."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=interval)
    if not task.cancelled():
        task.exception()  # retrieve it, so asyncio does not log "never retrieved"
