"""The SQL schema of the store: one set of SQLAlchemy Core tables for SQLite and PostgreSQL.

Queryable fields are columns; free-form JSON (task input, config, metadata, span and call
bodies) is stored as JSON text, because both dialects read and write text at C speed and the
store never filters on it. Spans and LLM calls keep their whole stored record (sequence
included) in ``body``, so reading one back is a single ``model_validate_json``.

``fulmen_meta`` holds integer counters and the schema version. Version 2 added the rewards
table and the ``response_id`` column of LLM calls (a reward may name a call by it); version 3
added training runs, their metrics and model versions; version 4 added releases. An older
database is migrated in place when it is opened (``ensure_schema``). Counters are rows that
writers update inside their transaction, which both numbers rollouts/resources without gaps
and, on PostgreSQL, serializes the writers that need the next number (the row lock lasts
until commit, so numbers become visible in order).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect

from fulmen.errors import ConfigError

__all__ = [
    "POSITION_COUNTER",
    "RESOURCES_COUNTER",
    "SCHEMA_VERSION",
    "SCHEMA_VERSION_KEY",
    "UtcDateTime",
    "attempts",
    "claims",
    "ensure_schema",
    "llm_calls",
    "meta",
    "metadata",
    "model_versions",
    "releases",
    "resources",
    "rewards",
    "rollouts",
    "run_metrics",
    "runs",
    "spans",
    "workers",
]

SCHEMA_VERSION: Final = 4
SCHEMA_VERSION_KEY: Final = "schema_version"
POSITION_COUNTER: Final = "rollout_position"
RESOURCES_COUNTER: Final = "resources_version"


class UtcDateTime(sa.TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every dialect.

    PostgreSQL stores ``timestamptz``; SQLite has no time zones, so the value is stored as UTC
    text and the zone is put back on read. Microseconds survive the round trip on both.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Refuse naive datetimes and convert aware ones to UTC."""
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} given to the store; use an aware UTC one")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        """Return an aware UTC datetime."""
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


metadata = sa.MetaData()

meta = sa.Table(
    "fulmen_meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
)

rollouts = sa.Table(
    "fulmen_rollouts",
    metadata,
    sa.Column("rollout_id", sa.String(128), primary_key=True),
    sa.Column("position", sa.BigInteger, nullable=False, unique=True),
    sa.Column("input_json", sa.Text, nullable=False),
    sa.Column("mode", sa.String(16), nullable=False),
    sa.Column("task_id", sa.String(256)),
    sa.Column("resources_version", sa.Integer),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("config_json", sa.Text, nullable=False),
    sa.Column("metadata_json", sa.Text, nullable=False),
    sa.Column("attempt_count", sa.Integer, nullable=False, default=0),
    sa.Column("error", sa.Text),
    sa.Column("enqueued_at", UtcDateTime, nullable=False),
    sa.Column("started_at", UtcDateTime),
    sa.Column("ended_at", UtcDateTime),
    # The last sequence number given to a span or call of this rollout; updated in the same
    # transaction that inserts them, so numbers strictly increase in commit order.
    sa.Column("last_sequence", sa.BigInteger, nullable=False, default=0),
    sa.Index("ix_fulmen_rollouts_status_position", "status", "position"),
)

attempts = sa.Table(
    "fulmen_attempts",
    metadata,
    sa.Column("attempt_id", sa.String(128), primary_key=True),
    sa.Column("rollout_id", sa.String(128), sa.ForeignKey(rollouts.c.rollout_id), nullable=False),
    sa.Column("number", sa.Integer, nullable=False),
    sa.Column("worker_id", sa.String(256), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("started_at", UtcDateTime, nullable=False),
    sa.Column("ended_at", UtcDateTime),
    sa.Column("last_heartbeat_at", UtcDateTime, nullable=False),
    sa.Column("late_status", sa.String(16)),
    sa.Column("late_error", sa.Text),
    sa.UniqueConstraint("rollout_id", "number", name="uq_fulmen_attempts_rollout_number"),
    sa.Index("ix_fulmen_attempts_status", "status"),
)

claims = sa.Table(
    "fulmen_claims",
    metadata,
    sa.Column("claim_id", sa.String(256), primary_key=True),
    sa.Column("worker_id", sa.String(256), nullable=False),
    # JSON list of [rollout_id, attempt_id] pairs, in claim order; may be empty.
    sa.Column("claimed_json", sa.Text, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
)

spans = sa.Table(
    "fulmen_spans",
    metadata,
    sa.Column("attempt_id", sa.String(128), sa.ForeignKey(attempts.c.attempt_id)),
    sa.Column("span_id", sa.String(64)),
    sa.Column("rollout_id", sa.String(128), sa.ForeignKey(rollouts.c.rollout_id), nullable=False),
    sa.Column("sequence", sa.BigInteger, nullable=False),
    sa.Column("trace_id", sa.String(64), nullable=False),
    sa.Column("parent_id", sa.String(64)),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("start_time", sa.Double, nullable=False),
    sa.Column("end_time", sa.Double),
    sa.Column("body", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("attempt_id", "span_id", name="pk_fulmen_spans"),
    sa.Index("ix_fulmen_spans_rollout_sequence", "rollout_id", "sequence", unique=True),
)

llm_calls = sa.Table(
    "fulmen_llm_calls",
    metadata,
    sa.Column("call_id", sa.String(128), primary_key=True),
    sa.Column("rollout_id", sa.String(128), sa.ForeignKey(rollouts.c.rollout_id)),
    sa.Column("attempt_id", sa.String(128), sa.ForeignKey(attempts.c.attempt_id)),
    # 0 for untracked calls (no rollout); NULL rollout ids never collide in the unique index.
    sa.Column("sequence", sa.BigInteger, nullable=False),
    sa.Column("model", sa.Text),
    sa.Column("started_at", sa.Double, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    # The response's id when it is a valid ``Id`` (what a reward can name), else NULL.
    sa.Column("response_id", sa.String(128)),
    sa.Index("ix_fulmen_llm_calls_rollout_sequence", "rollout_id", "sequence", unique=True),
)
_CALLS_BY_RESPONSE = sa.Index("ix_fulmen_llm_calls_response_id", llm_calls.c.response_id)

rewards = sa.Table(
    "fulmen_rewards",
    metadata,
    sa.Column("key", sa.String(128), primary_key=True),
    sa.Column("rollout_id", sa.String(128), sa.ForeignKey(rollouts.c.rollout_id), nullable=False),
    # NULL for a reward given to the rollout as a whole; no foreign key, so pruning deletes
    # rewards and attempts in either order.
    sa.Column("attempt_id", sa.String(128)),
    sa.Column("sequence", sa.BigInteger, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Index("ix_fulmen_rewards_rollout_sequence", "rollout_id", "sequence"),
)

resources = sa.Table(
    "fulmen_resources",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("resources_id", sa.String(128), nullable=False, unique=True),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
)

workers = sa.Table(
    "fulmen_workers",
    metadata,
    sa.Column("worker_id", sa.String(256), primary_key=True),
    sa.Column("last_heartbeat_at", UtcDateTime, nullable=False),
    sa.Column("running_json", sa.Text, nullable=False),
    sa.Column("metadata_json", sa.Text, nullable=False),
)


# Runs keep their whole record in ``body``; the columns are what listing sorts and joins on.
runs = sa.Table(
    "fulmen_runs",
    metadata,
    sa.Column("run_id", sa.String(128), primary_key=True),
    sa.Column("started_at", sa.Double, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Index("ix_fulmen_runs_started_at", "started_at"),
)

run_metrics = sa.Table(
    "fulmen_run_metrics",
    metadata,
    sa.Column("run_id", sa.String(128), sa.ForeignKey(runs.c.run_id), nullable=False),
    sa.Column("step", sa.BigInteger, nullable=False),
    sa.Column("time", sa.Double, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    # The key a retried post is recognised by; also the order pages are read in.
    sa.PrimaryKeyConstraint("run_id", "step", "time", name="pk_fulmen_run_metrics"),
)

model_versions = sa.Table(
    "fulmen_model_versions",
    metadata,
    sa.Column("run_id", sa.String(128), sa.ForeignKey(runs.c.run_id), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("run_id", "version", name="pk_fulmen_model_versions"),
)

# Releases keep their whole record (events included) in ``body``; a decision rewrites it.
releases = sa.Table(
    "fulmen_releases",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
)


def ensure_schema(conn: Connection) -> None:
    """Create missing tables and counters, and refuse a database written by a newer fulmen.

    Runs inside the caller's transaction (which the dialect makes exclusive), so two processes
    opening a new database at once do not both create it.
    """
    metadata.create_all(conn, checkfirst=True)
    found = conn.execute(
        sa.select(meta.c.value).where(meta.c.key == SCHEMA_VERSION_KEY)
    ).scalar_one_or_none()
    if found is None:
        conn.execute(
            sa.insert(meta),
            [
                {"key": SCHEMA_VERSION_KEY, "value": SCHEMA_VERSION},
                {"key": POSITION_COUNTER, "value": 0},
                {"key": RESOURCES_COUNTER, "value": 0},
            ],
        )
    elif found > SCHEMA_VERSION:
        raise ConfigError(
            f"the database has store schema version {found}, newer than the {SCHEMA_VERSION} "
            "this fulmen understands; upgrade fulmen to open it",
            detail={"found": found, "supported": SCHEMA_VERSION},
        )
    elif found < 1:
        raise ConfigError(
            f"the database has store schema version {found}, older than any fulmen wrote, "
            "and no migration exists for it",
            detail={"found": found, "supported": SCHEMA_VERSION},
        )
    else:
        if found == 1:
            _migrate_1_to_2(conn)
        if found < SCHEMA_VERSION:
            # Versions 3 and 4 only added tables, which ``create_all`` has just made.
            _set_version(conn, SCHEMA_VERSION)


def _set_version(conn: Connection, version: int) -> None:
    conn.execute(sa.update(meta).where(meta.c.key == SCHEMA_VERSION_KEY).values(value=version))


def _migrate_1_to_2(conn: Connection) -> None:
    """Add ``llm_calls.response_id`` (filled from the stored bodies) and its index.

    ``create_all`` has already added the rewards table. Only response ids a reward could name
    are copied: at most 128 characters and no NUL (PostgreSQL's ``->>`` refuses an escaped NUL).
    """
    conn.exec_driver_sql("ALTER TABLE fulmen_llm_calls ADD COLUMN response_id VARCHAR(128)")
    if conn.dialect.name == "sqlite":
        value = "json_extract(body, '$.response_id')"
    else:
        value = "(body::json ->> 'response_id')"
    conn.exec_driver_sql(
        f"UPDATE fulmen_llm_calls SET response_id = {value} "
        f"WHERE body NOT LIKE '%\\u0000%' AND length({value}) <= 128"
    )
    _CALLS_BY_RESPONSE.create(conn)
    _set_version(conn, 2)
