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
from typing import TYPE_CHECKING, Any

from fulmen.errors import ConfigError
from fulmen.store.base import Capabilities, ReconcileReport, Store
from fulmen.store.sql import expiry, queue, reads, records, rewards, sessions, workers
from fulmen.store.sql.async_runner import AsyncEngineRunner
from fulmen.store.sql.dialects import SqlDialect, resolve_url
from fulmen.store.sql.run_methods import SqlRunMethods
from fulmen.store.sql.schema import ensure_schema
from fulmen.store.sql.sqlite_runner import SqliteRunner
from fulmen.store.sql.transactions import TransactionRunner
from fulmen.store.sql.wakeups import Wakeups
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


class SqlStore(SqlRunMethods, Store):
    """A ``Store`` in a SQL database; open it with ``await SqlStore.connect(url)``.

    The run and model-version methods come from ``SqlRunMethods``.
    """

    def __init__(self, runner: TransactionRunner, dialect: SqlDialect) -> None:
        super().__init__()
        self._runner = runner
        self._dialect = dialect
        self._attempt_rollouts: dict[str, str] = {}
        self._wakeups = Wakeups(runner, dialect)

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
        store._watch(watchdog_interval)
        return store

    @property
    def capabilities(self) -> Capabilities:
        """Durable, and shared by every process that opens the same database."""
        return Capabilities(is_durable=True, is_shared=True)

    @property
    def dialect(self) -> SqlDialect:
        """The database's capability flags."""
        return self._dialect

    # -- the queue ------------------------------------------------------------------------------

    async def _enqueue(self, rollouts: list[RolloutCreate]) -> list[Rollout]:
        return await self._runner.write(
            queue.enqueue, self._dialect, rollouts, small=len(rollouts) <= _SMALL
        )

    async def _claim(
        self, worker_id: str, limit: int, modes: list[Mode] | None, claim_id: str | None
    ) -> list[Claim]:
        claims = await self._runner.write(
            queue.claim, self._dialect, worker_id, limit, modes, claim_id, small=limit <= _SMALL
        )
        if len(self._attempt_rollouts) > records.MAX_CACHED_ATTEMPTS:
            self._attempt_rollouts.clear()  # a cache of immutable facts: refilled on demand
        for c in claims:
            self._attempt_rollouts[c.attempt.attempt_id] = c.rollout.rollout_id
        return claims

    async def _heartbeat(
        self, worker_id: str, attempt_ids: list[str], metadata: dict[str, JsonValue] | None
    ) -> Worker:
        return await self._runner.write(
            workers.heartbeat,
            self._dialect,
            worker_id,
            attempt_ids,
            metadata,
            small=len(attempt_ids) <= _SMALL,
        )

    async def _update_attempt(
        self, attempt_id: str, status: AttemptStatus | Unset, error: str | Unset | None
    ) -> Attempt:
        attempt, after = await self._runner.write(
            queue.update_attempt, self._dialect, attempt_id, status, error, small=True
        )
        if after is not None:
            self._wakeups.wake()
        return attempt

    async def _update_rollout(
        self,
        rollout_id: str,
        status: RolloutStatus | Unset,
        metadata: dict[str, JsonValue] | Unset,
    ) -> Rollout:
        rollout = await self._runner.write(
            queue.update_rollout, self._dialect, rollout_id, status, metadata, small=True
        )
        if status is not UNSET:
            self._wakeups.wake()
        return rollout

    async def _record_session(self, session: SessionCreate) -> Claim:
        claim = await self._runner.write(
            sessions.record_session, self._dialect, session, small=True
        )
        self._attempt_rollouts[claim.attempt.attempt_id] = claim.rollout.rollout_id
        return claim

    async def _get_rollout(self, rollout_id: str) -> Rollout:
        return await self._runner.read(reads.get_rollout, rollout_id, small=True)

    async def _get_attempt(self, attempt_id: str) -> Attempt:
        return await self._runner.read(reads.get_attempt, attempt_id, small=True)

    async def _list_attempts(self, rollout_id: str) -> list[Attempt]:
        return await self._runner.read(reads.list_attempts, rollout_id, small=True)

    async def _query_rollouts(self, query: RolloutQuery) -> Page[Rollout]:
        return await self._runner.read(
            reads.query_rollouts, query, small=query.limit <= _SMALL_PAGE
        )

    async def _list_workers(self) -> list[Worker]:
        return await self._runner.read(reads.list_workers)

    async def _wait_for_rollouts(self, rollout_ids: list[str], timeout: float) -> list[Rollout]:
        # See the module docstring on how waiters wake.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        await self._wakeups.listen()
        while True:
            changed = self._wakeups.changed  # taken before reading: no wake-up is missed
            rollouts = await self._runner.read(
                reads.get_rollouts, rollout_ids, small=len(rollout_ids) <= _SMALL_PAGE
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

    async def _reconcile(self) -> ReconcileReport:
        # A read pass finds candidates, a write pass ends them.
        expired = await self._runner.read(expiry.find_expired, self._dialect)
        if not expired:
            return ReconcileReport()
        report = await self._runner.write(expiry.expire, self._dialect, expired)
        if report.timed_out or report.lost:
            self._wakeups.wake()
        return report

    async def _add_resources(self, resources: ResourcesCreate) -> Resources:
        return await self._runner.write(reads.add_resources, self._dialect, resources, small=True)

    async def _get_resources(self, version: int) -> Resources:
        return await self._runner.read(reads.get_resources, version, small=True)

    async def _latest_resources(self) -> Resources | None:
        return await self._runner.read(reads.latest_resources, small=True)

    # -- the record log -------------------------------------------------------------------------

    async def _add_spans(self, spans: list[SpanCreate]) -> list[Span]:
        small = len(spans) <= _SMALL_APPEND
        try:
            return await self._runner.write(
                records.add_spans_fast, self._dialect, spans, self._attempt_rollouts, small=small
            )
        except records.SlowPath:
            return await self._runner.write(
                records.add_spans_exact, self._dialect, spans, self._attempt_rollouts
            )

    async def _add_llm_calls(self, calls: list[LLMCallCreate]) -> list[LLMCall]:
        small = len(calls) <= _SMALL_APPEND
        try:
            return await self._runner.write(
                records.add_calls_fast, self._dialect, calls, self._attempt_rollouts, small=small
            )
        except records.SlowPath:
            return await self._runner.write(
                records.add_calls_exact, self._dialect, calls, self._attempt_rollouts
            )

    async def _query_spans(
        self, rollout_id: str, attempt_id: str | None, after_sequence: int, limit: int
    ) -> Page[Span]:
        return await self._runner.read(
            reads.query_spans, rollout_id, attempt_id, after_sequence, limit,
            small=limit <= _SMALL_PAGE,
        )  # fmt: skip

    async def _query_llm_calls(
        self, rollout_id: str, attempt_id: str | None, after_sequence: int, limit: int
    ) -> Page[LLMCall]:
        return await self._runner.read(
            reads.query_llm_calls, rollout_id, attempt_id, after_sequence, limit,
            small=limit <= _SMALL_PAGE,
        )  # fmt: skip

    async def _add_reward(self, reward: RewardCreate) -> Reward:
        return await self._runner.write(rewards.add_reward, self._dialect, reward, small=True)

    async def _list_rewards(self, rollout_id: str) -> list[Reward]:
        return await self._runner.read(rewards.list_rewards, rollout_id, small=True)

    # -- the whole store ------------------------------------------------------------------------

    async def _prune(self, request: PruneRequest) -> PruneReport:
        # One transaction per chunk of rollouts, oldest first.
        total = PruneReport(dry_run=request.dry_run)
        after: int | None = 0
        while after is not None:
            chunk, after = await self._runner.write(
                rewards.prune_chunk, self._dialect, request, after
            )
            total = _add_counts(total, chunk)
        return total

    async def _stats(self) -> StoreStats:
        return await self._runner.read(reads.stats)

    async def _aclose(self) -> None:
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
