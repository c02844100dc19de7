"""The runner against a real in-process store: rewards, failures, timeouts, shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fulmen.agent.api import rollout
from fulmen.agent.runner import Runner
from fulmen.errors import ConfigError
from fulmen.store import Store
from fulmen.tracing import emit_reward, primary_reward, rewards_from_spans, semconv
from fulmen.types import AttemptStatus, Mode, RolloutConfig, RolloutCreate, RolloutStatus, Span
from tests.agent.conftest import FAST


async def spans_of(store: Store, rollout_id: str, attempt_id: str | None = None) -> list[Span]:
    return (await store.query_spans(rollout_id, attempt_id=attempt_id, limit=10_000)).items


async def enqueue(store: Store, n: int, **config: Any) -> list[str]:
    rollouts = await store.enqueue(
        [RolloutCreate(input={"x": i}, config=RolloutConfig(**config)) for i in range(n)]
    )
    return [r.rollout_id for r in rollouts]


async def test_many_async_rollouts_with_returned_and_emitted_rewards(store: Store) -> None:
    ids = await enqueue(store, 40)

    @rollout
    async def agent(task: Any, llm: Any) -> float:
        emit_reward({"format": 1.0}, primary="format")
        await asyncio.sleep(0.01 * (task["x"] % 3))
        assert "/rollout/" in llm.base_url
        return float(task["x"])

    runner = Runner(store, agent, concurrency=8, gateway_url="http://gw", **FAST)
    stats = await runner.run(until_idle=True)
    assert (stats.claimed, stats.succeeded, stats.failed) == (40, 40, 0)
    for x, rollout_id in enumerate(ids):
        assert (await store.get_rollout(rollout_id)).status is RolloutStatus.SUCCEEDED
        spans = await spans_of(store, rollout_id)
        # the return value is emitted after emit_reward, so it is primary
        assert rewards_from_spans(spans) == {"format": 1.0, "reward": float(x)}
        assert primary_reward(spans) == float(x)
        assert spans[-1].name == semconv.SPAN_ROLLOUT  # the root ends last: every span stored


async def test_sync_agent_in_worker_process(store: Store) -> None:
    from tests.agent.sample_agents import sync_reward

    ids = await enqueue(store, 4)
    runner = Runner(store, sync_reward, concurrency=2, gateway_url="http://gw", **FAST)
    stats = await runner.run(until_idle=True)
    assert stats.succeeded == 4
    pids = set()
    for x, rollout_id in enumerate(ids):
        spans = await spans_of(store, rollout_id)
        assert rewards_from_spans(spans) == {"format": 0.5, "reward": float(x), "attempt": 1.0}
        observation = next(s for s in spans if s.name == semconv.SPAN_OBSERVATION)
        assert observation.attributes[semconv.AGENT_NAME] == "solver"
        content = str(observation.attributes[semconv.OBSERVATION_CONTENT])
        assert f"/rollout/{rollout_id}/attempt/" in content
        pids.add(content.split('"pid": ')[1].rstrip("}"))
    assert str(os.getpid()) not in pids and 1 <= len(pids) <= 2  # ran in reused workers


async def test_agent_class_from_import_path_with_setup(store: Store) -> None:
    train = await enqueue(store, 1)
    (val,) = await store.enqueue([RolloutCreate(input={"x": 1}, mode=Mode.VAL)])
    runner = Runner(store, "tests.agent.sample_agents:two_modes", **FAST)
    await runner.run(until_idle=True)
    assert primary_reward(await spans_of(store, train[0])) == 10.0
    assert primary_reward(await spans_of(store, val.rollout_id)) == -11.0


@pytest.mark.parametrize("where", ["async", "thread", "process"])
async def test_exception_fails_the_attempt_with_traceback(store: Store, where: str) -> None:
    from tests.agent.sample_agents import sync_raise

    (rollout_id,) = await enqueue(
        store, 1, max_attempts=2, retry_on=frozenset({AttemptStatus.FAILED})
    )

    async def async_raise(task: Any) -> None:
        raise ValueError(f"boom-{task['x']}")

    agent: Any = {"async": async_raise, "thread": sync_raise, "process": sync_raise}[where]
    isolation = "thread" if where == "thread" else "process"
    runner = Runner(store, agent, sync_isolation=isolation, **FAST)
    stats = await runner.run(until_idle=True)
    assert stats.failed == 2  # retried once per retry_on, then failed
    rollout_ = await store.get_rollout(rollout_id)
    assert rollout_.status is RolloutStatus.FAILED
    attempts = await store.list_attempts(rollout_id)
    assert [a.status for a in attempts] == [AttemptStatus.FAILED, AttemptStatus.FAILED]
    for attempt in attempts:
        assert attempt.error is not None
        assert "Traceback" in attempt.error and "ValueError: boom-0" in attempt.error
        assert ("sync_raise" if where != "async" else "async_raise") in attempt.error
    root = [s for s in await spans_of(store, rollout_id) if s.name == semconv.SPAN_ROLLOUT]
    assert len(root) == 2 and all(s.status.code.value == "error" for s in root)


async def test_async_agent_past_timeout_is_cancelled_and_retried(store: Store) -> None:
    (rollout_id,) = await enqueue(store, 1, timeout_s=0.3, max_attempts=2)
    cancelled: list[int] = []

    @rollout
    async def agent(task: Any, context: Any) -> float:
        if context.attempt.number == 1:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(context.attempt.number)
                raise
        return 1.0

    stats = await Runner(store, agent, **FAST).run(max_rollouts=2)
    # the runner's timer or the store's watchdog (seen in a heartbeat) stops it, whichever is first
    assert cancelled == [1] and stats.timed_out + stats.ended_by_store == 1
    assert stats.succeeded == 1
    attempts = await store.list_attempts(rollout_id)
    assert [a.status for a in attempts] == [AttemptStatus.TIMEOUT, AttemptStatus.SUCCEEDED]
    assert (await store.get_rollout(rollout_id)).status is RolloutStatus.SUCCEEDED
    # the first attempt left its spans but no reward: nothing is double-counted
    assert rewards_from_spans(await spans_of(store, rollout_id, attempts[0].attempt_id)) == {}
    assert rewards_from_spans(await spans_of(store, rollout_id, attempts[1].attempt_id)) == {
        "reward": 1.0
    }


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


async def test_sync_agent_past_timeout_is_killed_with_its_children(
    store: Store, tmp_path: Path
) -> None:
    from tests.agent.sample_agents import sync_hang

    pid_file = tmp_path / "pids"
    (r,) = await store.enqueue(
        [RolloutCreate(input={"pid_file": str(pid_file)}, config=RolloutConfig(timeout_s=3.0))]
    )
    stats = await Runner(store, sync_hang, **FAST).run(max_rollouts=1)
    assert stats.timed_out + stats.ended_by_store == 1
    worker_pid, grandchild_pid = map(int, pid_file.read_text().split())
    deadline = time.monotonic() + 5
    while (_alive(worker_pid) or _alive(grandchild_pid)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not _alive(worker_pid) and not _alive(grandchild_pid)
    assert (await store.get_rollout(r.rollout_id)).status is RolloutStatus.FAILED
    (attempt,) = await store.list_attempts(r.rollout_id)
    assert attempt.status is AttemptStatus.TIMEOUT


async def test_stop_releases_unfinished_attempts_to_another_runner(store: Store) -> None:
    ids = await enqueue(store, 3)
    started = asyncio.Event()

    @rollout
    async def slow(task: Any) -> float:
        started.set()
        await asyncio.sleep(60)
        return 0.0

    runner = Runner(store, slow, concurrency=2, shutdown_grace_s=0.2, **FAST)
    run = asyncio.create_task(runner.run())
    await started.wait()
    runner.stop()
    stats = await run
    assert (stats.claimed, stats.released) == (2, 2)
    statuses = [(await store.get_rollout(r)).status for r in ids]
    assert statuses == [RolloutStatus.QUEUING] * 3

    @rollout
    async def fast(task: Any) -> float:
        return 1.0

    await Runner(store, fast, **FAST).run(until_idle=True)
    for rollout_id in ids:
        attempts = await store.list_attempts(rollout_id)
        assert attempts[-1].status is AttemptStatus.SUCCEEDED
        assert (await store.get_rollout(rollout_id)).status is RolloutStatus.SUCCEEDED


async def test_sigterm_finishes_running_attempts_within_grace(store: Store) -> None:
    ids = await enqueue(store, 1)
    started = asyncio.Event()

    @rollout
    async def short(task: Any) -> float:
        started.set()
        await asyncio.sleep(0.3)
        return 2.0

    runner = Runner(store, short, shutdown_grace_s=5.0, **FAST)
    run = asyncio.create_task(runner.run())
    runner.install_signal_handlers()
    try:
        await started.wait()
        os.kill(os.getpid(), signal.SIGTERM)
        stats = await asyncio.wait_for(run, 10)
    finally:
        loop = asyncio.get_running_loop()
        loop.remove_signal_handler(signal.SIGTERM)
        loop.remove_signal_handler(signal.SIGINT)
    assert (stats.succeeded, stats.released) == (1, 0)
    assert (await store.get_rollout(ids[0])).status is RolloutStatus.SUCCEEDED


async def test_a_rollout_cancelled_in_the_store_stops_its_agent(store: Store) -> None:
    (rollout_id,) = await enqueue(store, 1)
    started = asyncio.Event()
    stopped = asyncio.Event()

    @rollout
    async def agent(task: Any) -> float:
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            stopped.set()
        return 0.0

    runner = Runner(store, agent, **FAST)
    run = asyncio.create_task(runner.run(max_rollouts=1))
    await started.wait()
    await store.update_rollout(rollout_id, status=RolloutStatus.CANCELLED)
    await asyncio.wait_for(stopped.wait(), 5)
    stats = await asyncio.wait_for(run, 5)
    assert stats.ended_by_store == 1
    (attempt,) = await store.list_attempts(rollout_id)
    assert attempt.status is AttemptStatus.CANCELLED and attempt.late_status is None


def test_sync_closure_needs_thread_isolation(store: Store) -> None:
    with pytest.raises(ConfigError, match="sync_isolation='thread'"):
        Runner(store, lambda task: 0.0)


async def test_thread_isolated_sync_agent_past_timeout_is_abandoned(store: Store) -> None:
    (rollout_id,) = await enqueue(store, 1, timeout_s=0.3)
    release = threading.Event()

    def hang(task: Any) -> float:
        release.wait(30)  # a thread cannot be killed: the runner stops waiting for it
        return 1.0

    stats = await Runner(store, hang, sync_isolation="thread", **FAST).run(max_rollouts=1)
    assert not release.is_set()  # the run ended while the agent's thread still hung
    release.set()
    assert stats.timed_out + stats.ended_by_store == 1
    (attempt,) = await store.list_attempts(rollout_id)
    assert attempt.status is AttemptStatus.TIMEOUT
    assert (await store.get_rollout(rollout_id)).status is RolloutStatus.FAILED


async def test_async_agent_class_is_set_up_once(store: Store) -> None:
    from fulmen.agent.api import Agent

    class Counter(Agent):
        setups = 0

        async def setup(self) -> None:
            await asyncio.sleep(0.05)
            type(self).setups += 1

        async def training_rollout(self, task: Any, llm: Any) -> float:
            return float(task["x"]) + self.setups * 100

    ids = await enqueue(store, 6)
    stats = await Runner(store, Counter(), concurrency=3, **FAST).run(until_idle=True)
    assert stats.succeeded == 6 and Counter.setups == 1
    for x, rollout_id in enumerate(ids):
        assert primary_reward(await spans_of(store, rollout_id)) == 100.0 + x
