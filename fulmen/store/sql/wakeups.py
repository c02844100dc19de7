"""Wake-ups for ``wait_for_rollouts``: in-process changes and PostgreSQL ``NOTIFY``.

A waiter takes ``Wakeups.changed`` *before* reading its rollouts and waits on it afterwards, so
a change that commits between the read and the wait is never missed. ``wake()`` swaps in a new
event and sets the old one, waking every waiter at once.

On PostgreSQL a connection is taken out of the pool for good and ``LISTEN``s on the store's
channel; writers ``NOTIFY`` when a rollout becomes final (delivered at commit), so waiters in
every process wake. If that connection dies, waiters fall back to a slow poll and the next wait
listens again. SQLite has no notifications: waiters poll every ``fallback_poll_s`` for changes
made by other processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from fulmen.store.sql.async_runner import AsyncEngineRunner
from fulmen.store.sql.dialects import NOTIFY_CHANNEL, SqlDialect
from fulmen.store.sql.transactions import TransactionRunner

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

__all__ = ["Wakeups"]

logger = logging.getLogger(__name__)

_POLL_WHILE_NOT_LISTENING_S = 0.5


class Wakeups:
    """The change signal of one store object, fed by itself and by other processes."""

    def __init__(self, runner: TransactionRunner, dialect: SqlDialect) -> None:
        self._runner = runner
        self._dialect = dialect
        self._changed = asyncio.Event()
        self._listener: AsyncConnection | None = None
        self._is_listening = False
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def changed(self) -> asyncio.Event:
        """The event the next ``wake()`` sets; take it before reading."""
        return self._changed

    @property
    def poll_s(self) -> float | None:
        """How long a waiter may sleep before re-reading; None: until woken."""
        if self._dialect.notify_sql is not None and not self._is_listening:
            return _POLL_WHILE_NOT_LISTENING_S
        return self._dialect.fallback_poll_s

    @property
    def is_listening(self) -> bool:
        """Whether notifications from other processes arrive (PostgreSQL)."""
        return self._is_listening

    def wake(self, *_args: object) -> None:
        """Wake every waiter; each re-reads its rollouts."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def listen(self) -> None:
        """Listen for other processes' notifications if the database has them and we do not."""
        if self._is_listening or self._closed or not isinstance(self._runner, AsyncEngineRunner):
            return
        async with self._lock:
            if self._is_listening or self._closed:
                return
            await self._drop()
            try:
                self._listener = await _listen(self._runner, self.wake, self._on_lost)
                self._is_listening = True
            except Exception:  # waiting still works, by polling, until the next try
                logger.warning("cannot LISTEN for store notifications; polling", exc_info=True)

    async def aclose(self) -> None:
        """Stop listening and wake every waiter."""
        self._closed = True
        await self._drop()
        self.wake()

    async def _drop(self) -> None:
        listener, self._listener = self._listener, None
        self._is_listening = False
        if listener is not None:
            # Invalidate rather than return it: a pooled connection must not keep listening.
            with contextlib.suppress(Exception):
                await listener.invalidate()
            with contextlib.suppress(Exception):
                await listener.close()

    def _on_lost(self, *_args: object) -> None:
        self._is_listening = False  # the next wait drops the dead connection and listens again
        self.wake()


async def _listen(runner: AsyncEngineRunner, on_notify: Any, on_lost: Any) -> AsyncConnection:
    """Check a connection out of the pool for good and listen on the store's channel."""
    conn = await runner.engine.connect()
    try:
        raw = await conn.get_raw_connection()
        driver: Any = raw.driver_connection
        await driver.add_listener(NOTIFY_CHANNEL, on_notify)
        driver.add_termination_listener(on_lost)
    except BaseException:
        await conn.close()
        raise
    return conn
