"""Transaction runners: run one synchronous store operation as one transaction, from async code.

Every store operation is a plain function ``op(conn, *args)`` over a SQLAlchemy ``Connection``
(written once for both databases). A runner opens the transaction, runs the function, commits
or rolls back, and translates driver errors into ``fulmen.errors``:

* ``ThreadRunner`` (SQLite): a writer and a reader connection on the standard ``sqlite3``
  driver, each guarded by an asyncio lock and used from a small store-owned thread pool, so an
  operation costs one hop to a thread. Writers start with ``BEGIN IMMEDIATE``, which also
  serializes them against other processes on the same file.
* ``AsyncEngineRunner`` (PostgreSQL): an asyncpg engine; the function runs under
  ``AsyncConnection.run_sync`` and transactions that hit a deadlock or serialization failure are
  run again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import sqlite3
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from fulmen.errors import Conflict, FulmenError, InvalidRequest, StoreError, StoreUnavailable
from fulmen.store.sql.dialects import SqlDialect, configure_sqlite_connection

__all__ = ["AsyncEngineRunner", "Runner", "ThreadRunner", "translate_error"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
_MAX_RETRIES = 5
_BEGIN_OPTION = "fulmen_begin"
_CHECKPOINT_INTERVAL_S = 0.5


class Runner(Protocol):
    """Runs store operations as transactions."""

    async def write(self, op: Callable[..., T], *args: Any) -> T:
        """Run ``op(conn, *args)`` in a write transaction and commit it."""
        ...

    async def read(self, op: Callable[..., T], *args: Any) -> T:
        """Run ``op(conn, *args)`` in a read transaction."""
        ...

    async def aclose(self) -> None:
        """Close every connection; the runner refuses work afterwards."""
        ...


def translate_error(exc: BaseException, dialect: SqlDialect) -> FulmenError:
    """Return the ``fulmen.errors`` exception for a driver or SQLAlchemy error."""
    if isinstance(exc, sa_exc.IntegrityError):
        return Conflict(f"{dialect.name} refused a write as a duplicate: {exc}")
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError | OSError):
        return StoreUnavailable(f"{dialect.name} store unavailable: {exc}")
    return StoreError(f"{dialect.name} store error: {exc}")


def _sqlstate(exc: BaseException) -> str | None:
    orig = getattr(exc, "orig", None)
    return getattr(orig, "sqlstate", None)


def _driver(conn: Connection) -> sqlite3.Connection:
    """Return the sqlite3 connection under ``conn`` (pragmas must run outside transactions)."""
    return conn.connection.driver_connection  # type: ignore[return-value]


def _in_transaction(conn: Connection, op: Callable[..., T], args: tuple[Any, ...]) -> T:
    with conn.begin():
        return op(conn, *args)


class ThreadRunner:
    """SQLite operations on store-owned threads; one writer at a time."""

    def __init__(
        self,
        engine: Engine,
        writer: Connection,
        reader: Connection,
        checkpointer: Connection | None,
        dialect: SqlDialect,
    ) -> None:
        self._engine = engine
        self._dialect = dialect
        self._writer = writer
        self._reader = reader
        self._checkpointer = checkpointer
        self._write_lock = asyncio.Lock()
        # An in-memory database exists once per connection: reads must share the writer.
        self._read_lock = self._write_lock if reader is writer else asyncio.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(3, "fulmen-sqlite")
        self._writes_since_checkpoint = 0
        self._checkpoint_task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        if checkpointer is not None:
            self._checkpoint_task = asyncio.get_running_loop().create_task(
                self._checkpoint_loop(), name="fulmen-sqlite-checkpoint"
            )
        self._closed = False

    @classmethod
    async def open(cls, url: URL, dialect: SqlDialect, *, busy_timeout_s: float) -> ThreadRunner:
        """Create the engine and its two connections (in a thread: opening may wait on locks)."""
        engine = sa.create_engine(url, connect_args={"check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: sqlite3.Connection, _record: object) -> None:
            configure_sqlite_connection(dbapi_conn, busy_timeout_s)

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # Straight to the driver: a full SQLAlchemy execution here costs as much as the
            # statements of a small append.
            _driver(conn).execute(conn.get_execution_options().get(_BEGIN_OPTION, "BEGIN"))

        def connect() -> tuple[Connection, Connection, Connection | None]:
            writer = engine.connect().execution_options(**{_BEGIN_OPTION: "BEGIN IMMEDIATE"})
            if url.database in (None, "", ":memory:"):
                return writer, writer, None
            # Commits only append to the WAL; a background pass copies it into the database
            # (the copy and its fsync would otherwise stall every ~1000th commit).
            _driver(writer).execute("PRAGMA wal_autocheckpoint = 0")
            return writer, engine.connect(), engine.connect()

        try:
            writer, reader, checkpointer = await asyncio.to_thread(connect)
        except (sa_exc.SQLAlchemyError, sqlite3.Error, OSError) as exc:
            engine.dispose()
            raise translate_error(exc, dialect) from exc
        return cls(engine, writer, reader, checkpointer, dialect)

    async def write(self, op: Callable[..., T], *args: Any) -> T:
        """See ``Runner.write``."""
        self._writes_since_checkpoint += 1
        return await self._submit(self._write_lock, self._writer, op, args)

    async def read(self, op: Callable[..., T], *args: Any) -> T:
        """See ``Runner.read``."""
        return await self._submit(self._read_lock, self._reader, op, args)

    async def _submit(
        self, lock: asyncio.Lock, conn: Connection, op: Callable[..., T], args: tuple[Any, ...]
    ) -> T:
        if self._closed:
            raise InvalidRequest("the store is closed")
        await lock.acquire()
        loop = asyncio.get_running_loop()
        try:
            future = self._executor.submit(_in_transaction, conn, op, args)
        except BaseException:
            lock.release()
            raise
        # Release the connection only when the thread is done with it, even if the awaiting
        # task is cancelled meanwhile: a cancelled await must not let a second op in.
        future.add_done_callback(lambda _f: loop.call_soon_threadsafe(lock.release))
        try:
            return await asyncio.wrap_future(future)
        except FulmenError:
            raise
        except (sa_exc.SQLAlchemyError, sqlite3.Error, OSError) as exc:
            raise translate_error(exc, self._dialect) from exc

    async def _checkpoint_loop(self) -> None:
        checkpointer = self._checkpointer
        assert checkpointer is not None
        loop = asyncio.get_running_loop()
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), _CHECKPOINT_INTERVAL_S)
            if self._writes_since_checkpoint == 0 or self._closed:
                continue
            self._writes_since_checkpoint = 0
            try:
                # PASSIVE never waits for readers or writers; what it cannot copy now, the
                # next pass does.
                await loop.run_in_executor(
                    self._executor, _driver(checkpointer).execute, "PRAGMA wal_checkpoint(PASSIVE)"
                )
            except (sa_exc.SQLAlchemyError, sqlite3.Error) as exc:
                logger.warning("SQLite checkpoint failed: %s", exc)

    async def aclose(self) -> None:
        """See ``Runner.aclose``."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        if self._checkpoint_task is not None:
            # Not cancelled: a checkpoint running in a thread must end before its connection
            # is closed.
            await self._checkpoint_task
        async with self._write_lock:
            if self._read_lock is not self._write_lock:
                await self._read_lock.acquire()

            def close() -> None:
                # The last connection to close checkpoints the WAL into the database file.
                for conn in (self._checkpointer, self._reader, self._writer):
                    if conn is not None and not conn.closed:
                        conn.close()
                self._engine.dispose()

            await asyncio.get_running_loop().run_in_executor(self._executor, close)
        self._executor.shutdown(wait=True)


class AsyncEngineRunner:
    """Operations on an async engine (asyncpg), one pooled connection per transaction."""

    def __init__(self, engine: AsyncEngine, dialect: SqlDialect) -> None:
        self._engine = engine
        self._dialect = dialect
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

    async def write(self, op: Callable[..., T], *args: Any) -> T:
        """See ``Runner.write``; retries deadlocks and serialization failures."""
        for attempt in range(_MAX_RETRIES):
            try:
                return await self._run(op, args)
            except sa_exc.DBAPIError as exc:
                if _sqlstate(exc) in self._dialect.retry_sqlstates and attempt + 1 < _MAX_RETRIES:
                    logger.debug("retrying %s after %s", op.__name__, _sqlstate(exc))
                    await asyncio.sleep(0.005 * (attempt + 1))
                    continue
                raise translate_error(exc, self._dialect) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def read(self, op: Callable[..., T], *args: Any) -> T:
        """See ``Runner.read``."""
        try:
            return await self._run(op, args)
        except sa_exc.DBAPIError as exc:
            raise translate_error(exc, self._dialect) from exc

    async def _run(self, op: Callable[..., T], args: tuple[Any, ...]) -> T:
        if self._closed:
            raise InvalidRequest("the store is closed")
        try:
            async with self._engine.connect() as conn:
                return await _run_sync_in_transaction(conn, op, args)
        except (FulmenError, sa_exc.DBAPIError):
            raise
        except (sa_exc.SQLAlchemyError, OSError) as exc:
            raise translate_error(exc, self._dialect) from exc

    async def aclose(self) -> None:
        """See ``Runner.aclose``."""
        self._closed = True
        await self._engine.dispose()


async def _run_sync_in_transaction(
    conn: AsyncConnection, op: Callable[..., T], args: tuple[Any, ...]
) -> T:
    async with conn.begin():
        return await conn.run_sync(op, *args)
