"""Timeouts that hold for async agents that block their loop or swallow cancellation.

The runner runs each async attempt in a thread with its own event loop: an agent that blocks
(``time.sleep`` inside ``async def``) or catches ``CancelledError`` and goes on is abandoned at
its timeout, the runner keeps serving other rollouts meanwhile, and what the agent returns or
emits afterwards (a late reward) never reaches the timed-out attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

from fulmen.agent.api import rollout
from fulmen.agent.runner import Runner
from fulmen.store import Store
from fulmen.tracing import emit_reward, rewards_from_spans
from fulmen.types import AttemptStatus, RolloutConfig, RolloutCreate, RolloutStatus
from tests.agent.conftest import FAST


def stubborn_agent(finished: threading.Semaphore) -> Any:
    """An agent whose task says how to misbehave; ``finished`` is released when it returns."""

    @rollout
    async def agent(task: Any) -> float:
        try:
            if task["kind"] == "block":
                time.sleep(task["seconds"])  # blocks whatever loop it runs on
                emit_reward({"late": 1.0})
                return 1.0
            if task["kind"] == "swallow":
                until = time.monotonic() + task["seconds"]
                while time.monotonic() < until:
                    try:
                        await asyncio.sleep(0.05)
                    except asyncio.CancelledError:
                        continue  # ignores every cancellation
                emit_reward({"late": 1.0})
                return 1.0
            await asyncio.sleep(0.1)
            return 0.5
        finally:
            finished.release()

    return agent


async def _enqueue(store: Store, *tasks: dict[str, Any]) -> list[str]:
    created = await store.enqueue(
        [
            RolloutCreate(input=task, config=RolloutConfig(timeout_s=1.0, max_attempts=1))
            for task in tasks
        ]
    )
    return [r.rollout_id for r in created]


async def test_a_blocking_agent_does_not_freeze_the_runner(store: Store) -> None:
    finished = threading.Semaphore(0)
    blocked, *normal = await _enqueue(
        store, {"kind": "block", "seconds": 60}, *({"kind": "ok"} for _ in range(6))
    )
    runner = Runner(store, stubborn_agent(finished), concurrency=3, **FAST)
    started = time.monotonic()
    stats = await asyncio.wait_for(runner.run(until_idle=True), 50)
    # On the runner's own loop the agent held everything for its 60 s.
    assert time.monotonic() - started < 30
    assert stats.succeeded == 6 and stats.timed_out + stats.ended_by_store == 1
    for rollout_id in normal:
        assert (await store.get_rollout(rollout_id)).status is RolloutStatus.SUCCEEDED
    (attempt,) = await store.list_attempts(blocked)
    assert attempt.status is AttemptStatus.TIMEOUT
    assert (await store.get_rollout(blocked)).status is RolloutStatus.FAILED


async def test_a_late_reward_never_changes_a_timed_out_attempt(store: Store) -> None:
    finished = threading.Semaphore(0)
    ids = await _enqueue(
        store,
        {"kind": "block", "seconds": 2.5},
        {"kind": "swallow", "seconds": 2.5},
        {"kind": "ok"},
    )
    runner = Runner(store, stubborn_agent(finished), concurrency=3, **FAST)
    task = asyncio.create_task(runner.run())
    try:
        for _ in ids:  # every agent returned, the stubborn ones with a reward
            assert await asyncio.to_thread(finished.acquire, True, 20)
        await asyncio.sleep(0.3)  # time for the exporter to send what it was given
        assert runner.stats.timed_out + runner.stats.ended_by_store == 2
    finally:
        runner.stop()
        await asyncio.wait_for(task, 30)
    for rollout_id in ids[:2]:
        (attempt,) = await store.list_attempts(rollout_id)
        assert attempt.status is AttemptStatus.TIMEOUT
        assert (await store.get_rollout(rollout_id)).status is RolloutStatus.FAILED
        spans = (await store.query_spans(rollout_id, limit=10_000)).items
        assert rewards_from_spans(spans) == {}  # the late reward never reached the store
    assert (await store.get_rollout(ids[2])).status is RolloutStatus.SUCCEEDED


async def test_a_cooperative_agent_stopped_at_its_timeout_keeps_its_spans(store: Store) -> None:
    from fulmen.tracing import operation, semconv

    finished = threading.Semaphore(0)

    @rollout
    async def agent(task: Any) -> float:
        try:
            with operation("waiting"):
                await asyncio.sleep(60)
            return 1.0
        finally:
            finished.release()

    (rollout_id,) = await _enqueue(store, {"kind": "cooperative"})
    stats = await asyncio.wait_for(Runner(store, agent, **FAST).run(max_rollouts=1), 30)
    assert stats.timed_out + stats.ended_by_store == 1
    assert finished.acquire(timeout=0)  # it had stopped before the runner moved on
    spans = (await store.query_spans(rollout_id, limit=100)).items
    # the spans it ended while stopping are stored: its work and its root, marked cancelled
    assert sorted(s.name for s in spans) == sorted([semconv.SPAN_ROLLOUT, "waiting"])
    root = next(s for s in spans if s.name == semconv.SPAN_ROLLOUT)
    assert root.status.message == "cancelled"
    assert rewards_from_spans(spans) == {}


async def test_loop_threads_are_reused_but_never_while_an_abandoned_agent_holds_one() -> None:
    from fulmen.agent.loop_thread import LoopThreads

    threads = LoopThreads()

    async def where() -> tuple[str, int]:
        return threading.current_thread().name, id(asyncio.get_running_loop())

    try:
        runs = [await threads.run(where) for _ in range(20)]
        assert len({name for name, _ in runs}) == 1  # one thread, reused
        assert runs[0][0] != threading.current_thread().name

        async def block() -> None:
            time.sleep(1.5)  # ignores the cancellation: its thread stays busy

        stuck = asyncio.create_task(threads.run(block))
        await asyncio.sleep(0.1)
        stuck.cancel()
        started = time.monotonic()
        with contextlib.suppress(asyncio.CancelledError):
            await stuck
        assert time.monotonic() - started < 1.0  # abandoned after the grace, not awaited
        name, _ = await asyncio.wait_for(threads.run(where), 1.0)  # served meanwhile
        assert time.monotonic() - started < 1.2
        assert name != runs[0][0]  # by another thread: the blocked one was not handed a job
    finally:
        threads.close()
