"""The SQLite runner: store operations on the standard ``sqlite3`` driver, without blocking.

Three connections: a writer (``BEGIN IMMEDIATE``, which serializes writers of every process on
the file), a reader (``BEGIN``; WAL readers never wait for the writer) and a checkpointer. Each
of the first two is guarded by an asyncio lock.

Where an operation runs is a cost decision. A small one (a few rows: one span, a claim, a
report) runs right on the event loop thread: it takes tens of microseconds of SQLite work,
while handing it to a thread and back costs more than that in wake-ups. A large one (a big
batch, a scan) runs on a store-owned thread so the loop stays responsive.

Nothing ever blocks on another process inside SQLite: the writer has ``busy_timeout = 0`` and a
``BEGIN IMMEDIATE`` that finds the file locked is retried with asyncio sleeps (up to
``busy_timeout_s``), before any statement of the operation ran. Commits only append to the WAL
(``wal_autocheckpoint = 0``); a background task copies the WAL into the database file with
``PRAGMA wal_checkpoint(PASSIVE)`` every half second when something was written, so no commit
pays for a checkpoint's copy and fsync.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, Engine

from fulmen.errors import FulmenError, InvalidRequest, StoreUnavailable
from fulmen.store.sql.dialects import SqlDialect, configure_sqlite_connection
from fulmen.store.sql.transactions import translate_error

__all__ = ["SqliteRunner"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
_BEGIN_OPTION = "fulmen_begin"
_CHECKPOINT_INTERVAL_S = 0.5
# OverflowError: sqlite3 refuses Python ints beyond 64 bits before SQLite sees them.
_DRIVER_ERRORS = (sa_exc.SQLAlchemyError, sqlite3.Error, OSError, OverflowError)


class _Busy(Exception):
    """``BEGIN IMMEDIATE`` found another connection writing; nothing was done."""


def _driver(conn: Connection) -> sqlite3.Connection:
    """Return the sqlite3 connection under ``conn`` (pragmas must run outside transactions)."""
    return conn.connection.driver_connection  # type: ignore[return-value]


def _is_busy(exc: BaseException) -> bool:
    """Say whether ``exc`` (raw, or wrapped by SQLAlchemy) is SQLite's SQLITE_BUSY family."""
    orig = getattr(exc, "orig", None) or exc
    code = getattr(orig, "sqlite_errorcode", None)
    return isinstance(orig, sqlite3.OperationalError) and (code or 0) & 0xFF == sqlite3.SQLITE_BUSY


def _in_transaction(conn: Connection, op: Callable[..., T], args: tuple[Any, ...]) -> T:
    try:
        transaction = conn.begin()
    except sqlite3.OperationalError as exc:
        if _is_busy(exc):
            raise _Busy from exc
        raise
    try:
        with transaction:
            return op(conn, *args)
    except (sa_exc.OperationalError, sqlite3.OperationalError) as exc:
        if not _is_busy(exc):
            raise
        # A lock a statement or the commit needed was held by another connection (CI saw
        # "database is locked" end a `fulmen train` under heavy load). Nothing of the operation
        # is kept: it is rolled back and tried again whole, as a busy BEGIN is.
        driver = _driver(conn)
        if driver.in_transaction:
            driver.execute("ROLLBACK")
        raise _Busy from exc


def _open_engine(url: URL, busy_timeout_s: float) -> Engine:
    engine = sa.create_engine(url, connect_args={"check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: object) -> None:
        configure_sqlite_connection(dbapi_conn, busy_timeout_s)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Straight to the driver: a full SQLAlchemy execution here costs as much as the
        # statements of a small append.
        _driver(conn).execute(conn.get_execution_options().get(_BEGIN_OPTION, "BEGIN"))

    return engine


def _create_private(path: Path) -> None:
    """Create a new database file that only its owner may read; an existing one keeps its mode.

    A store holds every task, answers included, and every call; SQLite gives the ``-wal``
    and ``-shm`` files the database file's mode.
    """
    with contextlib.suppress(FileExistsError, FileNotFoundError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


class SqliteRunner:
    """SQLite operations for one store object; one writer at a time."""

    def __init__(
        self,
        engine: Engine,
        connections: tuple[Connection, Connection, Connection | None],
        dialect: SqlDialect,
        busy_timeout_s: float,
    ) -> None:
        self._engine = engine
        self._dialect = dialect
        self._writer, self._reader, self._checkpointer = connections
        self._busy_timeout_s = busy_timeout_s
        self._write_lock = asyncio.Lock()
        # An in-memory database exists once per connection: reads must share the writer.
        self._read_lock = self._write_lock if self._reader is self._writer else asyncio.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(3, "fulmen-sqlite")
        self._writes_since_checkpoint = 0
        self._stopping = asyncio.Event()
        self._checkpoint_task: asyncio.Task[None] | None = None
        if self._checkpointer is not None:
            self._checkpoint_task = asyncio.get_running_loop().create_task(
                self._checkpoint_loop(self._checkpointer), name="fulmen-sqlite-checkpoint"
            )
        self._closed = False

    @classmethod
    async def open(cls, url: URL, dialect: SqlDialect, *, busy_timeout_s: float) -> SqliteRunner:
        """Create the engine and its connections (in a thread: opening may wait on locks)."""
        engine = _open_engine(url, busy_timeout_s)
        if url.database not in (None, "", ":memory:"):
            _create_private(Path(url.database))

        def connect() -> tuple[Connection, Connection, Connection | None]:
            writer = engine.connect().execution_options(**{_BEGIN_OPTION: "BEGIN IMMEDIATE"})
            # The writer never waits inside SQLite (it may run on the event loop thread);
            # ``write`` retries a busy BEGIN with asyncio sleeps instead.
            _driver(writer).execute("PRAGMA busy_timeout = 0")
            if url.database in (None, "", ":memory:"):
                return writer, writer, None
            _driver(writer).execute("PRAGMA wal_autocheckpoint = 0")
            return writer, engine.connect(), engine.connect()

        try:
            connections = await asyncio.to_thread(connect)
        except _DRIVER_ERRORS as exc:
            engine.dispose()
            raise translate_error(exc, dialect) from exc
        return cls(engine, connections, dialect, busy_timeout_s)

    async def write(self, op: Callable[..., T], *args: Any, small: bool = False) -> T:
        """See ``TransactionRunner.write``; waits (not blocking) while another process writes."""
        self._writes_since_checkpoint += 1
        return await self._retrying(self._write_lock, self._writer, op, args, small)

    async def read(self, op: Callable[..., T], *args: Any, small: bool = False) -> T:
        """See ``TransactionRunner.read``; a read that found the file locked is tried again."""
        return await self._retrying(self._read_lock, self._reader, op, args, small)

    async def _retrying(
        self,
        lock: asyncio.Lock,
        conn: Connection,
        op: Callable[..., T],
        args: tuple[Any, ...],
        small: bool,
    ) -> T:
        """Run ``op`` in a transaction, again (after asyncio sleeps) while SQLite says busy."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._busy_timeout_s
        delay = 0.001
        while True:
            try:
                return await self._submit(lock, conn, op, args, small)
            except _Busy as busy:
                if loop.time() >= deadline:
                    raise StoreUnavailable(
                        f"SQLite database {self._engine.url.database!r} stayed locked by "
                        f"another connection for {self._busy_timeout_s:g} s"
                    ) from busy.__cause__
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    async def _submit(
        self,
        lock: asyncio.Lock,
        conn: Connection,
        op: Callable[..., T],
        args: tuple[Any, ...],
        small: bool,
    ) -> T:
        if self._closed:
            raise InvalidRequest("the store is closed")
        await lock.acquire()
        if small:
            try:
                return _in_transaction(conn, op, args)
            except (FulmenError, _Busy):
                raise
            except _DRIVER_ERRORS as exc:
                raise translate_error(exc, self._dialect) from exc
            finally:
                lock.release()
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
        except (FulmenError, _Busy):
            raise
        except _DRIVER_ERRORS as exc:
            raise translate_error(exc, self._dialect) from exc

    async def _checkpoint_loop(self, checkpointer: Connection) -> None:
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
            except _DRIVER_ERRORS as exc:
                logger.warning("SQLite checkpoint failed: %s", exc)

    async def aclose(self) -> None:
        """See ``TransactionRunner.aclose``."""
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
