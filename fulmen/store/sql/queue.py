"""Store operations on the rollout lifecycle: enqueue, claim, heartbeat, report, cancel, expire.

Each function is one transaction's body, ``op(conn, dialect, ...)``, run by a ``Runner``. The
lifecycle decisions come from ``fulmen.store.lifecycle``; this module only reads and writes rows.
Row locks are taken in one order (rollout before attempt) so PostgreSQL writers never deadlock
each other; claims and the watchdog skip rows another transaction holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fulmen.errors import Conflict, InvalidRequest, NotFound
from fulmen.store.clock import new_id, utc_now
from fulmen.store.lifecycle import (
    ROLLOUT_TERMINAL,
    check_reported_status,
    check_rollout_transition,
    rollout_status_after_attempt,
    same_rollout_request,
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

_RUNNING = AttemptStatus.RUNNING.value
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
_USED_ATTEMPTS = (
    sa.select(sa.func.count())
    .select_from(attempts)
    .where(
        attempts.c.rollout_id == sa.bindparam("b_rollout"),
        attempts.c.status != AttemptStatus.RELEASED.value,
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
            existing = known[request.rollout_id]
            if not same_rollout_request(existing, request):
                raise Conflict(
                    f"rollout {request.rollout_id} already exists with other content",
                    detail={"rollout_id": request.rollout_id},
                )
            out.append(existing)
            continue
        version = request.resources_version
        if version is not None and not 1 <= version <= latest:
            raise NotFound(f"resources version {version} does not exist")
        position += 1
        rollout = Rollout(
            rollout_id=request.rollout_id or new_id("ro"),
            input=request.input,
            mode=request.mode,
            task_id=request.task_id,
            resources_version=version if version is not None else (latest or None),
            status=RolloutStatus.QUEUING,
            config=request.config,
            metadata=request.metadata,
            position=position,
            enqueued_at=now,
        )
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
    query = sa.select(rollouts).where(rollouts.c.status == RolloutStatus.QUEUING.value)
    if modes is not None:
        query = query.where(rollouts.c.mode.in_([Mode(m).value for m in modes]))
    query = query.order_by(rollouts.c.position).limit(limit).with_for_update(skip_locked=True)
    out: list[Claim] = []
    for row in conn.execute(query).all():
        rollout = rollout_from_row(row)
        attempt = Attempt(
            attempt_id=new_id("at"),
            rollout_id=rollout.rollout_id,
            number=rollout.attempt_count + 1,
            worker_id=worker_id,
            status=AttemptStatus.RUNNING,
            started_at=now,
            last_heartbeat_at=now,
        )
        rollout = rollout.model_copy(
            update={
                "status": RolloutStatus.RUNNING,
                "attempt_count": attempt.number,
                "started_at": rollout.started_at or now,
            }
        )
        out.append(Claim(rollout=rollout, attempt=attempt))
    return out


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
    if status is not UNSET and status is not AttemptStatus.RUNNING:
        check_reported_status(attempt_id, status)
    rollout = load_rollout(conn, rollout_id, lock=True)  # lock order: rollout, then attempt
    attempt = _load_attempt(conn, attempt_id, lock=True)
    if attempt.is_terminal:
        if status is UNSET and error is UNSET:
            return attempt, None
        late = attempt.model_copy(
            update={
                "late_status": status if status is not UNSET else attempt.late_status,
                "late_error": error if error is not UNSET else attempt.late_error,
            }
        )
        save_attempt(conn, late)
        return late, None
    update: dict[str, object] = {}
    if error is not UNSET:
        update["error"] = error
    if status is not UNSET and status is not AttemptStatus.RUNNING:
        update.update(status=status, ended_at=utc_now())
    attempt = attempt.model_copy(update=update)
    save_attempt(conn, attempt)
    after = finish_attempt(conn, dialect, rollout, attempt) if attempt.is_terminal else None
    return attempt, after


def finish_attempt(
    conn: Connection, dialect: SqlDialect, rollout: Rollout, attempt: Attempt
) -> RolloutStatus | None:
    """Move the rollout of a just-ended attempt; returns its new status (None: unchanged)."""
    if rollout.status is not RolloutStatus.RUNNING:
        return None
    used = conn.execute(_USED_ATTEMPTS, {"b_rollout": rollout.rollout_id}).scalar_one()
    after = rollout_status_after_attempt(rollout.config, attempt.status, used)
    check_rollout_transition(rollout.rollout_id, rollout.status, after)
    values: dict[str, Any] = {"b_rollout": rollout.rollout_id, "status": after.value}
    if after is not RolloutStatus.QUEUING:
        values.update(ended_at=attempt.ended_at, error=attempt.error)
    conn.execute(_UPDATE_ROLLOUT, values)
    if after in ROLLOUT_TERMINAL:
        dialect.notify(conn)
    return after


def update_rollout(
    conn: Connection,
    dialect: SqlDialect,
    rollout_id: str,
    status: RolloutStatus | Unset,
    metadata: dict[str, Any] | Unset,
) -> Rollout:
    """See ``Store.update_rollout``."""
    rollout = load_rollout(conn, rollout_id, lock=True)
    update: dict[str, object] = {}
    values: dict[str, Any] = {}
    if metadata is not UNSET:
        update["metadata"] = metadata
        values["metadata_json"] = dumps(metadata)
    if status is not UNSET:
        if status is not RolloutStatus.CANCELLED:
            raise InvalidRequest(
                f"rollout {rollout_id}: only 'cancelled' may be set by a caller, "
                f"not {status.value!r}"
            )
        check_rollout_transition(rollout_id, rollout.status, status)
        now = utc_now()
        current = conn.execute(
            sa.select(attempts)
            .where(attempts.c.rollout_id == rollout_id)
            .order_by(attempts.c.number.desc())
            .limit(1)
            .with_for_update()
        ).first()
        if current is not None and current.status == _RUNNING:
            conn.execute(
                sa.update(attempts)
                .where(attempts.c.attempt_id == current.attempt_id)
                .values(status=AttemptStatus.CANCELLED.value, ended_at=now)
            )
        update.update(status=status, ended_at=now)
        values.update(status=status.value, ended_at=now)
        dialect.notify(conn)
    if values:
        conn.execute(sa.update(rollouts).where(rollouts.c.rollout_id == rollout_id).values(values))
    return rollout.model_copy(update=update)
