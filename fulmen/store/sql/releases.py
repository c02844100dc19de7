"""The release operations of the SQL store, one transaction each (see ``fulmen.store.releases``).

A release is one row whose ``body`` holds the whole record; a decision reads the row locked
(``FOR UPDATE`` on PostgreSQL; SQLite's write transaction is exclusive) and writes it back, so
two gates deciding at once are applied one after the other and the second sees the first.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fulmen.store.releases import decided_release, missing_release, new_release
from fulmen.store.runs import store_time
from fulmen.store.sql.dialects import SqlDialect
from fulmen.store.sql.schema import releases
from fulmen.types.releases import Release, ReleaseCreate, ReleaseDecision

__all__ = ["decide_release", "get_release", "list_releases", "put_release"]


def _locked(conn: Connection, name: str) -> Release | None:
    body = conn.execute(
        sa.select(releases.c.body).where(releases.c.name == name).with_for_update()
    ).scalar_one_or_none()
    return None if body is None else Release.model_validate_json(body)


def put_release(conn: Connection, dialect: SqlDialect, release: ReleaseCreate) -> Release:
    """See ``Store.put_release``."""
    now = store_time()
    created = new_release(release, None, now)
    row = {"name": release.name, "created_at": now, "body": created.model_dump_json()}
    if conn.execute(dialect.insert_or_skip(releases), row).rowcount:
        return created
    stored = _locked(conn, release.name)
    assert stored is not None  # the insert was skipped because the row exists
    return new_release(release, stored, now)


def get_release(conn: Connection, name: str) -> Release:
    """See ``Store.get_release``."""
    body = conn.execute(
        sa.select(releases.c.body).where(releases.c.name == name)
    ).scalar_one_or_none()
    if body is None:
        raise missing_release(name)
    return Release.model_validate_json(body)


def list_releases(conn: Connection) -> list[Release]:
    """See ``Store.list_releases``."""
    bodies = conn.execute(
        sa.select(releases.c.body).order_by(releases.c.created_at.desc(), releases.c.name)
    ).scalars()
    return [Release.model_validate_json(b) for b in bodies]


def decide_release(
    conn: Connection, dialect: SqlDialect, name: str, decision: ReleaseDecision
) -> Release:
    """See ``Store.decide_release``."""
    del dialect
    stored = _locked(conn, name)
    if stored is None:
        raise missing_release(name)
    decided = decided_release(stored, decision, store_time())
    if decided is not stored:
        conn.execute(
            sa.update(releases)
            .where(releases.c.name == name)
            .values(body=decided.model_dump_json())
        )
    return decided
