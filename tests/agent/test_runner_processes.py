"""Runners as real processes on a store shared across processes: SIGKILL and store restarts."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from fulmen.store import Store, open_store
from fulmen.tracing import reward_events, rewards_from_spans
from fulmen.types import AttemptStatus, RolloutConfig, RolloutCreate, RolloutQuery, RolloutStatus
from tests.agent.processes import free_port, fulmen, runner, stop, wait_exit, wait_for

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


@pytest.mark.parametrize("agent", ["async_slow_once", "sync_slow_once"])
async def test_sigkilled_runner_attempt_is_lost_and_retried_elsewhere(
    tmp_path: Path, agent: str
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    marker = tmp_path / "marker"
    log = tmp_path / "runner.log"
    async with open_store(url, watchdog_interval=0.1) as store:
        (r,) = await store.enqueue(
            [
                RolloutCreate(
                    input={"marker": str(marker)},
                    config=RolloutConfig(heartbeat_timeout_s=1.0, max_attempts=2),
                )
            ]
        )
        first = runner(url, agent, "--max-rollouts", "1", log=log)
        try:
            await wait_for(lambda: asyncio.sleep(0, marker.exists()), 60, "the first attempt")
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        finally:
            stop(first)
        if agent.startswith("sync"):  # the worker process died with its runner
            worker_pid = int(marker.read_text())
            await wait_for(lambda: asyncio.sleep(0, not _alive(worker_pid)), 10, "worker death")

        async def first_attempt_lost() -> bool:
            return (await store.list_attempts(r.rollout_id))[0].status is AttemptStatus.LOST

        await wait_for(first_attempt_lost, 15, "the watchdog to find the attempt lost")
        second = runner(url, agent, "--until-idle", log=log)
        try:
            stats = await wait_exit(second, 60)
        finally:
            stop(second)
        assert stats["succeeded"] == 1
        await _check_retried_once(store, r.rollout_id)


async def _check_retried_once(store: Store, rollout_id: str) -> None:
    assert (await store.get_rollout(rollout_id)).status is RolloutStatus.SUCCEEDED
    first, second = await store.list_attempts(rollout_id)
    assert (first.status, second.status) == (AttemptStatus.LOST, AttemptStatus.SUCCEEDED)
    assert first.worker_id != second.worker_id and "heartbeat" in (first.error or "")
    spans = (await store.query_spans(rollout_id, limit=10_000)).items
    lost_spans = [s for s in spans if s.attempt_id == first.attempt_id]
    assert rewards_from_spans(lost_spans) == {}
    # one returned reward for the rollout, from the surviving attempt only: none double-counted
    events = reward_events(spans)
    assert [e.source for e in events] == ["emit", "return"]
    kept = [s for s in spans if s.attempt_id == second.attempt_id]
    assert rewards_from_spans(kept) == {"steps": 1.0, "reward": 1.0}


async def _serve(db: str, port: int, log: Path):
    server = fulmen(
        "store", "serve", "--db", db, "--port", str(port), "--watchdog-interval", "0.2", log=log
    )
    return server


async def _store_up(url: str) -> bool:
    try:
        async with open_store(url) as client:
            await client.stats()
    except Exception:
        return False
    return True


async def test_runner_keeps_working_across_a_store_restart(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "procs.log"
    server = await _serve(db, port, log)
    run = None
    try:
        await wait_for(lambda: _store_up(url), 30, "the store service")
        async with open_store(url) as client:
            created = await client.enqueue(
                [
                    RolloutCreate(
                        input={"x": i, "sleep": 0.25}, config=RolloutConfig(heartbeat_timeout_s=30)
                    )
                    for i in range(12)
                ]
            )
        ids = [r.rollout_id for r in created]
        run = runner(url, "async_sleepy", "--concurrency", "2", "--until-idle", log=log)

        async def some_done() -> bool:
            async with open_store(url) as c:
                page = await c.query_rollouts(RolloutQuery(statuses=[RolloutStatus.SUCCEEDED]))
            return len(page.items) >= 2

        await wait_for(some_done, 60, "the first rollouts")
        server.send_signal(signal.SIGKILL)  # the store goes away mid-run...
        server.wait(10)
        stop(server)
        await asyncio.sleep(1.5)
        server = await _serve(db, port, log)  # ...and comes back on the same database
        stats = await wait_exit(run, 90)
        assert stats["succeeded"] == 12 and stats["failed"] == 0
        async with open_store(url) as client:
            for x, rollout_id in enumerate(ids):
                assert (await client.get_rollout(rollout_id)).status is RolloutStatus.SUCCEEDED
                (attempt,) = await client.list_attempts(rollout_id)
                spans = (await client.query_spans(rollout_id)).items
                assert rewards_from_spans(spans) == {"reward": float(x)}
                assert sorted(s.name for s in spans) == ["fulmen.reward", "fulmen.rollout", "work"]
                assert {s.attempt_id for s in spans} == {attempt.attempt_id}
    finally:
        if run is not None:
            stop(run)
        stop(server)


@pytest.mark.parametrize("agent", ["async_slow_once", "sync_slow_once"])
async def test_sigterm_releases_what_the_runner_claimed(tmp_path: Path, agent: str) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    marker = tmp_path / "marker"
    async with open_store(url, watchdog_interval=None) as store:
        (r,) = await store.enqueue([RolloutCreate(input={"marker": str(marker)})])
        proc = runner(url, agent, "--shutdown-grace", "0.5", log=tmp_path / "runner.log")
        try:
            await wait_for(lambda: asyncio.sleep(0, marker.exists()), 60, "the attempt")
            proc.send_signal(signal.SIGTERM)
            stats = await wait_exit(proc, 30)
        finally:
            stop(proc)
        assert (stats["claimed"], stats["released"]) == (1, 1)
        (attempt,) = await store.list_attempts(r.rollout_id)
        assert attempt.status is AttemptStatus.RELEASED
        assert (await store.get_rollout(r.rollout_id)).status is RolloutStatus.QUEUING
        if agent.startswith("sync"):  # the worker was killed, not left running
            worker_pid = int(marker.read_text())
            await wait_for(lambda: asyncio.sleep(0, not _alive(worker_pid)), 10, "worker death")


def test_cli_reports_an_agent_it_cannot_import(tmp_path: Path) -> None:
    log = tmp_path / "runner.log"
    proc = fulmen(
        "runner", "--store", f"sqlite:///{tmp_path / 'r.db'}", "--agent", "nope.mod:x", log=log
    )
    try:
        assert proc.wait(60) == 1
    finally:
        stop(proc)
    assert "cannot import agent 'nope.mod:x'" in log.read_text()
