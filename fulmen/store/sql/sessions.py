"""Recording a closed production session (``Store.record_session``) in one transaction.

The position counter is locked first, as ``enqueue`` does, so two gateways recording the same
new session serialize: the second finds the first's rollout and adds its attempt to it.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fulmen.store.clock import utc_now
from fulmen.store.sessions import (
    new_session_attempt,
    new_session_rollout,
    next_session_rollout,
    replayed_session,
)
from fulmen.store.sql.codec import attempt_from_row, attempt_values, rollout_from_row
from fulmen.store.sql.dialects import SqlDialect
from fulmen.store.sql.queue import rollout_values
from fulmen.store.sql.schema import POSITION_COUNTER, attempts, meta, rollouts
from fulmen.types import Claim
from fulmen.types.sessions import SessionCreate

__all__ = ["record_session"]


def record_session(conn: Connection, dialect: SqlDialect, request: SessionCreate) -> Claim:
    """See ``Store.record_session``."""
    del dialect
    position = conn.execute(
        sa.select(meta.c.value).where(meta.c.key == POSITION_COUNTER).with_for_update()
    ).scalar_one()
    row = conn.execute(sa.select(attempts).where(attempts.c.attempt_id == request.attempt_id))
    stored = row.first()
    if stored is not None:
        attempt = attempt_from_row(stored)
        rollout_row = conn.execute(
            sa.select(rollouts).where(rollouts.c.rollout_id == attempt.rollout_id)
        ).one()
        return replayed_session(rollout_from_row(rollout_row), attempt, request)
    now = utc_now()
    existing = conn.execute(
        sa.select(rollouts).where(rollouts.c.rollout_id == request.rollout_id).with_for_update()
    ).first()
    if existing is None:
        rollout = new_session_rollout(request, position=position + 1, now=now)
        conn.execute(sa.insert(rollouts), [rollout_values(rollout)])
        conn.execute(
            sa.update(meta).where(meta.c.key == POSITION_COUNTER).values(value=rollout.position)
        )
    else:
        rollout = next_session_rollout(rollout_from_row(existing), request, now)
        conn.execute(
            sa.update(rollouts)
            .where(rollouts.c.rollout_id == rollout.rollout_id)
            .values(attempt_count=rollout.attempt_count, ended_at=rollout.ended_at)
        )
    attempt = new_session_attempt(rollout, request, now)
    conn.execute(sa.insert(attempts), [attempt_values(attempt)])
    return Claim(rollout=rollout, attempt=attempt)
