"""Running a model's SQL safely, and the reward: does its result match the gold query's result?

A query runs on a read-only connection (``file:...?mode=ro``: a ``DROP TABLE`` or ``INSERT`` is
refused by SQLite itself), under a time limit enforced by a progress handler (a runaway cross
join is interrupted, not waited for) and a row cap (the agent never holds more than
``max_rows`` rows, none with a value over 1 MB). The reward compares result rows as multisets,
or as lists when the question asks for an order; numbers compare after rounding, so ``3`` and
``3.0`` are the same answer.
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["QueryResult", "execution_match", "run_query", "schema_text"]

Row = tuple[object, ...]


@dataclass(frozen=True)
class QueryResult:
    """What a query returned: its rows (at most the cap), or the error that stopped it."""

    rows: list[Row] = field(default_factory=list[Row])
    error: str | None = None
    is_truncated: bool = False

    def render(self, max_rows: int = 5) -> str:
        """A short text for a prompt: the error, or the first rows and how many there were."""
        if self.error is not None:
            return f"error: {self.error}"
        if not self.rows:
            return "no rows"
        shown = "; ".join(", ".join(str(v) for v in row) for row in self.rows[:max_rows])
        more = len(self.rows) - max_rows
        return shown + (f" (and {more} more rows)" if more > 0 else "")


def run_query(path: Path, sql: str, *, timeout_s: float = 1.0, max_rows: int = 200) -> QueryResult:
    """Run ``sql`` read-only on the database at ``path``; errors come back, never raise."""
    if not sql.strip():
        return QueryResult(error="empty query")
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout_s)
    # No string or blob over 1 MB: ``zeroblob(1e9)`` is an error, not a gigabyte in memory.
    connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1_000_000)
    deadline = time.monotonic() + timeout_s
    # Called every 1000 VM instructions; a non-zero return aborts the statement.
    connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
    try:
        cursor = connection.execute(sql)
        rows = cursor.fetchmany(max_rows + 1)
    except sqlite3.OperationalError as exc:
        message = "time limit exceeded" if str(exc) == "interrupted" else str(exc)
        return QueryResult(error=message)
    except (sqlite3.Error, sqlite3.Warning, ValueError) as exc:
        # sqlite3.Warning: "You can only execute one statement at a time."
        return QueryResult(error=str(exc))
    finally:
        connection.close()
    return QueryResult(
        rows=[tuple(row) for row in rows[:max_rows]], is_truncated=len(rows) > max_rows
    )


def schema_text(path: Path) -> str:
    """The database's ``CREATE TABLE`` statements, one per line, as a prompt shows them."""
    result = run_query(path, "SELECT sql FROM sqlite_master WHERE type = 'table' ORDER BY rowid")
    if result.error is not None:
        raise ValueError(f"cannot read the schema of {path}: {result.error}")
    return "\n".join(f"{row[0]};" for row in result.rows)


def _normal(row: Row) -> Row:
    return tuple(
        round(float(v), 4) if isinstance(v, int | float) and not isinstance(v, bool) else v
        for v in row
    )


def execution_match(path: Path, sql: str, gold_sql: str, *, is_ordered: bool) -> float:
    """Reward 1.0 when ``sql`` returns the gold query's rows on ``path``, else 0.0.

    Order counts only when ``is_ordered``; an error, a timeout or a truncated result is 0.0.

    >>> from sql_schemas import database_path
    >>> db = database_path("shops_0")
    >>> execution_match(db, "SELECT count(id) FROM products", "SELECT COUNT(*) FROM products",
    ...                 is_ordered=False)
    1.0
    """
    gold = run_query(path, gold_sql)
    if gold.error is not None:
        raise ValueError(f"gold query {gold_sql!r} failed: {gold.error}")
    got = run_query(path, sql)
    if got.error is not None or got.is_truncated:
        return 0.0
    want, have = [_normal(r) for r in gold.rows], [_normal(r) for r in got.rows]
    same = want == have if is_ordered else Counter(want) == Counter(have)
    return 1.0 if same else 0.0
