"""``wait_for_rollouts`` across store objects: notification, fallback poll, no busy polling."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fulmen.store import open_store
from fulmen.store.sql import SqlStore
from fulmen.types import AttemptStatus, RolloutCreate, RolloutStatus


def _count_reads(store: SqlStore) -> list[int]:
    """Count the store's read transactions from now on."""
    runner = store._runner
    original = runner.read
    calls = [0]

    async def counting(op: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return await original(op, *args, **kwargs)

    runner.read = counting  # type: ignore[method-assign]
    return calls


async def test_waiting_does_not_busy_poll(sql_url: str) -> None:
    async with open_store(sql_url, watchdog_interval=None) as store:
        assert isinstance(store, SqlStore)
        (rollout,) = await store.enqueue([RolloutCreate(input=1)])
        reads = _count_reads(store)
        assert await store.wait_for_rollouts([rollout.rollout_id], timeout=1.2) == []
        poll = store.dialect.fallback_poll_s
        # One read up front, then one per fallback poll (SQLite: 0.5 s; PostgreSQL: none).
        assert reads[0] <= 1 + (int(1.2 / poll) + 1 if poll else 1)


async def test_a_change_by_this_store_wakes_its_waiters_at_once(sql_url: str) -> None:
    async with open_store(sql_url, watchdog_interval=None) as store:
        assert isinstance(store, SqlStore)
        (rollout,) = await store.enqueue([RolloutCreate(input=1)])
        (claim,) = await store.claim("w")
        reads = _count_reads(store)
        waiter = asyncio.create_task(store.wait_for_rollouts([rollout.rollout_id], timeout=30))
        await asyncio.sleep(0.05)
        await store.update_attempt(claim.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)
        (done,) = await asyncio.wait_for(waiter, 5)
        assert done.status is RolloutStatus.SUCCEEDED
        assert reads[0] == 2  # the first look and the one after the wake-up: no poll between


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
