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

import pytest

from fulmen.agent.api import rollout
from fulmen.agent.runner import Runner
from fulmen.store import Store
from fulmen.tracing import emit_reward, rewards_from_spans
from fulmen.types import AttemptStatus, RolloutConfig, RolloutCreate, RolloutStatus
from tests.agent.conftest import FAST


def stubborn_agent(finished: threading.Semaphore, release: threading.Event) -> Any:
    """An agent whose task says how to misbehave; ``finished`` is released when it returns.

    The misbehaving kinds go on until ``release`` is set (or their ``seconds`` pass), so a test
    lets them return only once it saw their attempt timed out, however slow the machine is.
    """

    @rollout
    async def agent(task: Any) -> float:
        try:
            if task["kind"] == "block":
                release.wait(task["seconds"])  # blocks whatever loop it runs on
                emit_reward({"late": 1.0})
                return 1.0
            if task["kind"] == "swallow":
                until = time.monotonic() + task["seconds"]
                while not release.is_set() and time.monotonic() < until:
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


def _timeout_s(task: dict[str, Any]) -> float:
    # The misbehaving agents are stopped at a short timeout; a well-behaved one (0.1 s of work)
    # gets a long one, so a loaded machine cannot time it out too.
    return 30.0 if task["kind"] == "ok" else 1.0


async def _enqueue(store: Store, *tasks: dict[str, Any]) -> list[str]:
    created = await store.enqueue(
        [
            RolloutCreate(
                input=task, config=RolloutConfig(timeout_s=_timeout_s(task), max_attempts=1)
            )
            for task in tasks
        ]
    )
    return [r.rollout_id for r in created]


async def test_a_blocking_agent_does_not_freeze_the_runner(store: Store) -> None:
    finished, release = threading.Semaphore(0), threading.Event()
    blocked, *normal = await _enqueue(
        store, {"kind": "block", "seconds": 60}, *({"kind": "ok"} for _ in range(6))
    )
    runner = Runner(store, stubborn_agent(finished, release), concurrency=3, **FAST)
    started = time.monotonic()
    try:
        stats = await asyncio.wait_for(runner.run(until_idle=True), 50)
    finally:
        release.set()  # let the abandoned agent's thread end
    # On the runner's own loop the agent held everything for its 60 s.
    assert time.monotonic() - started < 30
    assert stats.succeeded == 6 and stats.timed_out + stats.ended_by_store == 1
    for rollout_id in normal:
        assert (await store.get_rollout(rollout_id)).status is RolloutStatus.SUCCEEDED
    (attempt,) = await store.list_attempts(blocked)
    assert attempt.status is AttemptStatus.TIMEOUT
    assert (await store.get_rollout(blocked)).status is RolloutStatus.FAILED


async def test_a_late_reward_never_changes_a_timed_out_attempt(store: Store) -> None:
    finished, release = threading.Semaphore(0), threading.Event()
    ids = await _enqueue(
        store,
        {"kind": "block", "seconds": 30},
        {"kind": "swallow", "seconds": 30},
        {"kind": "ok"},
    )
    runner = Runner(store, stubborn_agent(finished, release), concurrency=3, **FAST)
    task = asyncio.create_task(runner.run())
    try:
        # Both stubborn attempts end at their timeout while their agents still run: only then
        # are the agents let go, so their reward comes late whatever the machine's load.
        deadline = time.monotonic() + 30
        while runner.stats.timed_out + runner.stats.ended_by_store < 2:
            assert time.monotonic() < deadline, runner.stats
            await asyncio.sleep(0.02)
        release.set()
        for _ in ids:  # every agent returned, the stubborn ones with a reward
            assert await asyncio.to_thread(finished.acquire, True, 30)
        await asyncio.sleep(0.3)  # time for the exporter to send what it was given
        assert runner.stats.timed_out + runner.stats.ended_by_store == 2
    finally:
        release.set()
        runner.stop()
        await asyncio.wait_for(task, 30)
    for rollout_id in ids[:2]:
        (attempt,) = await store.list_attempts(rollout_id)
        assert attempt.status is AttemptStatus.TIMEOUT
        assert (await store.get_rollout(rollout_id)).status is RolloutStatus.FAILED
        spans = (await store.query_spans(rollout_id, limit=10_000)).items
        assert rewards_from_spans(spans) == {}  # the late reward never reached the store
    assert (await store.get_rollout(ids[2])).status is RolloutStatus.SUCCEEDED


async def test_a_cooperative_agent_stopped_at_its_timeout_keeps_its_spans(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fulmen.tracing import operation, semconv

    # A loaded machine may take longer than the 0.4 s grace to run the agent's stop; a long
    # grace still fails this test if the cancellation did not stop the agent (it sleeps 60 s).
    monkeypatch.setattr("fulmen.agent.loop_thread.STOP_GRACE_S", 30.0)
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
    stats = await asyncio.wait_for(Runner(store, agent, **FAST).run(max_rollouts=1), 50)
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
    # The blocking agent holds its thread until the test lets it go (not for a fixed time,
    # which a stalled machine could outlast), so "still blocked" is a fact, not a guess.
    running, release, returned = threading.Event(), threading.Event(), threading.Event()

    async def where() -> tuple[str, int]:
        return threading.current_thread().name, id(asyncio.get_running_loop())

    try:
        runs = [await threads.run(where) for _ in range(20)]
        assert len({name for name, _ in runs}) == 1  # one thread, reused
        assert runs[0][0] != threading.current_thread().name

        async def block() -> None:
            running.set()
            release.wait(30)  # ignores the cancellation: its thread stays busy
            returned.set()

        stuck = asyncio.create_task(threads.run(block))
        assert await asyncio.to_thread(running.wait, 30)  # cancelled while it runs
        stuck.cancel()
        started = time.monotonic()
        with contextlib.suppress(asyncio.CancelledError):
            await stuck
        # abandoned after the grace (STOP_GRACE_S), not awaited: the agent still blocks, and
        # the wait was far shorter than the 30 s it would block for
        assert not returned.is_set()
        assert time.monotonic() - started < 10
        name, _ = await asyncio.wait_for(threads.run(where), 30)
        assert not returned.is_set()  # served meanwhile
        assert name != runs[0][0]  # by another thread: the blocked one was not handed a job
    finally:
        release.set()
        threads.close()
