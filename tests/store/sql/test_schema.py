"""Schema creation, schema versions, reopening, SQLite pragmas and error translation."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC
from pathlib import Path

import pytest
import sqlalchemy as sa

from fulmen.errors import ConfigError, StoreError, StoreUnavailable
from fulmen.store import open_store
from fulmen.store.sql import SqlStore
from fulmen.store.sql.schema import SCHEMA_VERSION, metadata
from fulmen.types import (
    AttemptStatus,
    ModelKind,
    ModelVersion,
    Page,
    PromptTemplate,
    ResourcesCreate,
    RolloutCreate,
    RolloutStatus,
    Run,
    RunMetrics,
    SpanCreate,
)
from fulmen.types.releases import ArmModel, ReleaseCreate


def _span(rollout_id: str, attempt_id: str, span_id: str) -> SpanCreate:
    return SpanCreate(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        trace_id="ab" * 16,
        span_id=span_id,
        name="step",
        start_time=1.0,
    )


async def test_schema_is_created_with_its_version(sql_url: str) -> None:
    async with open_store(sql_url, watchdog_interval=None) as store:
        assert isinstance(store, SqlStore)

        def inspect(conn: sa.Connection) -> tuple[set[str], int]:
            names = set(sa.inspect(conn).get_table_names())
            version = conn.exec_driver_sql(
                "SELECT value FROM fulmen_meta WHERE key = 'schema_version'"
            ).scalar_one()
            return names, version

        names, version = await store._runner.read(inspect)
    assert set(metadata.tables) <= names
    assert version == SCHEMA_VERSION


async def test_reopening_keeps_data_and_continues_numbering(sql_url: str) -> None:
    async with open_store(sql_url, watchdog_interval=None) as store:
        await store.add_resources(ResourcesCreate(resources={"p": PromptTemplate(template="a")}))
        first = await store.enqueue([RolloutCreate(input=i) for i in range(3)])
        (claim,) = await store.claim("w")
        spans = await store.add_spans(
            [_span(claim.rollout.rollout_id, claim.attempt.attempt_id, f"s{i}") for i in range(2)]
        )
    async with open_store(sql_url, watchdog_interval=None) as store:
        again = await store.enqueue([RolloutCreate(input="x")])
        assert again[0].position == first[-1].position + 1
        assert again[0].resources_version == 1
        more = await store.add_spans(
            [_span(claim.rollout.rollout_id, claim.attempt.attempt_id, "s9")]
        )
        assert more[0].sequence == spans[-1].sequence + 1
        version2 = await store.add_resources(
            ResourcesCreate(resources={"p": PromptTemplate(template="b")})
        )
        assert version2.version == 2
        assert await store.get_rollout(first[1].rollout_id) == first[1]  # never claimed
        stored = await store.get_attempt(claim.attempt.attempt_id)
        assert stored == claim.attempt  # timestamps round-trip to the microsecond
        assert stored.started_at.tzinfo is not None
        assert stored.started_at.utcoffset() == UTC.utcoffset(None)
        await store.update_attempt(claim.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)


async def test_a_newer_schema_version_is_refused(sqlite_path: Path) -> None:
    async with open_store(str(sqlite_path), watchdog_interval=None):
        pass
    with sqlite3.connect(sqlite_path) as conn:
        conn.execute("UPDATE fulmen_meta SET value = ? WHERE key = 'schema_version'", (99,))
    with pytest.raises(ConfigError, match="schema version 99"):
        await SqlStore.connect(str(sqlite_path), watchdog_interval=None)


@pytest.mark.parametrize("form", ["bare", "sqlite", "aiosqlite"])
async def test_sqlite_url_forms_open_the_same_file(sqlite_path: Path, form: str) -> None:
    url = {
        "bare": str(sqlite_path),
        "sqlite": f"sqlite:///{sqlite_path}",
        "aiosqlite": f"sqlite+aiosqlite:///{sqlite_path}",
    }[form]
    async with open_store(url, watchdog_interval=None) as store:
        await store.enqueue([RolloutCreate(input=form, rollout_id="r")])
    assert sqlite_path.exists()
    with sqlite3.connect(sqlite_path) as conn:
        assert conn.execute("SELECT count(*) FROM fulmen_rollouts").fetchone() == (1,)


async def test_sqlite_uses_wal_normal_sync_and_foreign_keys(sqlite_path: Path) -> None:
    async with open_store(str(sqlite_path), watchdog_interval=None) as store:

        def pragmas(conn: sa.Connection) -> dict[str, int | str]:
            names = ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
            return {n: conn.exec_driver_sql(f"PRAGMA {n}").scalar_one() for n in names}

        found = await store._runner.write(pragmas)
    # synchronous=1 is NORMAL: a commit survives a killed process (the OS has the WAL pages).
    # The writer never waits inside SQLite (busy_timeout 0): the store waits in asyncio.
    assert found == {"journal_mode": "wal", "synchronous": 1, "foreign_keys": 1, "busy_timeout": 0}


async def test_a_writer_of_another_process_is_waited_for_without_blocking(
    sqlite_path: Path,
) -> None:
    async with open_store(str(sqlite_path), watchdog_interval=None, busy_timeout_s=30) as store:
        other = sqlite3.connect(sqlite_path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        write = asyncio.create_task(store.enqueue([RolloutCreate(input=1)]))
        await asyncio.sleep(0.3)
        assert not write.done()
        other.execute("COMMIT")
        other.close()
        (rollout,) = await asyncio.wait_for(write, 10)
        ticker.cancel()
        assert rollout.position == 1
        assert ticks >= 10  # the event loop kept running while the store waited


async def test_a_writer_that_holds_the_lock_too_long_makes_the_store_unavailable(
    sqlite_path: Path,
) -> None:
    async with open_store(str(sqlite_path), watchdog_interval=None, busy_timeout_s=0.2) as store:
        other = sqlite3.connect(sqlite_path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreUnavailable, match="locked"):
                await store.enqueue([RolloutCreate(input=1)])
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert len(await store.enqueue([RolloutCreate(input=1)])) == 1


async def test_missing_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        await SqlStore.connect(str(tmp_path / "nope" / "store.db"))


async def test_a_file_that_is_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError) as info:
        await SqlStore.connect(str(path), watchdog_interval=None)
    assert isinstance(info.value.__cause__, sa.exc.DatabaseError | sqlite3.DatabaseError)


async def test_unreachable_postgresql_is_unavailable() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(StoreUnavailable, match="cannot connect"):
        await SqlStore.connect(f"postgresql://postgres@127.0.0.1:{port}/x")


async def test_unsupported_urls_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="driver"):
        await SqlStore.connect("postgresql+psycopg2://u@127.0.0.1/db")
    with pytest.raises(ConfigError, match="not a SQL store URL"):
        await SqlStore.connect("mysql://u@127.0.0.1/db")


async def test_options_of_other_backends_are_refused(sqlite_path: Path) -> None:
    with pytest.raises(ConfigError, match="token"):
        await SqlStore.connect(str(sqlite_path), token="secret")


async def test_closed_store_refuses_work(sql_url: str) -> None:
    store = await SqlStore.connect(sql_url, watchdog_interval=None)
    await store.aclose()
    await store.aclose()  # closing twice is harmless
    with pytest.raises(StoreError, match="closed"):
        await store.enqueue([RolloutCreate(input=1)])


async def test_a_dropped_postgresql_connection_is_unavailable_then_recovers(sql_url: str) -> None:
    if not sql_url.startswith("postgresql"):
        pytest.skip("server-side connection kill is a PostgreSQL scenario")
    import asyncpg

    async with open_store(sql_url, watchdog_interval=None) as store:
        await store.enqueue([RolloutCreate(input=1)])
        database = sql_url.rsplit("/", 1)[1]
        admin = await asyncpg.connect(sql_url.rsplit("/", 1)[0] + "/postgres")
        try:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
                database,
            )
        finally:
            await admin.close()
        with pytest.raises(StoreUnavailable):
            await store.enqueue([RolloutCreate(input=2)])
        assert len(await store.enqueue([RolloutCreate(input=3)])) == 1
        assert (await store.stats()).rollouts[RolloutStatus.QUEUING] == 2


async def test_a_version_1_store_is_migrated_and_its_calls_can_be_rewarded(sql_url: str) -> None:
    """A database written before rewards existed opens, and its old calls are found by id."""
    from fulmen.types import LLMCallCreate, RewardCreate

    async with open_store(sql_url, watchdog_interval=None) as store:
        await store.enqueue([RolloutCreate(input=1, rollout_id="old")])
        (claim,) = await store.claim("w")
        await store.add_llm_calls(
            [
                LLMCallCreate(
                    call_id="c1",
                    rollout_id="old",
                    attempt_id=claim.attempt.attempt_id,
                    response_id="chatcmpl-old",
                    started_at=1.0,
                )
            ]
        )
        await store.update_attempt(claim.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)

        def back_to_version_1(conn: sa.Connection) -> None:
            conn.exec_driver_sql("DROP INDEX ix_fulmen_llm_calls_response_id")
            conn.exec_driver_sql("ALTER TABLE fulmen_llm_calls DROP COLUMN response_id")
            conn.exec_driver_sql("DROP TABLE fulmen_rewards")
            _drop_version_3_tables(conn)
            conn.exec_driver_sql("UPDATE fulmen_meta SET value = 1 WHERE key = 'schema_version'")

        await store._runner.write(back_to_version_1)
    async with open_store(sql_url, watchdog_interval=None) as store:
        reward = await store.add_reward(RewardCreate.scalar(1.0, response_id="chatcmpl-old"))
        assert (reward.rollout_id, reward.attempt_id) == ("old", claim.attempt.attempt_id)

        def version(conn: sa.Connection) -> int:
            return conn.exec_driver_sql(
                "SELECT value FROM fulmen_meta WHERE key = 'schema_version'"
            ).scalar_one()

        assert await store._runner.read(version) == SCHEMA_VERSION == 4
        assert await store.list_runs() == Page(items=[])


def _drop_version_3_tables(conn: sa.Connection) -> None:
    for table in ("fulmen_releases", "fulmen_model_versions", "fulmen_run_metrics", "fulmen_runs"):
        conn.exec_driver_sql(f"DROP TABLE {table}")


async def test_a_version_2_store_is_migrated_and_keeps_its_rollouts(sql_url: str) -> None:
    """A database written before runs existed opens, keeps its data and records runs."""
    async with open_store(sql_url, watchdog_interval=None) as store:
        (old,) = await store.enqueue([RolloutCreate(input=1, rollout_id="old")])

        def back_to_version_2(conn: sa.Connection) -> None:
            _drop_version_3_tables(conn)
            conn.exec_driver_sql("UPDATE fulmen_meta SET value = 2 WHERE key = 'schema_version'")

        await store._runner.write(back_to_version_2)
    async with open_store(sql_url, watchdog_interval=None) as store:
        assert await store.get_rollout("old") == old
        run = await store.start_run(Run(run_id="r", name="r", started_at=1.0))
        await store.add_run_metrics([RunMetrics(run_id="r", step=1, time=2.0, values={"x": 1})])
        await store.add_model_version(
            ModelVersion(run_id="r", version=1, step=1, kind=ModelKind.ADAPTER, path="a")
        )
        assert await store.get_run("r") == run
        assert len(await store.list_model_versions("r")) == 1

        def version(conn: sa.Connection) -> int:
            return conn.exec_driver_sql(
                "SELECT value FROM fulmen_meta WHERE key = 'schema_version'"
            ).scalar_one()

        assert await store._runner.read(version) == SCHEMA_VERSION


async def test_a_version_3_store_is_migrated_and_keeps_its_runs(sql_url: str) -> None:
    """A database written before releases existed opens, keeps its runs and stores releases."""
    async with open_store(sql_url, watchdog_interval=None) as store:
        run = await store.start_run(Run(run_id="r", name="r", started_at=1.0))

        def back_to_version_3(conn: sa.Connection) -> None:
            conn.exec_driver_sql("DROP TABLE fulmen_releases")
            conn.exec_driver_sql("UPDATE fulmen_meta SET value = 3 WHERE key = 'schema_version'")

        await store._runner.write(back_to_version_3)
    async with open_store(sql_url, watchdog_interval=None) as store:
        assert await store.get_run("r") == run
        release = ReleaseCreate(
            name="rel", incumbent=ArmModel(model="a"), candidate=ArmModel(model="b"), share=0.1
        )
        assert (await store.put_release(release)).revision == 1

        def version(conn: sa.Connection) -> int:
            return conn.exec_driver_sql(
                "SELECT value FROM fulmen_meta WHERE key = 'schema_version'"
            ).scalar_one()

        assert await store._runner.read(version) == SCHEMA_VERSION == 4
