"""SqlStore: the ``Store`` on SQLite (embedded default) or PostgreSQL, in one code path.

Every operation is a function (in ``queue``, ``workers``, ``records``, ``reads``, ``expiry``)
run as one transaction by a runner (see ``runner``); this class adds what lives between
transactions: the attempt cache, waking up ``wait_for_rollouts`` (``wakeups``), the watchdog.

Waiting never busy-polls. A change this object makes wakes its waiters at once. Changes made by
other processes wake them through PostgreSQL ``LISTEN``/``NOTIFY``; on SQLite, which has no
notifications, waiters re-read every ``SQLITE.fallback_poll_s`` (0.5 s) instead, so a rollout
finished by another process is seen within half a second.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fulmen.errors import ConfigError, InvalidRequest
from fulmen.store.arguments import check_arguments
from fulmen.store.base import Capabilities, ReconcileReport
from fulmen.store.sql import expiry, queue, reads, records, rewards, sessions, workers
from fulmen.store.sql.async_runner import AsyncEngineRunner
from fulmen.store.sql.dialects import SqlDialect, resolve_url
from fulmen.store.sql.run_methods import SqlRunMethods
from fulmen.store.sql.schema import ensure_schema
from fulmen.store.sql.sqlite_runner import SqliteRunner
from fulmen.store.sql.transactions import TransactionRunner
from fulmen.store.sql.wakeups import Wakeups
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
    PruneReport,
    PruneRequest,
    Resources,
    ResourcesCreate,
    Reward,
    RewardCreate,
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

    from fulmen.types import RolloutCreate
    from fulmen.types.sessions import SessionCreate

__all__ = ["SqlStore"]

# Operations whose SQLite work stays within a few milliseconds run on the event loop thread
# (a round trip to a thread costs more than a small operation, and under CPU contention the
# thread wake-ups dominate); bigger ones go to a thread so the loop stays responsive.
_SMALL = 32  # rollouts, attempts
_SMALL_APPEND = 128  # spans or LLM calls (about 40 us each)
_SMALL_PAGE = 100  # rows read


def _create_schema(conn: Connection, dialect: SqlDialect) -> None:
    if dialect.schema_lock_sql is not None:
        conn.exec_driver_sql(dialect.schema_lock_sql)
    ensure_schema(conn)


class SqlStore(SqlRunMethods):
    """A ``Store`` in a SQL database; open it with ``await SqlStore.connect(url)``.

    The run and model-version methods come from ``SqlRunMethods``.
    """

    def __init__(self, runner: TransactionRunner, dialect: SqlDialect) -> None:
        self._runner = runner
        self._dialect = dialect
        self._attempt_rollouts: dict[str, str] = {}
        self._wakeups = Wakeups(runner, dialect)
        self._watchdog: Watchdog | None = None
        self._closed = False

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        watchdog_interval: float | None = 1.0,
        busy_timeout_s: float = 30.0,
        pool_size: int = 5,
        **options: Any,
    ) -> SqlStore:
        """Open (and create if needed) the store at ``url``.

        Args:
            url: ``sqlite:///path.db``, a bare file path, or ``postgresql://user@host/db``.
            watchdog_interval: seconds between watchdog passes; ``None`` runs no watchdog
                (another process does).
            busy_timeout_s: SQLite: how long a writer waits for another process's write lock.
            pool_size: PostgreSQL: connections kept open.
            **options: refused with ``ConfigError`` (e.g. ``token``, which only the HTTP
                client uses), so a setting that would have no effect is not silently dropped.
        """
        if options:
            raise ConfigError(
                f"option(s) {sorted(options)} do not apply to a SQL store ({url!r}); "
                "known: watchdog_interval, busy_timeout_s, pool_size"
            )
        dialect, sa_url = resolve_url(url)
        if watchdog_interval is not None and watchdog_interval <= 0:
            raise ConfigError(
                f"watchdog_interval must be positive or None, got {watchdog_interval}"
            )
        runner: TransactionRunner
        if dialect.is_threaded:
            runner = await SqliteRunner.open(sa_url, dialect, busy_timeout_s=busy_timeout_s)
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
        return await self._runner.write(
            queue.enqueue, self._dialect, list(rollouts), small=len(rollouts) <= _SMALL
        )

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
        check_arguments(worker_id=worker_id, claim_id=claim_id)
        modes = list(modes) if modes is not None else None
        claims = await self._runner.write(
            queue.claim, self._dialect, worker_id, limit, modes, claim_id, small=limit <= _SMALL
        )
        if len(self._attempt_rollouts) > records.MAX_CACHED_ATTEMPTS:
            self._attempt_rollouts.clear()  # a cache of immutable facts: refilled on demand
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
        check_arguments(worker_id=worker_id, attempt_ids=attempt_ids, metadata=metadata)
        return await self._runner.write(
            workers.heartbeat,
            self._dialect,
            worker_id,
            list(attempt_ids),
            metadata,
            small=len(attempt_ids) <= _SMALL,
        )

    async def update_attempt(
        self,
        attempt_id: str,
        *,
        status: AttemptStatus | Unset = UNSET,
        error: str | Unset | None = UNSET,
    ) -> Attempt:
        """See ``Store.update_attempt``."""
        if error is not UNSET:
            check_arguments(error=error)
        attempt, after = await self._runner.write(
            queue.update_attempt, self._dialect, attempt_id, status, error, small=True
        )
        if after is not None:
            self._wakeups.wake()
        return attempt

    async def update_rollout(
        self,
        rollout_id: str,
        *,
        status: RolloutStatus | Unset = UNSET,
        metadata: dict[str, JsonValue] | Unset = UNSET,
    ) -> Rollout:
        """See ``Store.update_rollout``."""
        if metadata is not UNSET:
            check_arguments(metadata=metadata)
        rollout = await self._runner.write(
            queue.update_rollout, self._dialect, rollout_id, status, metadata, small=True
        )
        if status is not UNSET:
            self._wakeups.wake()
        return rollout

    # -- spans and LLM calls --------------------------------------------------------------------

    async def add_spans(self, spans: Sequence[SpanCreate]) -> list[Span]:
        """See ``Store.add_spans``; the batch is all-or-nothing."""
        if not spans:
            return []
        batch = list(spans)
        small = len(batch) <= _SMALL_APPEND
        try:
            return await self._runner.write(
                records.add_spans_fast, self._dialect, batch, self._attempt_rollouts, small=small
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
        small = len(batch) <= _SMALL_APPEND
        try:
            return await self._runner.write(
                records.add_calls_fast, self._dialect, batch, self._attempt_rollouts, small=small
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
            reads.query_spans,
            rollout_id,
            attempt_id,
            after_sequence,
            limit,
            small=limit <= _SMALL_PAGE,
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
            reads.query_llm_calls,
            rollout_id,
            attempt_id,
            after_sequence,
            limit,
            small=limit <= _SMALL_PAGE,
        )

    # -- rewards and retention ------------------------------------------------------------------

    async def add_reward(self, reward: RewardCreate) -> Reward:
        """See ``Store.add_reward``."""
        return await self._runner.write(rewards.add_reward, self._dialect, reward, small=True)

    async def list_rewards(self, rollout_id: str) -> list[Reward]:
        """See ``Store.list_rewards``."""
        return await self._runner.read(rewards.list_rewards, rollout_id, small=True)

    async def record_session(self, session: SessionCreate) -> Claim:
        """See ``Store.record_session``."""
        claim = await self._runner.write(
            sessions.record_session, self._dialect, session, small=True
        )
        self._attempt_rollouts[claim.attempt.attempt_id] = claim.rollout.rollout_id
        return claim

    async def prune(self, request: PruneRequest) -> PruneReport:
        """See ``Store.prune``: one transaction per chunk of rollouts, oldest first."""
        total = PruneReport(dry_run=request.dry_run)
        after: int | None = 0
        while after is not None:
            chunk, after = await self._runner.write(
                rewards.prune_chunk, self._dialect, request, after
            )
            total = _add_counts(total, chunk)
        return total

    # -- reads ----------------------------------------------------------------------------------

    async def get_rollout(self, rollout_id: str) -> Rollout:
        """See ``Store.get_rollout``."""
        return await self._runner.read(reads.get_rollout, rollout_id, small=True)

    async def get_attempt(self, attempt_id: str) -> Attempt:
        """See ``Store.get_attempt``."""
        return await self._runner.read(reads.get_attempt, attempt_id, small=True)

    async def list_attempts(self, rollout_id: str) -> list[Attempt]:
        """See ``Store.list_attempts``."""
        return await self._runner.read(reads.list_attempts, rollout_id, small=True)

    async def query_rollouts(self, query: RolloutQuery) -> Page[Rollout]:
        """See ``Store.query_rollouts``."""
        return await self._runner.read(
            reads.query_rollouts, query, small=query.limit <= _SMALL_PAGE
        )

    async def list_workers(self) -> list[Worker]:
        """See ``Store.list_workers``."""
        return await self._runner.read(reads.list_workers)

    async def stats(self) -> StoreStats:
        """See ``Store.stats``."""
        return await self._runner.read(reads.stats)

    # -- resources ------------------------------------------------------------------------------

    async def add_resources(self, resources: ResourcesCreate) -> Resources:
        """See ``Store.add_resources``."""
        return await self._runner.write(reads.add_resources, self._dialect, resources, small=True)

    async def get_resources(self, version: int) -> Resources:
        """See ``Store.get_resources``."""
        return await self._runner.read(reads.get_resources, version, small=True)

    async def latest_resources(self) -> Resources | None:
        """See ``Store.latest_resources``."""
        return await self._runner.read(reads.latest_resources, small=True)

    # -- waiting, watchdog, lifecycle -----------------------------------------------------------

    async def wait_for_rollouts(
        self, rollout_ids: Sequence[str], *, timeout: float
    ) -> list[Rollout]:
        """See ``Store.wait_for_rollouts`` and the module docstring on how waiters wake."""
        ids = list(rollout_ids)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        await self._wakeups.listen()
        while True:
            changed = self._wakeups.changed  # taken before reading: no wake-up is missed
            rollouts = await self._runner.read(
                reads.get_rollouts, ids, small=len(ids) <= _SMALL_PAGE
            )
            remaining = deadline - loop.time()
            if all(r.is_terminal for r in rollouts) or remaining <= 0:
                return [r for r in rollouts if r.is_terminal]
            poll = self._wakeups.poll_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    changed.wait(), remaining if poll is None else min(remaining, poll)
                )
            await self._wakeups.listen()  # again, if the listening connection was lost

    async def reconcile(self) -> ReconcileReport:
        """See ``Store.reconcile``: a read pass finds candidates, a write pass ends them."""
        expired = await self._runner.read(expiry.find_expired, self._dialect)
        if not expired:
            return ReconcileReport()
        report = await self._runner.write(expiry.expire, self._dialect, expired)
        if report.timed_out or report.lost:
            self._wakeups.wake()
        return report

    async def aclose(self) -> None:
        """See ``Store.aclose``."""
        if self._closed:
            return
        self._closed = True
        if self._watchdog is not None:
            await self._watchdog.stop()
        await self._wakeups.aclose()
        await self._runner.aclose()


def _add_counts(a: PruneReport, b: PruneReport) -> PruneReport:
    return a.model_copy(
        update={
            "rollouts": a.rollouts + b.rollouts,
            "attempts": a.attempts + b.attempts,
            "spans": a.spans + b.spans,
            "llm_calls": a.llm_calls + b.llm_calls,
            "rewards": a.rewards + b.rewards,
        }
    )


async def _open_async_runner(sa_url: Any, dialect: SqlDialect, pool_size: int) -> TransactionRunner:
    from fulmen.errors import StoreUnavailable

    try:
        return await AsyncEngineRunner.open(sa_url, dialect, pool_size=pool_size)
    except ModuleNotFoundError:
        raise  # a missing driver (asyncpg) is an install problem; the CLI names the extra
    except Exception as exc:
        where = sa_url.render_as_string(hide_password=True)
        raise StoreUnavailable(f"cannot connect to {where}: {exc}") from exc
