"""Store operations that read (queries, pages, statistics) and the resources snapshots.

Pages use keyset pagination: ``position`` for rollouts, ``sequence`` for spans and calls; one
extra row is read to know whether a next page exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fulmen.errors import Conflict, InvalidRequest, NotFound
from fulmen.store.clock import new_id, utc_now
from fulmen.store.sql.codec import (
    attempt_from_row,
    resources_from_row,
    rollout_from_row,
    worker_from_row,
)
from fulmen.store.sql.dialects import SqlDialect
from fulmen.store.sql.id_lists import one_of
from fulmen.store.sql.queue import load_rollout
from fulmen.store.sql.schema import (
    RESOURCES_COUNTER,
    attempts,
    llm_calls,
    meta,
    resources,
    rollouts,
    spans,
    workers,
)
from fulmen.types import (
    Attempt,
    AttemptStatus,
    LLMCall,
    Page,
    Resources,
    ResourcesCreate,
    Rollout,
    RolloutQuery,
    RolloutStatus,
    Span,
    StoreStats,
    Worker,
)

__all__ = [
    "add_resources",
    "get_attempt",
    "get_resources",
    "get_rollout",
    "get_rollouts",
    "latest_resources",
    "list_attempts",
    "list_workers",
    "query_llm_calls",
    "query_rollouts",
    "query_spans",
    "stats",
]

_Record = TypeVar("_Record", Span, LLMCall)


def get_rollout(conn: Connection, rollout_id: str) -> Rollout:
    """See ``Store.get_rollout``."""
    return load_rollout(conn, rollout_id)


def get_rollouts(conn: Connection, rollout_ids: Sequence[str]) -> list[Rollout]:
    """Return the listed rollouts in the order asked; ``NotFound`` for an unknown id."""
    ids = list(dict.fromkeys(rollout_ids))
    if not ids:
        return []
    rows = conn.execute(sa.select(rollouts).where(one_of(rollouts.c.rollout_id, ids)))
    found = {row.rollout_id: rollout_from_row(row) for row in rows}
    for rollout_id in rollout_ids:
        if rollout_id not in found:
            raise NotFound(f"rollout {rollout_id!r} does not exist")
    return [found[r] for r in rollout_ids]


def get_attempt(conn: Connection, attempt_id: str) -> Attempt:
    """See ``Store.get_attempt``."""
    row = conn.execute(sa.select(attempts).where(attempts.c.attempt_id == attempt_id)).first()
    if row is None:
        raise NotFound(f"attempt {attempt_id!r} does not exist")
    return attempt_from_row(row)


def list_attempts(conn: Connection, rollout_id: str) -> list[Attempt]:
    """See ``Store.list_attempts``."""
    load_rollout(conn, rollout_id)
    rows = conn.execute(
        sa.select(attempts).where(attempts.c.rollout_id == rollout_id).order_by(attempts.c.number)
    )
    return [attempt_from_row(row) for row in rows]


def query_rollouts(conn: Connection, query: RolloutQuery) -> Page[Rollout]:
    """See ``Store.query_rollouts``."""
    select = sa.select(rollouts)
    if query.cursor is not None:
        select = select.where(rollouts.c.position > query.cursor)
    if query.rollout_ids is not None:
        select = select.where(one_of(rollouts.c.rollout_id, query.rollout_ids))
    if query.statuses is not None:
        select = select.where(rollouts.c.status.in_([s.value for s in query.statuses]))
    if query.mode is not None:
        select = select.where(rollouts.c.mode == query.mode.value)
    if query.task_id is not None:
        select = select.where(rollouts.c.task_id == query.task_id)
    if query.resources_version is not None:
        select = select.where(rollouts.c.resources_version == query.resources_version)
    rows = conn.execute(select.order_by(rollouts.c.position).limit(query.limit + 1)).all()
    items = [rollout_from_row(row) for row in rows[: query.limit]]
    more = len(rows) > query.limit
    return Page(items=items, next_cursor=items[-1].position if more else None)


def _page(
    conn: Connection,
    table: sa.Table,
    model: type[_Record],
    rollout_id: str,
    attempt_id: str | None,
    after_sequence: int,
    limit: int,
) -> Page[_Record]:
    if limit < 1:
        raise InvalidRequest(f"limit must be at least 1, got {limit}")
    load_rollout(conn, rollout_id)
    select = sa.select(table.c.body).where(
        table.c.rollout_id == rollout_id, table.c.sequence > after_sequence
    )
    if attempt_id is not None:
        select = select.where(table.c.attempt_id == attempt_id)
    bodies = conn.execute(select.order_by(table.c.sequence).limit(limit + 1)).scalars().all()
    items = [model.model_validate_json(body) for body in bodies[:limit]]
    more = len(bodies) > limit
    return Page(items=items, next_cursor=items[-1].sequence if more else None)


def query_spans(
    conn: Connection, rollout_id: str, attempt_id: str | None, after_sequence: int, limit: int
) -> Page[Span]:
    """See ``Store.query_spans``."""
    return _page(conn, spans, Span, rollout_id, attempt_id, after_sequence, limit)


def query_llm_calls(
    conn: Connection, rollout_id: str, attempt_id: str | None, after_sequence: int, limit: int
) -> Page[LLMCall]:
    """See ``Store.query_llm_calls``."""
    return _page(conn, llm_calls, LLMCall, rollout_id, attempt_id, after_sequence, limit)


def add_resources(conn: Connection, dialect: SqlDialect, request: ResourcesCreate) -> Resources:
    """See ``Store.add_resources``."""
    del dialect
    # The counter lock serializes writers, so the id check sees every committed snapshot.
    version = conn.execute(
        sa.select(meta.c.value).where(meta.c.key == RESOURCES_COUNTER).with_for_update()
    ).scalar_one()
    if request.resources_id is not None:
        row = conn.execute(
            sa.select(resources).where(resources.c.resources_id == request.resources_id)
        ).first()
        if row is not None:
            existing = resources_from_row(row)
            if existing.resources != request.resources or existing.metadata != request.metadata:
                raise Conflict(f"resources {request.resources_id} already exist with other content")
            return existing
    stored = Resources(
        version=version + 1,
        resources_id=request.resources_id or new_id("res"),
        resources=request.resources,
        metadata=request.metadata,
        created_at=utc_now(),
    )
    conn.execute(
        sa.insert(resources).values(
            version=stored.version,
            resources_id=stored.resources_id,
            created_at=stored.created_at,
            body=stored.model_dump_json(),
        )
    )
    conn.execute(
        sa.update(meta).where(meta.c.key == RESOURCES_COUNTER).values(value=stored.version)
    )
    return stored


def get_resources(conn: Connection, version: int) -> Resources:
    """See ``Store.get_resources``."""
    row = conn.execute(sa.select(resources).where(resources.c.version == version)).first()
    if row is None:
        raise NotFound(f"resources version {version} does not exist")
    return resources_from_row(row)


def latest_resources(conn: Connection) -> Resources | None:
    """See ``Store.latest_resources``."""
    row = conn.execute(sa.select(resources).order_by(resources.c.version.desc()).limit(1)).first()
    return resources_from_row(row) if row is not None else None


def list_workers(conn: Connection) -> list[Worker]:
    """See ``Store.list_workers``."""
    rows = conn.execute(sa.select(workers).order_by(workers.c.worker_id))
    return [worker_from_row(row) for row in rows]


def _count(conn: Connection, table: sa.Table) -> int:
    return conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()


def _by_status(conn: Connection, table: sa.Table) -> dict[str, int]:
    rows = conn.execute(sa.select(table.c.status, sa.func.count()).group_by(table.c.status))
    counts: dict[str, Any] = {status: count for status, count in rows}
    return counts


def stats(conn: Connection) -> StoreStats:
    """See ``Store.stats``."""
    by_rollout = _by_status(conn, rollouts)
    by_attempt = _by_status(conn, attempts)
    return StoreStats(
        rollouts={s: by_rollout.get(s.value, 0) for s in RolloutStatus},
        attempts={s: by_attempt.get(s.value, 0) for s in AttemptStatus},
        spans=_count(conn, spans),
        llm_calls=_count(conn, llm_calls),
        resources_versions=_count(conn, resources),
        workers=_count(conn, workers),
    )
