"""SqlStore: the ``Store`` on SQLite (embedded default) or PostgreSQL, in one code path.

Every operation is a function in ``queue``, ``records`` or ``reads`` run as one transaction by
a runner (see ``runner``); this class adds what lives between transactions: the attempt cache,
waking up ``wait_for_rollouts``, and the watchdog.

Waiting never busy-polls. A change this object makes wakes its waiters at once. Changes made by
other processes wake them through PostgreSQL ``LISTEN``/``NOTIFY``; on SQLite, which has no
notifications, waiters re-read every ``SQLITE.fallback_poll_s`` (0.5 s) instead, so a rollout
finished by another process is seen within half a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fulmen.errors import ConfigError, InvalidRequest
from fulmen.store.base import Capabilities, ReconcileReport
from fulmen.store.sql import expiry, queue, reads, records, workers
from fulmen.store.sql.dialects import NOTIFY_CHANNEL, SqlDialect, resolve_url
from fulmen.store.sql.runner import AsyncEngineRunner, Runner, ThreadRunner
from fulmen.store.sql.schema import ensure_schema
from fulmen.store.watchdog import Watchdog
from fulmen.types import (
    UNSET,
    Attempt,
    AttemptStatus,
    Claim,
    LLMCall,
    LLMCallCreate,
    Mode,
    Page,
    Resources,
    ResourcesCreate,
    Rollout,
    RolloutQuery,
    RolloutStatus,
    Span,
    SpanCreate,
    StoreStats,
    Unset,
    Worker,
)

if TYPE_CHECKING:
    from pydantic import JsonValue
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection

    from fulmen.types import RolloutCreate

__all__ = ["SqlStore"]

logger = logging.getLogger(__name__)


def _create_schema(conn: Connection, dialect: SqlDialect) -> None:
    if dialect.schema_lock_sql is not None:
        conn.exec_driver_sql(dialect.schema_lock_sql)
    ensure_schema(conn)


class SqlStore:
    """A ``Store`` in a SQL database; open it with ``await SqlStore.connect(url)``."""

    def __init__(self, runner: Runner, dialect: SqlDialect) -> None:
        self._runner = runner
        self._dialect = dialect
        self._attempt_rollouts: dict[str, str] = {}
        self._changed = asyncio.Event()
        self._watchdog: Watchdog | None = None
        self._listener: AsyncConnection | None = None
        self._listening = False
        self._listener_lock = asyncio.Lock()
        self._closed = False

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        watchdog_interval: float | None = 1.0,
        busy_timeout_s: float = 30.0,
        pool_size: int = 5,
    ) -> SqlStore:
        """Open (and create if needed) the store at ``url``.

        Args:
            url: ``sqlite:///path.db``, a bare file path, or ``postgresql://user@host/db``.
            watchdog_interval: seconds between watchdog passes; ``None`` runs no watchdog
                (another process does).
            busy_timeout_s: SQLite: how long a writer waits for another process's write lock.
            pool_size: PostgreSQL: connections kept open.
        """
        dialect, sa_url = resolve_url(url)
        if watchdog_interval is not None and watchdog_interval <= 0:
            raise ConfigError(
                f"watchdog_interval must be positive or None, got {watchdog_interval}"
            )
        runner: Runner
        if dialect.is_threaded:
            runner = await ThreadRunner.open(sa_url, dialect, busy_timeout_s=busy_timeout_s)
        else:
            runner = await _open_async_runner(sa_url, dialect, pool_size)
        try:
            await runner.write(_create_schema, dialect)
        except BaseException:
            await runner.aclose()
            raise
        store = cls(runner, dialect)
        if watchdog_interval is not None:
            store._watchdog = Watchdog(store, interval=watchdog_interval)
            store._watchdog.start()
        return store

    @property
    def capabilities(self) -> Capabilities:
        """Durable, and shared by every process that opens the same database."""
        return Capabilities(is_durable=True, is_shared=True)

    @property
    def dialect(self) -> SqlDialect:
        """The database's capability flags."""
        return self._dialect

    # -- rollouts and attempts ------------------------------------------------------------------

    async def enqueue(self, rollouts: Sequence[RolloutCreate]) -> list[Rollout]:
        """See ``Store.enqueue``; the batch is all-or-nothing."""
        if not rollouts:
            return []
        return await self._runner.write(queue.enqueue, self._dialect, list(rollouts))

    async def claim(
        self,
        worker_id: str,
        *,
        limit: int = 1,
        modes: Sequence[Mode] | None = None,
        claim_id: str | None = None,
    ) -> list[Claim]:
        """See ``Store.claim``."""
        if limit < 1:
            raise InvalidRequest(f"limit must be at least 1, got {limit}")
        modes = list(modes) if modes is not None else None
        claims = await self._runner.write(
            queue.claim, self._dialect, worker_id, limit, modes, claim_id
        )
        for c in claims:
            self._attempt_rollouts[c.attempt.attempt_id] = c.rollout.rollout_id
        return claims

    async def heartbeat(
        self,
        worker_id: str,
        *,
        attempt_ids: Sequence[str] = (),
        metadata: dict[str, JsonValue] | None = None,
    ) -> Worker:
        """See ``Store.heartbeat``."""
        return await self._runner.write(
            workers.heartbeat, self._dialect, worker_id, list(attempt_ids), metadata
        )

    async def update_attempt(
        self,
        attempt_id: str,
        *,
        status: AttemptStatus | Unset = UNSET,
        error: str | Unset | None = UNSET,
    ) -> Attempt:
        """See ``Store.update_attempt``."""
        attempt, after = await self._runner.write(
            queue.update_attempt, self._dialect, attempt_id, status, error
        )
        if after is not None:
            self._wake()
        return attempt

    async def update_rollout(
        self,
        rollout_id: str,
        *,
        status: RolloutStatus | Unset = UNSET,
        metadata: dict[str, JsonValue] | Unset = UNSET,
    ) -> Rollout:
        """See ``Store.update_rollout``."""
        rollout = await self._runner.write(
            queue.update_rollout, self._dialect, rollout_id, status, metadata
        )
        if status is not UNSET:
            self._wake()
        return rollout

    # -- spans and LLM calls --------------------------------------------------------------------

    async def add_spans(self, spans: Sequence[SpanCreate]) -> list[Span]:
        """See ``Store.add_spans``; the batch is all-or-nothing."""
        if not spans:
            return []
        batch = list(spans)
        try:
            return await self._runner.write(
                records.add_spans_fast, self._dialect, batch, self._attempt_rollouts
            )
        except records.SlowPath:
            return await self._runner.write(
                records.add_spans_exact, self._dialect, batch, self._attempt_rollouts
            )

    async def add_llm_calls(self, calls: Sequence[LLMCallCreate]) -> list[LLMCall]:
        """See ``Store.add_llm_calls``; the batch is all-or-nothing."""
        if not calls:
            return []
        batch = list(calls)
        try:
            return await self._runner.write(
                records.add_calls_fast, self._dialect, batch, self._attempt_rollouts
            )
        except records.SlowPath:
            return await self._runner.write(
                records.add_calls_exact, self._dialect, batch, self._attempt_rollouts
            )

    async def query_spans(
        self,
        rollout_id: str,
        *,
        attempt_id: str | None = None,
        after_sequence: int = 0,
        limit: int = 1000,
    ) -> Page[Span]:
        """See ``Store.query_spans``."""
        return await self._runner.read(
            reads.query_spans, rollout_id, attempt_id, after_sequence, limit
        )

    async def query_llm_calls(
        self,
        rollout_id: str,
        *,
        attempt_id: str | None = None,
        after_sequence: int = 0,
        limit: int = 1000,
    ) -> Page[LLMCall]:
        """See ``Store.query_llm_calls``."""
        return await self._runner.read(
            reads.query_llm_calls, rollout_id, attempt_id, after_sequence, limit
        )

    # -- reads ----------------------------------------------------------------------------------

    async def get_rollout(self, rollout_id: str) -> Rollout:
        """See ``Store.get_rollout``."""
        return await self._runner.read(reads.get_rollout, rollout_id)

    async def get_attempt(self, attempt_id: str) -> Attempt:
        """See ``Store.get_attempt``."""
        return await self._runner.read(reads.get_attempt, attempt_id)

    async def list_attempts(self, rollout_id: str) -> list[Attempt]:
        """See ``Store.list_attempts``."""
        return await self._runner.read(reads.list_attempts, rollout_id)

    async def query_rollouts(self, query: RolloutQuery) -> Page[Rollout]:
        """See ``Store.query_rollouts``."""
        return await self._runner.read(reads.query_rollouts, query)

    async def list_workers(self) -> list[Worker]:
        """See ``Store.list_workers``."""
        return await self._runner.read(reads.list_workers)

    async def stats(self) -> StoreStats:
        """See ``Store.stats``."""
        return await self._runner.read(reads.stats)

    # -- resources ------------------------------------------------------------------------------

    async def add_resources(self, resources: ResourcesCreate) -> Resources:
        """See ``Store.add_resources``."""
        return await self._runner.write(reads.add_resources, self._dialect, resources)

    async def get_resources(self, version: int) -> Resources:
        """See ``Store.get_resources``."""
        return await self._runner.read(reads.get_resources, version)

    async def latest_resources(self) -> Resources | None:
        """See ``Store.latest_resources``."""
        return await self._runner.read(reads.latest_resources)

    # -- waiting, watchdog, lifecycle -----------------------------------------------------------

    async def wait_for_rollouts(
        self, rollout_ids: Sequence[str], *, timeout: float
    ) -> list[Rollout]:
        """See ``Store.wait_for_rollouts`` and the module docstring on how waiters wake."""
        ids = list(rollout_ids)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        await self._ensure_listener()
        while True:
            changed = self._changed  # taken before reading, so no wake-up is missed
            rollouts = await self._runner.read(reads.get_rollouts, ids)
            remaining = deadline - loop.time()
            if all(r.is_terminal for r in rollouts) or remaining <= 0:
                return [r for r in rollouts if r.is_terminal]
            poll = self._dialect.fallback_poll_s
            if self._dialect.notify_sql is not None and not self._listening:
                poll = 0.5  # the listener is down: fall back to a slow poll until it is back
            wait = remaining if poll is None else min(remaining, poll)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), wait)
            if not self._listening:
                await self._ensure_listener()

    async def reconcile(self) -> ReconcileReport:
        """See ``Store.reconcile``: a read pass finds candidates, a write pass ends them."""
        expired = await self._runner.read(expiry.find_expired, self._dialect)
        if not expired:
            return ReconcileReport()
        report = await self._runner.write(expiry.expire, self._dialect, expired)
        if report.timed_out or report.lost:
            self._wake()
        return report

    async def aclose(self) -> None:
        """See ``Store.aclose``."""
        if self._closed:
            return
        self._closed = True
        if self._watchdog is not None:
            await self._watchdog.stop()
        await self._drop_listener()
        await self._runner.aclose()
        self._wake()

    def _wake(self) -> None:
        """Wake every waiter; each re-reads its rollouts."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _ensure_listener(self) -> None:
        """Start listening for other processes' notifications, once (PostgreSQL only)."""
        if self._listening or self._closed or not isinstance(self._runner, AsyncEngineRunner):
            return
        async with self._listener_lock:
            if self._listening or self._closed:
                return
            await self._drop_listener()
            try:
                self._listener = await _listen(self._runner, self._on_notify, self._on_lost)
                self._listening = True
            except Exception:  # waiting still works, by polling, until the next try
                logger.warning("cannot LISTEN for store notifications; polling", exc_info=True)

    async def _drop_listener(self) -> None:
        listener, self._listener = self._listener, None
        self._listening = False
        if listener is not None:
            # Invalidate rather than return it: a pooled connection must not keep listening.
            with contextlib.suppress(Exception):
                await listener.invalidate()
            with contextlib.suppress(Exception):
                await listener.close()

    def _on_notify(self, *_args: object) -> None:
        self._wake()

    def _on_lost(self, *_args: object) -> None:
        self._listening = False  # the next wait drops the dead connection and listens again
        self._wake()


async def _open_async_runner(sa_url: Any, dialect: SqlDialect, pool_size: int) -> Runner:
    from fulmen.errors import StoreUnavailable

    try:
        return await AsyncEngineRunner.open(sa_url, dialect, pool_size=pool_size)
    except Exception as exc:
        where = sa_url.render_as_string(hide_password=True)
        raise StoreUnavailable(f"cannot connect to {where}: {exc}") from exc


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
