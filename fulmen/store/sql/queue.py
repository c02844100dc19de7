"""Store operations on the rollout lifecycle: enqueue, claim, heartbeat, report, cancel, expire.

Each function is one transaction's body, ``op(conn, dialect, ...)``, run by a
``TransactionRunner``. The lifecycle decisions come from ``fulmen.store.lifecycle``; this module
only reads and writes rows. Row locks are taken in one order (rollout before attempt) so
PostgreSQL writers never deadlock each other; claims and the watchdog skip rows another
transaction holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fulmen.errors import NotFound
from fulmen.store.clock import new_id, utc_now
from fulmen.store.lifecycle import (
    ROLLOUT_TERMINAL,
    UNCOUNTED_ATTEMPT_STATUSES,
    cancelled,
    check_caller_status,
    claimed,
    new_rollout,
    repeated_rollout,
    reported_attempt,
    rollout_after_attempt,
)
from fulmen.store.sql.codec import (
    attempt_from_row,
    attempt_values,
    dumps,
    loads,
    rollout_from_row,
)
from fulmen.store.sql.dialects import SqlDialect
from fulmen.store.sql.id_lists import one_of
from fulmen.store.sql.schema import (
    POSITION_COUNTER,
    RESOURCES_COUNTER,
    attempts,
    claims,
    meta,
    rollouts,
)
from fulmen.store.sql.workers import touch_after_claim
from fulmen.types import (
    UNSET,
    Attempt,
    AttemptStatus,
    Claim,
    Mode,
    Rollout,
    RolloutCreate,
    RolloutStatus,
    Unset,
)

__all__ = [
    "claim",
    "enqueue",
    "finish_attempt",
    "load_rollout",
    "rollout_values",
    "save_attempt",
    "update_attempt",
    "update_rollout",
]

_SET_CLAIMED = (
    sa.update(rollouts)
    .where(rollouts.c.rollout_id == sa.bindparam("b_id"))
    .values(
        status=RolloutStatus.RUNNING.value,
        attempt_count=sa.bindparam("b_count"),
        started_at=sa.bindparam("b_started", type_=rollouts.c.started_at.type),
    )
)


# Statements used on every call are built once: building one costs about as much as running it.
_COUNTER = sa.select(meta.c.value).where(meta.c.key == sa.bindparam("b_key"))
_COUNTER_LOCKED = _COUNTER.with_for_update()
_ROLLOUT = sa.select(rollouts).where(rollouts.c.rollout_id == sa.bindparam("b_rollout"))
_ROLLOUT_LOCKED = _ROLLOUT.with_for_update()
_ATTEMPT = sa.select(attempts).where(attempts.c.attempt_id == sa.bindparam("b_attempt"))
_ATTEMPT_LOCKED = _ATTEMPT.with_for_update()
# UPDATEs without values(): the SET clause comes from the keys of the parameters.
_UPDATE_ATTEMPT = sa.update(attempts).where(attempts.c.attempt_id == sa.bindparam("b_attempt"))
_UPDATE_ROLLOUT = sa.update(rollouts).where(rollouts.c.rollout_id == sa.bindparam("b_rollout"))
# lifecycle.attempts_used, counted by the database.
_USED_ATTEMPTS = (
    sa.select(sa.func.count())
    .select_from(attempts)
    .where(
        attempts.c.rollout_id == sa.bindparam("b_rollout"),
        attempts.c.status.not_in(sorted(s.value for s in UNCOUNTED_ATTEMPT_STATUSES)),
    )
)


def _counter(conn: Connection, key: str, *, lock: bool) -> int:
    return conn.execute(_COUNTER_LOCKED if lock else _COUNTER, {"b_key": key}).scalar_one()


def load_rollout(conn: Connection, rollout_id: str, *, lock: bool = False) -> Rollout:
    """One rollout (row-locked on PostgreSQL when ``lock``), or ``NotFound``."""
    row = conn.execute(_ROLLOUT_LOCKED if lock else _ROLLOUT, {"b_rollout": rollout_id}).first()
    if row is None:
        raise NotFound(f"rollout {rollout_id!r} does not exist")
    return rollout_from_row(row)


def enqueue(
    conn: Connection, dialect: SqlDialect, requests: Sequence[RolloutCreate]
) -> list[Rollout]:
    """See ``Store.enqueue``; the whole batch is one transaction."""
    del dialect
    # Locking the position counter first serializes enqueues, so the duplicate check below
    # sees every committed rollout and positions become visible in order.
    position = _counter(conn, POSITION_COUNTER, lock=True)
    latest = _counter(conn, RESOURCES_COUNTER, lock=False)
    known: dict[str, Rollout] = {}
    wanted = [r.rollout_id for r in requests if r.rollout_id is not None]
    if wanted:
        rows = conn.execute(sa.select(rollouts).where(one_of(rollouts.c.rollout_id, wanted)))
        known = {row.rollout_id: rollout_from_row(row) for row in rows}
    now = utc_now()
    out: list[Rollout] = []
    new_rows: list[dict[str, Any]] = []
    for request in requests:
        if request.rollout_id is not None and request.rollout_id in known:
            out.append(repeated_rollout(known[request.rollout_id], request))
            continue
        rollout = new_rollout(
            request, fresh_id=new_id("ro"), position=position + 1, latest_resources=latest, now=now
        )
        position = rollout.position
        known[rollout.rollout_id] = rollout
        new_rows.append(rollout_values(rollout))
        out.append(rollout)
    if new_rows:
        conn.execute(sa.insert(rollouts), new_rows)
        conn.execute(sa.update(meta).where(meta.c.key == POSITION_COUNTER).values(value=position))
    return out


def rollout_values(rollout: Rollout) -> dict[str, Any]:
    """Return the row of ``rollout`` as ``insert(rollouts)`` takes it (no sequence used yet)."""
    return {
        "rollout_id": rollout.rollout_id,
        "position": rollout.position,
        "input_json": dumps(rollout.input),
        "mode": rollout.mode.value,
        "task_id": rollout.task_id,
        "resources_version": rollout.resources_version,
        "status": rollout.status.value,
        "config_json": rollout.config.model_dump_json(),
        "metadata_json": dumps(rollout.metadata),
        "attempt_count": rollout.attempt_count,
        "error": rollout.error,
        "enqueued_at": rollout.enqueued_at,
        "started_at": rollout.started_at,
        "ended_at": rollout.ended_at,
        "last_sequence": 0,
    }


def claim(
    conn: Connection,
    dialect: SqlDialect,
    worker_id: str,
    limit: int,
    modes: Sequence[Mode] | None,
    claim_id: str | None,
) -> list[Claim]:
    """See ``Store.claim``."""
    now = utc_now()
    if claim_id is not None:
        # A concurrent claim with the same id blocks here until it commits, then finds its row.
        fresh = conn.execute(
            dialect.insert(claims)
            .values(claim_id=claim_id, worker_id=worker_id, claimed_json="[]", created_at=now)
            .on_conflict_do_nothing(index_elements=["claim_id"])
            .returning(claims.c.claim_id)
        ).first()
        if fresh is None:
            return _repeat_claim(conn, claim_id)
    out = _take_queued(conn, worker_id, limit, modes, now)
    if out:
        conn.execute(sa.insert(attempts), [attempt_values(c.attempt) for c in out])
        conn.execute(
            _SET_CLAIMED,
            [
                {
                    "b_id": c.rollout.rollout_id,
                    "b_count": c.rollout.attempt_count,
                    "b_started": c.rollout.started_at,
                }
                for c in out
            ],
        )
    touch_after_claim(conn, dialect, worker_id, now, [c.attempt.attempt_id for c in out])
    if claim_id is not None:
        pairs = [[c.rollout.rollout_id, c.attempt.attempt_id] for c in out]
        conn.execute(
            sa.update(claims).where(claims.c.claim_id == claim_id).values(claimed_json=dumps(pairs))
        )
    return out


def _take_queued(
    conn: Connection, worker_id: str, limit: int, modes: Sequence[Mode] | None, now: datetime
) -> list[Claim]:
    """Lock the oldest queuing rollouts (skipping rows others hold) and plan their attempts."""
    # lifecycle.is_claimable and lifecycle.claim_order, said in SQL.
    query = sa.select(rollouts).where(rollouts.c.status == RolloutStatus.QUEUING.value)
    if modes is not None:
        query = query.where(rollouts.c.mode.in_([Mode(m).value for m in modes]))
    query = query.order_by(rollouts.c.position).limit(limit).with_for_update(skip_locked=True)
    return [
        claimed(rollout_from_row(row), worker_id=worker_id, attempt_id=new_id("at"), now=now)
        for row in conn.execute(query).all()
    ]


def _repeat_claim(conn: Connection, claim_id: str) -> list[Claim]:
    text = conn.execute(
        sa.select(claims.c.claimed_json).where(claims.c.claim_id == claim_id)
    ).scalar_one()
    pairs: list[list[str]] = loads(text)
    if not pairs:
        return []
    rollout_rows = conn.execute(
        sa.select(rollouts).where(one_of(rollouts.c.rollout_id, [r for r, _ in pairs]))
    )
    by_rollout = {row.rollout_id: rollout_from_row(row) for row in rollout_rows}
    attempt_rows = conn.execute(
        sa.select(attempts).where(one_of(attempts.c.attempt_id, [a for _, a in pairs]))
    )
    by_attempt = {row.attempt_id: attempt_from_row(row) for row in attempt_rows}
    # A pruned rollout is gone with its attempt; the replay returns the claims that remain.
    return [
        Claim(rollout=by_rollout[r], attempt=by_attempt[a])
        for r, a in pairs
        if r in by_rollout and a in by_attempt
    ]


def _load_attempt(conn: Connection, attempt_id: str, *, lock: bool = False) -> Attempt:
    row = conn.execute(_ATTEMPT_LOCKED if lock else _ATTEMPT, {"b_attempt": attempt_id}).first()
    if row is None:
        raise NotFound(f"attempt {attempt_id!r} does not exist")
    return attempt_from_row(row)


def save_attempt(conn: Connection, attempt: Attempt) -> None:
    """Write every field of ``attempt`` to its row."""
    values = attempt_values(attempt)
    values["b_attempt"] = values.pop("attempt_id")
    conn.execute(_UPDATE_ATTEMPT, values)


def update_attempt(
    conn: Connection,
    dialect: SqlDialect,
    attempt_id: str,
    status: AttemptStatus | Unset,
    error: str | Unset | None,
) -> tuple[Attempt, RolloutStatus | None]:
    """See ``Store.update_attempt``; also returns the rollout's new status (None: unchanged)."""
    rollout_id = _load_attempt(conn, attempt_id).rollout_id
    rollout = load_rollout(conn, rollout_id, lock=True)  # lock order: rollout, then attempt
    attempt = _load_attempt(conn, attempt_id, lock=True)
    reported = reported_attempt(attempt, status=status, error=error, now=utc_now())
    if reported is None:
        return attempt, None
    save_attempt(conn, reported)
    # Only an attempt this report ended moves its rollout; a late report on a final one does not.
    ended = reported.is_terminal and not attempt.is_terminal
    return reported, finish_attempt(conn, dialect, rollout, reported) if ended else None


def finish_attempt(
    conn: Connection, dialect: SqlDialect, rollout: Rollout, attempt: Attempt
) -> RolloutStatus | None:
    """Move the rollout of a just-ended attempt; returns its new status (None: unchanged)."""
    if rollout.status is not RolloutStatus.RUNNING:
        return None  # skip the count: the rollout stays (lifecycle.rollout_after_attempt)
    used = conn.execute(_USED_ATTEMPTS, {"b_rollout": rollout.rollout_id}).scalar_one()
    moved = rollout_after_attempt(rollout, attempt, used)
    if moved is None:
        return None
    values: dict[str, Any] = {"b_rollout": rollout.rollout_id, "status": moved.status.value}
    if moved.status is not RolloutStatus.QUEUING:
        values.update(ended_at=moved.ended_at, error=moved.error)
    conn.execute(_UPDATE_ROLLOUT, values)
    if moved.status in ROLLOUT_TERMINAL:
        dialect.notify(conn)
    return moved.status


def update_rollout(
    conn: Connection,
    dialect: SqlDialect,
    rollout_id: str,
    status: RolloutStatus | Unset,
    metadata: dict[str, Any] | Unset,
) -> Rollout:
    """See ``Store.update_rollout``."""
    rollout = load_rollout(conn, rollout_id, lock=True)
    values: dict[str, Any] = {}
    if metadata is not UNSET:
        rollout = rollout.model_copy(update={"metadata": metadata})
        values["metadata_json"] = dumps(metadata)
    if status is not UNSET:
        check_caller_status(rollout_id, rollout.status, status)
        row = conn.execute(
            sa.select(attempts)
            .where(attempts.c.rollout_id == rollout_id)
            .order_by(attempts.c.number.desc())
            .limit(1)
            .with_for_update()
        ).first()
        current = attempt_from_row(row) if row is not None else None
        rollout, stopped = cancelled(rollout, current, utc_now())
        if stopped is not None:
            conn.execute(
                sa.update(attempts)
                .where(attempts.c.attempt_id == stopped.attempt_id)
                .values(status=stopped.status.value, ended_at=stopped.ended_at)
            )
        values.update(status=rollout.status.value, ended_at=rollout.ended_at)
        dialect.notify(conn)
    if values:
        conn.execute(sa.update(rollouts).where(rollouts.c.rollout_id == rollout_id).values(values))
    return rollout
