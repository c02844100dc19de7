"""The watchdog's store operations: find running attempts past a deadline, and end them.

A pass is two transactions: a read that lists candidates (cheap, and on SQLite it does not
take the write lock when nothing expired), then a write that locks the candidates with
``FOR UPDATE SKIP LOCKED`` (so watchdogs of several processes share the work on PostgreSQL),
checks each is still expired, ends it and moves its rollout per ``fulmen.store.lifecycle``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fulmen.store.base import ReconcileReport
from fulmen.store.clock import utc_now
from fulmen.store.lifecycle import expired_attempt, expired_status
from fulmen.store.sql.codec import attempt_from_row, rollout_from_row
from fulmen.store.sql.dialects import SqlDialect
from fulmen.store.sql.id_lists import one_of
from fulmen.store.sql.queue import finish_attempt, save_attempt
from fulmen.store.sql.schema import attempts, rollouts
from fulmen.types import Attempt, AttemptStatus, Rollout, RolloutConfig, RolloutStatus

__all__ = ["expire", "find_expired"]

_RUNNING = AttemptStatus.RUNNING.value


def find_expired(conn: Connection, dialect: SqlDialect) -> list[str]:
    """Ids of running attempts past their timeout or heartbeat deadline, oldest first."""
    del dialect
    now = utc_now()
    rows = conn.execute(
        sa.select(
            attempts.c.attempt_id,
            attempts.c.started_at,
            attempts.c.last_heartbeat_at,
            rollouts.c.config_json,
        )
        .join(rollouts, rollouts.c.rollout_id == attempts.c.rollout_id)
        .where(attempts.c.status == _RUNNING)
        .order_by(attempts.c.started_at, attempts.c.attempt_id)
    ).all()
    configs: dict[str, RolloutConfig] = {}
    out: list[str] = []
    for row in rows:
        config = configs.get(row.config_json)
        if config is None:
            config = configs[row.config_json] = RolloutConfig.model_validate_json(row.config_json)
        if expired_status(
            config, started_at=row.started_at, last_heartbeat_at=row.last_heartbeat_at, now=now
        ):
            out.append(row.attempt_id)
    return out


def _lock_candidates(
    conn: Connection, attempt_ids: Sequence[str]
) -> tuple[dict[str, Rollout], dict[str, Attempt]]:
    """Lock the candidates' rollouts, skipping those others hold, then their attempts.

    Rollout before attempt is the order every writer uses.
    """
    found = conn.execute(
        sa.select(attempts.c.attempt_id, attempts.c.rollout_id).where(
            one_of(attempts.c.attempt_id, attempt_ids), attempts.c.status == _RUNNING
        )
    ).all()
    rollout_ids = sorted({row.rollout_id for row in found})
    locked_rollouts = {
        row.rollout_id: rollout_from_row(row)
        for row in conn.execute(
            sa.select(rollouts)
            .where(one_of(rollouts.c.rollout_id, rollout_ids))
            .with_for_update(skip_locked=True)
        )
    }
    if not locked_rollouts:
        return {}, {}
    # The attempts of the rollouts we hold: waited for, not skipped (only a heartbeat can hold
    # one, briefly), so a rollout whose lock we won is always handled by this pass.
    locked_attempts = {
        row.attempt_id: attempt_from_row(row)
        for row in conn.execute(
            sa.select(attempts)
            .where(
                one_of(attempts.c.attempt_id, attempt_ids),
                one_of(attempts.c.rollout_id, sorted(locked_rollouts)),
                attempts.c.status == _RUNNING,
            )
            .order_by(attempts.c.attempt_id)
            .with_for_update()
        )
    }
    return locked_rollouts, locked_attempts


def expire(conn: Connection, dialect: SqlDialect, attempt_ids: Sequence[str]) -> ReconcileReport:
    """End the listed attempts that are still expired, skipping rows another pass holds."""
    now = utc_now()
    locked_rollouts, locked_attempts = _lock_candidates(conn, attempt_ids)
    timed_out: list[str] = []
    lost: list[str] = []
    requeued: list[str] = []
    failed: list[str] = []
    for attempt_id in attempt_ids:
        attempt = locked_attempts.get(attempt_id)
        rollout = locked_rollouts.get(attempt.rollout_id) if attempt else None
        if attempt is None or rollout is None:
            continue  # ended meanwhile, or another watchdog holds it
        ended = expired_attempt(attempt, rollout.config, now)
        if ended is None:
            continue  # a heartbeat arrived since the scan
        save_attempt(conn, ended)
        (timed_out if ended.status is AttemptStatus.TIMEOUT else lost).append(attempt_id)
        after = finish_attempt(conn, dialect, rollout, ended)
        if after is not None:
            locked_rollouts[rollout.rollout_id] = rollout.model_copy(update={"status": after})
        if after is RolloutStatus.QUEUING:
            requeued.append(rollout.rollout_id)
        elif after is RolloutStatus.FAILED:
            failed.append(rollout.rollout_id)
    return ReconcileReport(
        timed_out=tuple(timed_out), lost=tuple(lost), requeued=tuple(requeued), failed=tuple(failed)
    )
