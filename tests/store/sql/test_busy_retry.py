"""A SQLite lock met inside an operation (a statement or the commit, not only the BEGIN) is
retried whole: nothing of the failed try is kept, and the caller sees the operation succeed.

A CI run saw ``fulmen train`` end with "sqlite store unavailable: database is locked" under
heavy load: only a busy BEGIN was retried then. The busy error here is a real one, taken from
two connections to one file; the operation raises it, wrapped as SQLAlchemy wraps a
statement's error, after writing a row, once.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from fulmen.errors import StoreUnavailable
from fulmen.store.sql.dialects import resolve_url
from fulmen.store.sql.sqlite_runner import SqliteRunner


def _real_busy_error(path: Path) -> sqlite3.OperationalError:
    holder = sqlite3.connect(path, isolation_level=None)
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError) as caught:
            other.execute("BEGIN IMMEDIATE")
        holder.execute("ROLLBACK")
    finally:
        holder.close()
        other.close()
    assert caught.value.sqlite_errorcode == sqlite3.SQLITE_BUSY
    return caught.value


async def _runner(tmp_path: Path, busy_timeout_s: float = 5.0) -> SqliteRunner:
    dialect, url = resolve_url(f"sqlite:///{tmp_path / 'store.db'}")
    runner = await SqliteRunner.open(url, dialect, busy_timeout_s=busy_timeout_s)
    await runner.write(lambda conn: conn.execute(sa.text("CREATE TABLE t (x INTEGER)")))
    return runner


@pytest.mark.parametrize("small", [True, False])
async def test_a_write_busy_inside_its_statements_is_rolled_back_and_retried(
    tmp_path: Path, small: bool
) -> None:
    busy = _real_busy_error(tmp_path / "other.db")
    runner = await _runner(tmp_path)
    tries: list[int] = []

    def op(conn: Any) -> int:
        conn.execute(sa.text("INSERT INTO t VALUES (1)"))
        tries.append(1)
        if len(tries) == 1:
            raise sa_exc.OperationalError("INSERT INTO t VALUES (1)", {}, busy)
        return len(tries)

    try:
        assert await runner.write(op, small=small) == 2
        rows = await runner.read(lambda conn: conn.execute(sa.text("SELECT x FROM t")).all())
        assert [tuple(r) for r in rows] == [(1,)]  # the first try's row was rolled back
    finally:
        await runner.aclose()


async def test_a_read_busy_is_retried_and_a_lock_held_too_long_is_store_unavailable(
    tmp_path: Path,
) -> None:
    busy = _real_busy_error(tmp_path / "other.db")
    runner = await _runner(tmp_path, busy_timeout_s=0.3)
    calls: list[int] = []

    def flaky(conn: Any) -> str:
        calls.append(1)
        if len(calls) < 3:
            raise sa_exc.OperationalError("SELECT", {}, busy)
        return "read"

    def never(conn: Any) -> None:
        raise sa_exc.OperationalError("SELECT", {}, busy)

    try:
        assert await runner.read(flaky, small=True) == "read" and len(calls) == 3
        with pytest.raises(StoreUnavailable, match="stayed locked by another connection"):
            await runner.read(never)
    finally:
        await runner.aclose()


async def test_other_operational_errors_are_not_retried(tmp_path: Path) -> None:
    runner = await _runner(tmp_path)
    calls: list[int] = []

    def broken(conn: Any) -> None:
        calls.append(1)
        conn.execute(sa.text("SELECT * FROM missing"))

    try:
        with pytest.raises(StoreUnavailable, match="no such table"):
            await runner.write(broken)
        assert calls == [1]
    finally:
        await runner.aclose()


async def test_opening_waits_while_another_connection_holds_the_new_file(tmp_path: Path) -> None:
    # Converting a file to WAL needs it alone, and SQLite does not run the busy handler for
    # that: a store opening a new file while another connection wrote to it (the trainer and
    # its dashboard opening one run's store at once) failed at once with "database is locked".
    path = tmp_path / "store.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x INTEGER)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO t VALUES (1)")
    loop = asyncio.get_running_loop()
    commit = loop.call_later(0.3, holder.execute, "COMMIT")
    try:
        dialect, url = resolve_url(f"sqlite:///{path}")
        started = loop.time()
        runner = await SqliteRunner.open(url, dialect, busy_timeout_s=5.0)
        try:
            assert loop.time() - started >= 0.25
            rows = await runner.read(lambda conn: conn.execute(sa.text("SELECT x FROM t")).all())
            assert [tuple(r) for r in rows] == [(1,)]
            mode = await runner.read(
                lambda conn: conn.execute(sa.text("PRAGMA journal_mode")).scalar()
            )
            assert mode == "wal"
        finally:
            await runner.aclose()
    finally:
        commit.cancel()
        holder.close()


async def test_opening_gives_up_after_busy_timeout_s(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x INTEGER)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO t VALUES (1)")
    try:
        dialect, url = resolve_url(f"sqlite:///{path}")
        with pytest.raises(StoreUnavailable, match="locked"):
            await SqliteRunner.open(url, dialect, busy_timeout_s=0.2)
    finally:
        holder.close()
