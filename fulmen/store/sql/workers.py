"""Store operations on workers: heartbeats and the attempts each worker is running."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fulmen.store.clock import utc_now
from fulmen.store.sql.codec import dumps, loads, worker_from_row
from fulmen.store.sql.dialects import SqlDialect
from fulmen.store.sql.id_lists import one_of
from fulmen.store.sql.schema import attempts, workers
from fulmen.types import AttemptStatus, Worker

__all__ = ["heartbeat", "touch_after_claim"]

_RUNNING = AttemptStatus.RUNNING.value


def _still_running(conn: Connection, worker_id: str, attempt_ids: Sequence[str]) -> list[str]:
    """Return the listed attempts that are ``lifecycle.is_running_on`` the worker (in SQL)."""
    ids = list(dict.fromkeys(attempt_ids))
    if not ids:
        return []
    found = set(
        conn.execute(
            sa.select(attempts.c.attempt_id).where(
                one_of(attempts.c.attempt_id, ids),
                attempts.c.worker_id == worker_id,
                attempts.c.status == _RUNNING,
            )
        ).scalars()
    )
    return [a for a in ids if a in found]


def _upsert_worker(
    conn: Connection,
    dialect: SqlDialect,
    worker_id: str,
    now: datetime,
    running: list[str],
    metadata: dict[str, Any] | None,
) -> Worker:
    """Insert or update a worker row as ``lifecycle.seen_worker`` says (None keeps metadata)."""
    update: dict[str, Any] = {"last_heartbeat_at": now, "running_json": dumps(running)}
    if metadata is not None:
        update["metadata_json"] = dumps(metadata)
    row = conn.execute(
        dialect.insert(workers)
        .values({"worker_id": worker_id, "metadata_json": dumps(metadata or {}), **update})
        .on_conflict_do_update(index_elements=["worker_id"], set_=update)
        .returning(*workers.c)
    ).one()
    return worker_from_row(row)


def touch_after_claim(
    conn: Connection, dialect: SqlDialect, worker_id: str, now: datetime, claimed: list[str]
) -> None:
    """Record a claim on its worker: heartbeat now, and the new attempts among its running."""
    previous = conn.execute(
        sa.select(workers.c.running_json).where(workers.c.worker_id == worker_id).with_for_update()
    ).scalar_one_or_none()
    running = (loads(previous) if previous is not None else []) + claimed
    _upsert_worker(conn, dialect, worker_id, now, _still_running(conn, worker_id, running), None)


def heartbeat(
    conn: Connection,
    dialect: SqlDialect,
    worker_id: str,
    attempt_ids: Sequence[str],
    metadata: dict[str, Any] | None,
) -> Worker:
    """See ``Store.heartbeat``."""
    now = utc_now()
    ids = list(dict.fromkeys(attempt_ids))
    if ids:  # the attempts ``lifecycle.is_running_on`` the worker
        conn.execute(
            sa.update(attempts)
            .where(
                one_of(attempts.c.attempt_id, ids),
                attempts.c.worker_id == worker_id,
                attempts.c.status == _RUNNING,
            )
            .values(last_heartbeat_at=now)
        )
    running = _still_running(conn, worker_id, ids)
    return _upsert_worker(conn, dialect, worker_id, now, running, metadata)
