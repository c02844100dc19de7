"""``wait_for_rollouts`` across store objects: notification, fallback poll, no busy polling."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest

from fulmen.store import open_store
from fulmen.store.sql import SqlStore, dialects, wakeups
from fulmen.types import AttemptStatus, RolloutCreate, RolloutStatus


@dataclasses.dataclass
class _Reads:
    """The store's read transactions since counting began; ``returned`` is set as each ends."""

    count: int = 0
    returned: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


def _count_reads(store: SqlStore) -> _Reads:
    """Count the store's read transactions from now on."""
    runner = store._runner
    original = runner.read
    reads = _Reads()

    async def counting(op: Any, *args: Any, **kwargs: Any) -> Any:
        reads.count += 1
        try:
            return await original(op, *args, **kwargs)
        finally:
            reads.returned.set()

    runner.read = counting  # type: ignore[method-assign]
    return reads


async def test_waiting_does_not_busy_poll(sql_url: str) -> None:
    async with open_store(sql_url, watchdog_interval=None) as store:
        assert isinstance(store, SqlStore)
        (rollout,) = await store.enqueue([RolloutCreate(input=1)])
        reads = _count_reads(store)
        assert await store.wait_for_rollouts([rollout.rollout_id], timeout=1.2) == []
        poll = store.dialect.fallback_poll_s
        # One read up front, then one per fallback poll (SQLite: 0.5 s; PostgreSQL: none).
        assert reads.count <= 1 + (int(1.2 / poll) + 1 if poll else 1)


async def test_a_change_by_this_store_wakes_its_waiters_at_once(
    sql_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No poll may fire during the test, however slow the machine: a second read can then come
    # only from the wake-up (SQLite normally polls every 0.5 s; PostgreSQL when not listening).
    no_poll_s = 3600.0
    monkeypatch.setattr(
        dialects, "SQLITE", dataclasses.replace(dialects.SQLITE, fallback_poll_s=no_poll_s)
    )
    monkeypatch.setattr(wakeups, "_POLL_WHILE_NOT_LISTENING_S", no_poll_s)
    async with open_store(sql_url, watchdog_interval=None) as store:
        assert isinstance(store, SqlStore)
        assert store.dialect.fallback_poll_s in (no_poll_s, None)
        (rollout,) = await store.enqueue([RolloutCreate(input=1)])
        (claim,) = await store.claim("w")
        reads = _count_reads(store)
        waiter = asyncio.create_task(store.wait_for_rollouts([rollout.rollout_id], timeout=60))
        # Change the rollout only after the waiter's first read (on PostgreSQL the waiter first
        # connects to LISTEN, which may take a while): that read saw it running.
        await asyncio.wait_for(reads.returned.wait(), 30)
        await store.update_attempt(claim.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)
        # Without the wake-up the waiter would sleep its whole 60 s timeout.
        (done,) = await asyncio.wait_for(waiter, 30)
        assert done.status is RolloutStatus.SUCCEEDED
        assert reads.count == 2  # the first look and the one after the wake-up: no poll between


async def test_a_change_by_another_store_wakes_waiters(sql_url: str) -> None:
    # PostgreSQL wakes through LISTEN/NOTIFY; SQLite through its 0.5 s fallback poll.
    async with (
        open_store(sql_url, watchdog_interval=None) as waiting,
        open_store(sql_url, watchdog_interval=None) as other,
    ):
        assert isinstance(waiting, SqlStore)
        (rollout,) = await other.enqueue([RolloutCreate(input=1)])
        waiter = asyncio.create_task(waiting.wait_for_rollouts([rollout.rollout_id], timeout=60))
        await asyncio.sleep(0.3)
        started = time.monotonic()
        await other.update_rollout(rollout.rollout_id, status=RolloutStatus.CANCELLED)
        (done,) = await asyncio.wait_for(waiter, 30)
        assert done.status is RolloutStatus.CANCELLED
        # Far below the 60 s timeout: a missed notification would wait all of it.
        assert time.monotonic() - started < 10


async def test_postgresql_waiters_listen_again_after_losing_the_connection(sql_url: str) -> None:
    if not sql_url.startswith("postgresql"):
        return
    async with (
        open_store(sql_url, watchdog_interval=None) as waiting,
        open_store(sql_url, watchdog_interval=None) as other,
    ):
        assert isinstance(waiting, SqlStore)
        first, second = await other.enqueue([RolloutCreate(input=1), RolloutCreate(input=2)])
        await other.update_rollout(first.rollout_id, status=RolloutStatus.CANCELLED)
        await waiting.wait_for_rollouts([first.rollout_id], timeout=5)  # starts the listener
        assert waiting._wakeups.is_listening
        import asyncpg

        admin = await asyncpg.connect(sql_url)
        try:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN%' AND pid <> pg_backend_pid()"
            )
        finally:
            await admin.close()
        for _ in range(100):  # asyncpg reports the loss from its connection's reader task
            if not waiting._wakeups.is_listening:
                break
            await asyncio.sleep(0.02)
        assert not waiting._wakeups.is_listening
        waiter = asyncio.create_task(waiting.wait_for_rollouts([second.rollout_id], timeout=60))
        await asyncio.sleep(0.3)
        assert waiting._wakeups.is_listening
        await other.update_rollout(second.rollout_id, status=RolloutStatus.CANCELLED)
        (done,) = await asyncio.wait_for(waiter, 30)
        assert done.status is RolloutStatus.CANCELLED
