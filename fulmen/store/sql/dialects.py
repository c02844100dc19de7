"""What differs between SQLite and PostgreSQL: a few capability flags and the smallest overrides.

Everything else in the SQL store is one code path. The differences:

* **URL and driver.** SQLite runs on the standard ``sqlite3`` module, small operations on the
  event loop thread and large ones on a store-owned thread (``sqlite_runner``): aiosqlite pays a
  thread round trip per statement, about 1.5 ms for a single-span append here against 0.2 ms.
  ``sqlite+aiosqlite://`` URLs are accepted and mapped to it. PostgreSQL runs on asyncpg
  (``postgresql://`` and ``postgres://`` map to ``postgresql+asyncpg://``).
* **Upsert.** ``insert(table)`` returns the dialect's ``INSERT`` that has
  ``on_conflict_do_nothing``/``on_conflict_do_update`` (same keywords on both); bulk inserts
  count their rows with a plain executemany where the driver reports it (sqlite3) and with
  ``RETURNING`` elsewhere (SQLAlchemy's ``supports_sane_multi_rowcount``).
* **Row locks.** ``FOR UPDATE [SKIP LOCKED]`` is written once with ``with_for_update``; SQLite's
  compiler drops it and writers are serialized by ``BEGIN IMMEDIATE`` instead.
* **Pragmas** (SQLite): WAL journal, ``synchronous=NORMAL`` (durable against a killed process,
  not against power loss), ``busy_timeout``, foreign keys on; the writer waits for other
  processes in asyncio rather than in ``busy_timeout``, and checkpoints run in the background.
* **Notification.** PostgreSQL sends ``pg_notify`` when a rollout becomes final so waiters in
  other processes wake up; SQLite waiters poll every ``fallback_poll_s`` for changes made by
  other processes (changes made through the same store object wake them at once).
* **Schema lock.** PostgreSQL takes an advisory lock while creating the schema.
"""

from __future__ import annotations

import functools
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL, Connection, make_url

from fulmen.errors import ConfigError

__all__ = [
    "NOTIFY_CHANNEL",
    "POSTGRESQL",
    "SQLITE",
    "SqlDialect",
    "configure_sqlite_connection",
    "resolve_url",
]

NOTIFY_CHANNEL: Final = "fulmen_rollouts"


@dataclass(frozen=True)
class SqlDialect:
    """Capability flags of one database.

    Attributes:
        name: SQLAlchemy's dialect name.
        is_threaded: operations run on a synchronous driver in a store-owned thread (else on
            an async engine through ``run_sync``).
        notify_sql: statement that tells other processes a rollout became final, or None.
        schema_lock_sql: statement that serializes schema creation across processes, or None.
        fallback_poll_s: how often ``wait_for_rollouts`` re-reads when no notification can
            arrive from other processes; None when notifications cover every writer.
        retry_sqlstates: error codes after which a transaction is simply run again.
    """

    name: str
    is_threaded: bool
    notify_sql: str | None
    schema_lock_sql: str | None
    fallback_poll_s: float | None
    retry_sqlstates: frozenset[str] = frozenset()

    def insert(self, table: sa.Table) -> Any:
        """Return the dialect's ``INSERT``, which has ``on_conflict_do_*`` (same keywords)."""
        module = sqlite_dialect if self.name == "sqlite" else pg_dialect
        return module.insert(table)

    def insert_or_skip(self, table: sa.Table) -> Any:
        """Return ``INSERT ... ON CONFLICT DO NOTHING`` for ``table``, built once per dialect.

        Reusing one statement object lets SQLAlchemy skip recomputing its cache key, which is
        a visible share of a single-span append.
        """
        return _insert_or_skip(self.name, table)

    def notify(self, conn: Connection) -> None:
        """Tell other processes that rollouts changed; delivered when the transaction commits."""
        if self.notify_sql is not None:
            conn.exec_driver_sql(self.notify_sql)


SQLITE: Final = SqlDialect(
    name="sqlite",
    is_threaded=True,
    notify_sql=None,
    schema_lock_sql=None,
    fallback_poll_s=0.5,
)

POSTGRESQL: Final = SqlDialect(
    name="postgresql",
    is_threaded=False,
    notify_sql=f"NOTIFY {NOTIFY_CHANNEL}",
    schema_lock_sql="SELECT pg_advisory_xact_lock(7244315022)",
    fallback_poll_s=None,
    retry_sqlstates=frozenset({"40001", "40P01"}),  # serialization failure, deadlock
)


@functools.cache
def _insert_or_skip(dialect_name: str, table: sa.Table) -> Any:
    module = sqlite_dialect if dialect_name == "sqlite" else pg_dialect
    return module.insert(table).on_conflict_do_nothing()


def resolve_url(url: str) -> tuple[SqlDialect, URL]:
    """Return the dialect and SQLAlchemy URL (with driver) for a store URL or a bare path."""
    if "://" not in url:
        return SQLITE, _sqlite_url(url)
    try:
        parsed = make_url(url)
    except sa_exc.ArgumentError as exc:
        raise ConfigError(f"not a database URL: {url!r}") from exc
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "sqlite":
        if driver not in ("", "aiosqlite", "pysqlite"):
            raise ConfigError(f"unsupported SQLite driver {driver!r} in {url!r}")
        return SQLITE, _sqlite_url(parsed.database or ":memory:", parsed.query)
    if backend in ("postgresql", "postgres"):
        if driver not in ("", "asyncpg"):
            raise ConfigError(
                f"unsupported PostgreSQL driver {driver!r} in {url!r}; use postgresql:// (asyncpg)"
            )
        return POSTGRESQL, parsed.set(drivername="postgresql+asyncpg")
    raise ConfigError(f"not a SQL store URL: {url!r} (use sqlite:///path.db or postgresql://)")


def _sqlite_url(database: str, query: Any = None) -> URL:
    if database != ":memory:":
        parent = Path(database).expanduser().parent
        if not parent.is_dir():
            raise ConfigError(
                f"cannot create SQLite store {database!r}: {parent} is not a directory"
            )
        database = str(Path(database).expanduser())
    return URL.create("sqlite+pysqlite", database=database, query=query or {})


def configure_sqlite_connection(dbapi_conn: sqlite3.Connection, busy_timeout_s: float) -> None:
    """Apply the pragmas every SQLite connection of the store uses.

    The driver is put in autocommit mode so that the store's own ``BEGIN IMMEDIATE`` (writes)
    or ``BEGIN`` (reads) is what opens a transaction.
    """
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        _use_wal(cursor, busy_timeout_s)
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _use_wal(cursor: sqlite3.Cursor, busy_timeout_s: float) -> None:
    """Put the database file in WAL mode, waiting while another connection converts it.

    Converting needs exclusive access, and SQLite does not run the busy handler for it: two
    stores opening one new file at once (the trainer and its dashboard) got "database is
    locked" straight away (1 open in 240 with 8 threads opening fresh files here). WAL is a
    property of the file, so once it is set nothing is converted and no lock is taken.
    """
    deadline = time.monotonic() + busy_timeout_s
    delay = 0.001
    while True:
        if str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
            return
        try:
            # An in-memory database answers "memory" and stays so: nothing to wait for.
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF == sqlite3.SQLITE_BUSY
            if not busy or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
