"""Database errors become the right ``fulmen.errors`` class, with no SQL in the message.

Real constraint violations on a real SQLite file and a real PostgreSQL database, run through
the store's own transaction runner. Before, every integrity error was a ``Conflict`` reported
as a duplicate, with the statement and its parameters in the message.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fulmen.errors import Conflict, FulmenError, InvalidRequest, NotFound
from fulmen.store.sql.schema import attempts, meta
from fulmen.store.sql.store import SqlStore

SECRET = "param-value-that-must-not-leak"


def _duplicate_key(conn: Connection) -> None:
    conn.execute(sa.insert(meta).values(key="schema_version", value=1))


def _missing_reference(conn: Connection) -> None:
    now = datetime.now(UTC)
    conn.execute(
        sa.insert(attempts).values(
            attempt_id=SECRET,
            rollout_id="no-such-rollout",
            number=1,
            worker_id="w",
            status="running",
            started_at=now,
            last_heartbeat_at=now,
        )
    )


def _missing_value(conn: Connection) -> None:
    conn.execute(sa.insert(meta).values(key=SECRET, value=None))


def _integer_out_of_range(conn: Connection) -> None:
    conn.execute(sa.insert(meta).values(key=SECRET, value=2**70))


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (_duplicate_key, Conflict),
        (_missing_reference, NotFound),
        (_missing_value, InvalidRequest),
        (_integer_out_of_range, InvalidRequest),
    ],
)
async def test_constraint_violations_map_to_their_own_error(
    sql_url: str, op: Callable[[Connection], Any], expected: type[FulmenError]
) -> None:
    store = await SqlStore.connect(sql_url, watchdog_interval=None)
    try:
        with pytest.raises(FulmenError) as caught:
            await store._runner.write(op)  # pyright: ignore[reportPrivateUsage]
    finally:
        await store.aclose()
    assert type(caught.value) is expected, repr(caught.value)
    message = str(caught.value)
    assert "INSERT" not in message and SECRET not in message, message
    assert caught.value.__cause__ is not None  # the driver's error stays for the log
