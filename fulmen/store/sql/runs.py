"""Store operations on training runs, their metrics and model versions, one transaction each.

Each record is kept whole as JSON in ``body``, next to the columns that key, sort and join it
(``fulmen.store.sql.schema``). The decisions (what a resume keeps, when a repeat is a no-op or
a ``Conflict``, where a page ends) are ``fulmen.store.runs``', shared with the memory store.
Writers of one run lock its row first, so a resume and a status change from two processes are
applied one after the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fulmen.store.runs import (
    conflicting_metrics,
    conflicting_version,
    missing_run,
    page_run_metrics,
    resumed_run,
    started_run,
    store_time,
    updated_run,
)
from fulmen.store.sql.dialects import SqlDialect
from fulmen.store.sql.id_lists import one_of
from fulmen.store.sql.records import insert_new
from fulmen.store.sql.schema import model_versions, run_metrics, runs
from fulmen.types import ModelVersion, Page, Run, RunMetrics, RunStatus, Unset

__all__ = [
    "add_model_version",
    "add_run_metrics",
    "get_run",
    "list_model_versions",
    "list_runs",
    "query_run_metrics",
    "start_run",
    "update_run",
]


def _locked_run(conn: Connection, run_id: str) -> Run | None:
    body = conn.execute(
        sa.select(runs.c.body).where(runs.c.run_id == run_id).with_for_update()
    ).scalar_one_or_none()
    return None if body is None else Run.model_validate_json(body)


def _save(conn: Connection, run: Run) -> None:
    conn.execute(
        sa.update(runs)
        .where(runs.c.run_id == run.run_id)
        .values(started_at=run.started_at, body=run.model_dump_json())
    )


def start_run(conn: Connection, dialect: SqlDialect, run: Run) -> Run:
    """See ``Store.start_run``."""
    now = store_time()
    started = started_run(run, now)
    row = {"run_id": run.run_id, "started_at": run.started_at, "body": started.model_dump_json()}
    if conn.execute(dialect.insert_or_skip(runs), row).rowcount:
        return started
    stored = _locked_run(conn, run.run_id)
    assert stored is not None  # the insert was skipped because the row exists
    resumed = resumed_run(stored, run, now)
    _save(conn, resumed)
    return resumed


def update_run(
    conn: Connection,
    dialect: SqlDialect,
    run_id: str,
    status: RunStatus | Unset,
    ended_at: float | Unset | None,
) -> Run:
    """See ``Store.update_run`` (arguments already checked)."""
    del dialect
    stored = _locked_run(conn, run_id)
    if stored is None:
        raise missing_run(run_id)
    updated = updated_run(stored, status, ended_at, store_time())
    _save(conn, updated)
    return updated


def get_run(conn: Connection, run_id: str) -> Run:
    """See ``Store.get_run``."""
    body = conn.execute(sa.select(runs.c.body).where(runs.c.run_id == run_id)).scalar_one_or_none()
    if body is None:
        raise missing_run(run_id)
    return Run.model_validate_json(body)


def list_runs(conn: Connection, limit: int, offset: int) -> Page[Run]:
    """See ``Store.list_runs``: one row past the page tells whether another follows."""
    bodies = conn.execute(
        sa.select(runs.c.body)
        .order_by(runs.c.started_at.desc(), runs.c.run_id)
        .limit(limit + 1)
        .offset(offset)
    ).scalars()
    items = [Run.model_validate_json(b) for b in bodies]
    more = len(items) > limit
    return Page(items=items[:limit], next_cursor=offset + limit if more else None)


def add_run_metrics(conn: Connection, dialect: SqlDialect, metrics: Sequence[RunMetrics]) -> None:
    """See ``Store.add_run_metrics``: stores the new records, checks the repeated ones."""
    unique: dict[tuple[str, int, float], RunMetrics] = {}
    for record in metrics:
        key = (record.run_id, record.step, record.time)
        known = unique.setdefault(key, record)
        if known != record:
            raise conflicting_metrics(known)
    run_ids = sorted({r.run_id for r in unique.values()})
    found = set(
        conn.execute(sa.select(runs.c.run_id).where(one_of(runs.c.run_id, run_ids))).scalars()
    )
    for run_id in run_ids:
        if run_id not in found:
            raise missing_run(run_id)
    rows = [
        {"run_id": r.run_id, "step": r.step, "time": r.time, "body": r.model_dump_json()}
        for r in unique.values()
    ]
    if insert_new(conn, dialect, run_metrics, rows) == len(rows):
        return
    for record in unique.values():  # some were stored before: they must be the same
        body = conn.execute(
            sa.select(run_metrics.c.body).where(
                run_metrics.c.run_id == record.run_id,
                run_metrics.c.step == record.step,
                run_metrics.c.time == record.time,
            )
        ).scalar_one()
        stored = RunMetrics.model_validate_json(body)
        if stored != record:
            raise conflicting_metrics(stored)


def _metrics_after(
    conn: Connection, run_id: str, after: tuple[int, float] | int | None, limit: int
) -> list[RunMetrics]:
    """Return up to ``limit`` records past a step, or past a ``(step, time)`` within it."""
    query = sa.select(run_metrics.c.body).where(run_metrics.c.run_id == run_id)
    if isinstance(after, tuple):
        step, time = after
        query = query.where(run_metrics.c.step == step, run_metrics.c.time > time)
    elif after is not None:
        query = query.where(run_metrics.c.step > after)
    query = query.order_by(run_metrics.c.step, run_metrics.c.time).limit(limit)
    return [RunMetrics.model_validate_json(b) for b in conn.execute(query).scalars()]


def query_run_metrics(
    conn: Connection, run_id: str, after_step: int | None, limit: int
) -> Page[RunMetrics]:
    """See ``Store.query_run_metrics``: the rest of a step the limit cut is read as well."""
    get_run(conn, run_id)
    rows = _metrics_after(conn, run_id, after_step, limit + 1)
    if len(rows) > limit and rows[limit].step == rows[limit - 1].step:
        last = rows[limit - 1]
        rest = _metrics_after(conn, run_id, (last.step, last.time), 1_000_000)
        rows = rows[:limit] + rest + _metrics_after(conn, run_id, last.step, 1)
    return page_run_metrics(rows, limit)


def add_model_version(conn: Connection, dialect: SqlDialect, version: ModelVersion) -> ModelVersion:
    """See ``Store.add_model_version``."""
    if (
        conn.execute(
            sa.select(runs.c.run_id).where(runs.c.run_id == version.run_id)
        ).scalar_one_or_none()
        is None
    ):
        raise missing_run(version.run_id)
    stored = version.model_copy(update={"created_at": store_time()})
    row = {"run_id": version.run_id, "version": version.version, "body": stored.model_dump_json()}
    if conn.execute(dialect.insert_or_skip(model_versions), row).rowcount:
        return stored
    body = conn.execute(
        sa.select(model_versions.c.body).where(
            model_versions.c.run_id == version.run_id,
            model_versions.c.version == version.version,
        )
    ).scalar_one()
    existing = ModelVersion.model_validate_json(body)
    if not existing.same_content(version):
        raise conflicting_version(existing)
    return existing


def list_model_versions(conn: Connection, run_id: str | None) -> list[ModelVersion]:
    """See ``Store.list_model_versions``."""
    query = sa.select(model_versions.c.body).order_by(
        model_versions.c.run_id, model_versions.c.version
    )
    if run_id is not None:
        query = query.where(model_versions.c.run_id == run_id)
    return [ModelVersion.model_validate_json(b) for b in conn.execute(query).scalars()]
