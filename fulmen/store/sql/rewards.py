"""Store operations on posted rewards, and pruning finished rollouts with all their records.

A reward takes the rollout's next sequence number with the same ``UPDATE ... RETURNING`` that
numbers spans and calls, which also locks the rollout row until commit. Pruning works one chunk
of rollouts per transaction (``PRUNE_CHUNK``): it locks the chunk's rollout rows, so an append
to one of them waits and then finds the rollout gone, instead of a delete failing on a row that
appeared meanwhile.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fulmen.errors import NotFound
from fulmen.store.rewards import (
    PRUNE_CHUNK,
    REWARD_SPAN_NAME,
    build_reward,
    missing_response,
    replayed_reward,
)
from fulmen.store.sql.dialects import SqlDialect
from fulmen.store.sql.id_lists import one_of
from fulmen.store.sql.records import require_rollout
from fulmen.store.sql.schema import attempts, llm_calls, rewards, rollouts, spans
from fulmen.types import PruneReport, PruneRequest, Reward, RewardCreate, RolloutStatus

__all__ = ["add_reward", "list_rewards", "prune_chunk"]

_NEXT_SEQUENCE = (
    sa.update(rollouts)
    .where(rollouts.c.rollout_id == sa.bindparam("b_rollout"))
    .values(last_sequence=rollouts.c.last_sequence + 1)
    .returning(rollouts.c.last_sequence)
)
_FINAL = [RolloutStatus.SUCCEEDED, RolloutStatus.FAILED, RolloutStatus.CANCELLED]


def _stored(conn: Connection, key: str) -> Reward | None:
    body = conn.execute(sa.select(rewards.c.body).where(rewards.c.key == key)).scalar_one_or_none()
    return None if body is None else Reward.model_validate_json(body)


def add_reward(conn: Connection, dialect: SqlDialect, request: RewardCreate) -> Reward:
    """See ``Store.add_reward``."""
    if request.key is not None and (stored := _stored(conn, request.key)) is not None:
        return replayed_reward(stored, request)
    attempt_id: str | None = None
    rollout_id = request.target_rollout_id()
    if rollout_id is None:
        assert request.response_id is not None  # RewardCreate names exactly one target
        row = conn.execute(
            sa.select(llm_calls.c.rollout_id, llm_calls.c.attempt_id)
            .where(
                llm_calls.c.response_id == request.response_id,
                llm_calls.c.rollout_id.is_not(None),
            )
            .order_by(llm_calls.c.started_at.desc(), llm_calls.c.call_id.desc())
            .limit(1)
        ).first()
        if row is None:
            raise missing_response(request.response_id)
        rollout_id, attempt_id = row.rollout_id, row.attempt_id
    sequence = conn.execute(_NEXT_SEQUENCE, {"b_rollout": rollout_id}).scalar_one_or_none()
    if sequence is None:
        raise NotFound(f"rollout {rollout_id!r} does not exist")
    reward = build_reward(request, rollout_id=rollout_id, attempt_id=attempt_id, sequence=sequence)
    inserted = conn.execute(
        dialect.insert_or_skip(rewards),
        {
            "key": reward.key,
            "rollout_id": reward.rollout_id,
            "attempt_id": reward.attempt_id,
            "sequence": reward.sequence,
            "body": reward.model_dump_json(),
        },
    ).rowcount
    if inserted == 0:  # the same key committed by a concurrent post since we looked
        stored = _stored(conn, reward.key)
        assert stored is not None
        return replayed_reward(stored, request)
    return reward


def list_rewards(conn: Connection, rollout_id: str) -> list[Reward]:
    """See ``Store.list_rewards``."""
    require_rollout(conn, rollout_id)
    rows = conn.execute(
        sa.select(rewards.c.body)
        .where(rewards.c.rollout_id == rollout_id)
        .order_by(rewards.c.sequence)
    )
    return [Reward.model_validate_json(body) for (body,) in rows]


def _candidates(request: PruneRequest, after_position: int) -> sa.Select[Any, Any]:
    where: list[sa.ColumnElement[bool]] = [
        rollouts.c.status.in_([s.value for s in _FINAL]),
        rollouts.c.ended_at < request.ended_before,
        rollouts.c.position > after_position,
    ]
    if request.modes is not None:
        where.append(rollouts.c.mode.in_([m.value for m in request.modes]))
    if request.keep_rewarded:
        where.append(~sa.exists().where(rewards.c.rollout_id == rollouts.c.rollout_id))
        where.append(
            ~sa.exists().where(
                spans.c.rollout_id == rollouts.c.rollout_id, spans.c.name == REWARD_SPAN_NAME
            )
        )
    return (
        sa.select(rollouts.c.rollout_id, rollouts.c.position)
        .where(*where)
        .order_by(rollouts.c.position)
        .limit(PRUNE_CHUNK)
    )


def _count(conn: Connection, table: sa.Table, ids: list[str]) -> int:
    return conn.execute(
        sa.select(sa.func.count()).select_from(table).where(one_of(table.c.rollout_id, ids))
    ).scalar_one()


def prune_chunk(
    conn: Connection, dialect: SqlDialect, request: PruneRequest, after_position: int
) -> tuple[PruneReport, int | None]:
    """Prune (or count) the next chunk of rollouts after ``after_position``.

    Returns the chunk's counts and the position to continue after, ``None`` when no rollout
    was left to prune.
    """
    del dialect
    rows = conn.execute(_candidates(request, after_position).with_for_update()).all()
    if not rows:
        return PruneReport(dry_run=request.dry_run), None
    ids = [row.rollout_id for row in rows]
    report = PruneReport(
        dry_run=request.dry_run,
        rollouts=len(ids),
        attempts=_count(conn, attempts, ids),
        spans=_count(conn, spans, ids),
        llm_calls=_count(conn, llm_calls, ids),
        rewards=_count(conn, rewards, ids),
    )
    if not request.dry_run:
        # Children first: spans and calls reference attempts, everything references rollouts.
        for table in (rewards, spans, llm_calls, attempts, rollouts):
            conn.execute(sa.delete(table).where(one_of(table.c.rollout_id, ids)))
    return report, rows[-1].position
