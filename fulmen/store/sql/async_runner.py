"""The PostgreSQL runner: store operations on an asyncpg engine, through ``run_sync``.

Writes are transactions under READ COMMITTED and are run again after a deadlock or a
serialization failure; reads run in autocommit (one round trip). A transaction that started
runs to its end even if its caller is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from fulmen.errors import FulmenError, InvalidRequest
from fulmen.store.sql.dialects import SqlDialect
from fulmen.store.sql.transactions import translate_error

__all__ = ["AsyncEngineRunner"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
_MAX_RETRIES = 5


def _sqlstate(exc: BaseException) -> str | None:
    orig = getattr(exc, "orig", None)
    return getattr(orig, "sqlstate", None)


class AsyncEngineRunner:
    """Operations on an async engine (asyncpg), one pooled connection per transaction."""

    def __init__(self, engine: AsyncEngine, dialect: SqlDialect) -> None:
        self._engine = engine
        self._dialect = dialect
        # Reads run in autocommit: under READ COMMITTED every statement has its own snapshot
        # anyway, and it saves the BEGIN and COMMIT round trips (a read is then one).
        self._read_engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._in_flight: set[asyncio.Future[Any]] = set()
        self._closed = False

    @classmethod
    async def open(cls, url: URL, dialect: SqlDialect, *, pool_size: int) -> AsyncEngineRunner:
        """Create the engine and check that the server answers."""
        engine = create_async_engine(url, pool_size=pool_size, max_overflow=pool_size * 2)
        runner = cls(engine, dialect)
        try:
            async with engine.connect() as conn:
                await conn.execute(sa.text("SELECT 1"))
        except BaseException:
            await engine.dispose()
            raise
        return runner

    @property
    def engine(self) -> AsyncEngine:
        """The underlying engine (the notification listener borrows a connection from it)."""
        return self._engine

    async def write(self, op: Callable[..., T], *args: Any, small: bool = False) -> T:
        """See ``TransactionRunner.write``; retries deadlocks and serialization failures.

        ``small`` changes nothing here: every statement is a network round trip anyway.
        """
        for attempt in range(_MAX_RETRIES):
            try:
                return await self._run(self._engine, op, args)
            except sa_exc.DBAPIError as exc:
                if _sqlstate(exc) in self._dialect.retry_sqlstates and attempt + 1 < _MAX_RETRIES:
                    logger.debug("retrying %s after %s", op.__name__, _sqlstate(exc))
                    await asyncio.sleep(0.005 * (attempt + 1))
                    continue
                raise translate_error(exc, self._dialect) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def read(self, op: Callable[..., T], *args: Any, small: bool = False) -> T:
        """See ``TransactionRunner.read``; a read that met a dropped connection is run once more."""
        for attempt in range(2):
            try:
                return await self._run(self._read_engine, op, args)
            except sa_exc.DBAPIError as exc:
                if not exc.connection_invalidated or attempt == 1:
                    raise translate_error(exc, self._dialect) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _run(self, engine: AsyncEngine, op: Callable[..., T], args: tuple[Any, ...]) -> T:
        if self._closed:
            raise InvalidRequest("the store is closed")
        # A transaction runs to its end even if the caller is cancelled (as on SQLite's
        # thread): cancelling asyncpg mid-protocol would tear the connection down.
        task = asyncio.ensure_future(_run_sync_in_transaction(engine, op, args))
        self._in_flight.add(task)
        task.add_done_callback(self._forget)
        try:
            return await asyncio.shield(task)
        except (FulmenError, sa_exc.DBAPIError):
            raise
        except (sa_exc.SQLAlchemyError, OSError) as exc:
            raise translate_error(exc, self._dialect) from exc

    def _forget(self, task: asyncio.Future[Any]) -> None:
        self._in_flight.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a cancelled caller no longer awaits it

    async def aclose(self) -> None:
        """See ``TransactionRunner.aclose``."""
        self._closed = True
        if self._in_flight:
            await asyncio.wait(self._in_flight)
        await self._engine.dispose()


async def _run_sync_in_transaction(
    engine: AsyncEngine, op: Callable[..., T], args: tuple[Any, ...]
) -> T:
    async with engine.connect() as conn, conn.begin():
        return await conn.run_sync(op, *args)
