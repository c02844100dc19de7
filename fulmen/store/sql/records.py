"""Store operations on spans and LLM call records: idempotent appends with sequence numbers.

Appends take an optimistic path first: check the attempts (from a cache of attempt → rollout,
which never changes once written), reserve sequence numbers (one ``UPDATE ... RETURNING`` for a
single rollout; a locking ``SELECT`` plus one executemany ``UPDATE`` for several), and insert
with ``ON CONFLICT DO NOTHING``. The rollout rows stay locked until commit, so numbers of one
rollout strictly increase in commit order. If any record was already stored or a reference is
wrong, the optimistic transaction is rolled back (``SlowPath``) and the exact path runs: it
locks the rollouts, reads what is already stored, and handles each record in order with the
reference semantics (errors included). A fresh single span costs one transaction with two
statements; a retried batch costs two transactions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, MutableMapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fulmen.errors import InvalidRequest, NotFound
from fulmen.store.sql.codec import call_values, span_values
from fulmen.store.sql.dialects import SqlDialect
from fulmen.store.sql.id_lists import INLINE_MAX, one_of
from fulmen.store.sql.schema import attempts, llm_calls, rollouts, spans
from fulmen.store.stored import stored_call, stored_span
from fulmen.types import LLMCall, LLMCallCreate, Span, SpanCreate

__all__ = [
    "MAX_CACHED_ATTEMPTS",
    "SlowPath",
    "add_calls_exact",
    "add_calls_fast",
    "add_spans_exact",
    "add_spans_fast",
    "insert_new",
    "require_rollout",
]

AttemptCache = MutableMapping[str, str]

_NEXT_SEQUENCES = (
    sa.update(rollouts)
    .where(rollouts.c.rollout_id == sa.bindparam("b_rollout"))
    .values(last_sequence=rollouts.c.last_sequence + sa.bindparam("b_count"))
    .returning(rollouts.c.last_sequence)
)
_SET_SEQUENCE = (
    sa.update(rollouts)
    .where(rollouts.c.rollout_id == sa.bindparam("b_rollout"))
    .values(last_sequence=sa.bindparam("b_last"))
)
MAX_CACHED_ATTEMPTS = 100_000


class SlowPath(Exception):
    """The optimistic append met a stored record or a bad reference; run the exact path."""


def _check_cached(conn: Connection, pairs: Iterable[tuple[str, str]], cache: AttemptCache) -> None:
    """Raise ``SlowPath`` unless every (rollout, attempt) pair names an attempt of that rollout."""
    pairs = list(pairs)
    unknown = {a for _, a in pairs if a not in cache}
    if unknown:
        if len(cache) > MAX_CACHED_ATTEMPTS:
            cache.clear()
        rows = conn.execute(
            sa.select(attempts.c.attempt_id, attempts.c.rollout_id).where(
                one_of(attempts.c.attempt_id, unknown)
            )
        )
        cache.update({row.attempt_id: row.rollout_id for row in rows})
    if any(cache.get(a) != r for r, a in pairs):
        raise SlowPath


def _reserve(conn: Connection, counts: Counter[str]) -> dict[str, int]:
    """First new sequence number per rollout after reserving ``counts`` numbers for each."""
    if not counts:
        return {}
    if len(counts) == 1:
        ((rollout_id, count),) = counts.items()
        last = conn.execute(
            _NEXT_SEQUENCES, {"b_rollout": rollout_id, "b_count": count}
        ).scalar_one_or_none()
        if last is None:
            raise SlowPath
        return {rollout_id: last - count + 1}
    # Several rollouts (an exporter's batch): lock and read them in one statement, in one
    # order for every writer, and write the new counters with one executemany.
    rows = conn.execute(
        sa.select(rollouts.c.rollout_id, rollouts.c.last_sequence)
        .where(one_of(rollouts.c.rollout_id, counts))
        .order_by(rollouts.c.rollout_id)
        .with_for_update()
    ).all()
    if len(rows) != len(counts):
        raise SlowPath
    conn.execute(
        _SET_SEQUENCE,
        [{"b_rollout": r, "b_last": last + counts[r]} for r, last in rows],
    )
    return {r: last + 1 for r, last in rows}


def insert_new(conn: Connection, dialect: SqlDialect, table: sa.Table, rows: list[Any]) -> int:
    """Insert ``rows``, skipping those whose key is stored; return how many were inserted."""
    insert = dialect.insert_or_skip(table)
    if len(rows) == 1 or conn.dialect.supports_sane_multi_rowcount:
        # A plain executemany is the fastest bulk insert, when the driver counts its rows.
        return conn.execute(insert, rows).rowcount
    key = table.primary_key.columns.values()[0]
    return len(conn.execute(insert.returning(key), rows).all())


def _insert_all_new(
    conn: Connection, dialect: SqlDialect, table: sa.Table, rows: list[Any]
) -> None:
    """Insert ``rows``, skipping stored keys; ``SlowPath`` if any key was already stored."""
    if insert_new(conn, dialect, table, rows) != len(rows):
        raise SlowPath


def add_spans_fast(
    conn: Connection, dialect: SqlDialect, batch: Sequence[SpanCreate], cache: AttemptCache
) -> list[Span]:
    """Optimistic ``Store.add_spans``; raises ``SlowPath`` on anything unusual."""
    _check_cached(conn, ((s.rollout_id, s.attempt_id) for s in batch), cache)
    following = _reserve(conn, Counter(s.rollout_id for s in batch))
    out: list[Span] = []
    for span in batch:
        out.append(stored_span(span, following[span.rollout_id]))
        following[span.rollout_id] += 1
    _insert_all_new(conn, dialect, spans, [span_values(s) for s in out])
    return out


def add_calls_fast(
    conn: Connection, dialect: SqlDialect, batch: Sequence[LLMCallCreate], cache: AttemptCache
) -> list[LLMCall]:
    """Optimistic ``Store.add_llm_calls``; raises ``SlowPath`` on anything unusual."""
    pairs: list[tuple[str, str]] = []
    for call in batch:
        if call.rollout_id is not None and call.attempt_id is not None:
            pairs.append((call.rollout_id, call.attempt_id))
        elif call.rollout_id is not None or call.attempt_id is not None:
            raise SlowPath
    _check_cached(conn, pairs, cache)
    following = _reserve(conn, Counter(r for r, _ in pairs))
    out: list[LLMCall] = []
    for call in batch:
        sequence = 0
        if call.rollout_id is not None:
            sequence = following[call.rollout_id]
            following[call.rollout_id] += 1
        out.append(stored_call(call, sequence))
    _insert_all_new(conn, dialect, llm_calls, [call_values(c) for c in out])
    return out


def _lock_rollouts(conn: Connection, rollout_ids: Iterable[str]) -> None:
    """Lock the rollouts first so a concurrent append of the same records waits for us."""
    ids = sorted(set(rollout_ids))
    if ids:
        conn.execute(
            sa.select(rollouts.c.rollout_id)
            .where(one_of(rollouts.c.rollout_id, ids))
            .order_by(rollouts.c.rollout_id)
            .with_for_update()
        ).all()


def require_rollout(conn: Connection, rollout_id: str) -> None:
    """Raise ``NotFound`` unless the rollout exists (no row is read but its id)."""
    found = conn.execute(
        sa.select(rollouts.c.rollout_id).where(rollouts.c.rollout_id == rollout_id)
    ).first()
    if found is None:
        raise NotFound(f"rollout {rollout_id!r} does not exist")


def _check_attempt_of(conn: Connection, rollout_id: str, attempt_id: str) -> None:
    require_rollout(conn, rollout_id)
    owner = conn.execute(
        sa.select(attempts.c.rollout_id).where(attempts.c.attempt_id == attempt_id)
    ).scalar_one_or_none()
    if owner is None:
        raise NotFound(f"attempt {attempt_id!r} does not exist")
    if owner != rollout_id:
        raise InvalidRequest(f"attempt {attempt_id} does not belong to rollout {rollout_id}")


def _next_sequence(conn: Connection, rollout_id: str) -> int:
    return conn.execute(_NEXT_SEQUENCES, {"b_rollout": rollout_id, "b_count": 1}).scalar_one()


def add_spans_exact(
    conn: Connection, dialect: SqlDialect, batch: Sequence[SpanCreate], cache: AttemptCache
) -> list[Span]:
    """``Store.add_spans`` record by record, with the reference semantics."""
    del dialect, cache
    _lock_rollouts(conn, (s.rollout_id for s in batch))
    keys = list(dict.fromkeys((s.attempt_id, s.span_id) for s in batch))
    stored: dict[tuple[str, str], Span] = {}
    # Two parameters per key: chunked, so a batch of any size stays under the drivers' limits.
    for start in range(0, len(keys), INLINE_MAX):
        chunk = keys[start : start + INLINE_MAX]
        rows = conn.execute(
            sa.select(spans.c.attempt_id, spans.c.span_id, spans.c.body).where(
                sa.tuple_(spans.c.attempt_id, spans.c.span_id).in_(chunk)
            )
        )
        stored.update(
            {(row.attempt_id, row.span_id): Span.model_validate_json(row.body) for row in rows}
        )
    out: list[Span] = []
    new: list[Span] = []
    for span in batch:
        key = (span.attempt_id, span.span_id)
        hit = stored.get(key)
        if hit is None:
            _check_attempt_of(conn, span.rollout_id, span.attempt_id)
            hit = stored[key] = stored_span(span, _next_sequence(conn, span.rollout_id))
            new.append(hit)
        out.append(hit)
    if new:
        conn.execute(sa.insert(spans), [span_values(s) for s in new])
    return out


def add_calls_exact(
    conn: Connection, dialect: SqlDialect, batch: Sequence[LLMCallCreate], cache: AttemptCache
) -> list[LLMCall]:
    """``Store.add_llm_calls`` record by record, with the reference semantics."""
    del dialect, cache
    _lock_rollouts(conn, (c.rollout_id for c in batch if c.rollout_id is not None))
    ids = list(dict.fromkeys(c.call_id for c in batch))
    stored: dict[str, LLMCall] = {
        row.call_id: LLMCall.model_validate_json(row.body)
        for row in conn.execute(
            sa.select(llm_calls.c.call_id, llm_calls.c.body).where(one_of(llm_calls.c.call_id, ids))
        )
    }
    out: list[LLMCall] = []
    new: list[LLMCall] = []
    for call in batch:
        hit = stored.get(call.call_id)
        if hit is None:
            sequence = 0
            if call.rollout_id is not None:
                if call.attempt_id is None:
                    raise InvalidRequest(f"call {call.call_id}: rollout_id without attempt_id")
                _check_attempt_of(conn, call.rollout_id, call.attempt_id)
                sequence = _next_sequence(conn, call.rollout_id)
            elif call.attempt_id is not None:
                raise InvalidRequest(f"call {call.call_id}: attempt_id without rollout_id")
            hit = stored[call.call_id] = stored_call(call, sequence)
            new.append(hit)
        out.append(hit)
    if new:
        conn.execute(sa.insert(llm_calls), [call_values(c) for c in new])
    return out
