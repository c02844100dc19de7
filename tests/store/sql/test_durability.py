"""Batches are all-or-nothing, cancelled calls leave the store usable, and a killed process
loses nothing it was told had been written."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from fulmen.errors import NotFound
from fulmen.store import open_store
from fulmen.types import RolloutCreate, SpanCreate


def _span(rollout_id: str, attempt_id: str, span_id: str) -> SpanCreate:
    return SpanCreate(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        trace_id="t" * 32,
        span_id=span_id,
        name="step",
        attributes={"payload": "x" * 500},
        start_time=0.0,
    )


async def test_a_batch_with_a_bad_reference_stores_nothing(sql_url: str) -> None:
    async with open_store(sql_url, watchdog_interval=None) as store:
        await store.enqueue([RolloutCreate(input=0, rollout_id="r")])
        (claim,) = await store.claim("w")
        good = [_span("r", claim.attempt.attempt_id, f"s{i}") for i in range(3)]
        with pytest.raises(NotFound):
            await store.add_spans([*good, _span("r", "at-missing", "bad")])
        assert (await store.query_spans("r")).items == []
        stored = await store.add_spans(good)
        assert [s.sequence for s in stored] == [1, 2, 3]  # no number was used up


async def test_cancelled_appends_leave_the_store_consistent(sql_url: str) -> None:
    # Batches this big run on the store's thread (SQLite): cancelling the caller must not
    # release the connection while the thread still uses it.
    async with open_store(sql_url, watchdog_interval=None) as store:
        await store.enqueue([RolloutCreate(input=0, rollout_id="r")])
        (claim,) = await store.claim("w")
        attempt_id = claim.attempt.attempt_id
        batches = [[_span("r", attempt_id, f"s{b}-{i}") for i in range(150)] for b in range(6)]
        tasks = [asyncio.create_task(store.add_spans(batch)) for batch in batches]
        await asyncio.sleep(0.01)
        for task in tasks[::2]:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Whatever was committed is whole; everything can be (re)written afterwards.
        again = [s for batch in batches for s in await store.add_spans(batch)]
        sequences = [s.sequence for s in again]
        assert len(set(sequences)) == 900
        page = await store.query_spans("r", limit=1000)
        assert sorted(s.span_id for s in page.items) == sorted(s.span_id for s in again)
        assert [s.sequence for s in page.items] == sorted(sequences)


_WRITER = """
import asyncio, sys
from fulmen.store import open_store
from fulmen.types import RolloutCreate, SpanCreate

async def main():
    async with open_store(sys.argv[1], watchdog_interval=None) as store:
        await store.enqueue([RolloutCreate(input=0, rollout_id="r")])
        (claim,) = await store.claim("w")
        print("attempt", claim.attempt.attempt_id, flush=True)
        n = 0
        while True:
            batch = [
                SpanCreate(rollout_id="r", attempt_id=claim.attempt.attempt_id, trace_id="t",
                           span_id=f"s{n + i}", name="step", attributes={"p": "x" * 1500},
                           start_time=0.0)
                for i in range(5)
            ]
            await store.add_spans(batch)
            n += 5
            print("acked", n, flush=True)

asyncio.run(main())
"""


async def test_killed_writer_loses_no_acknowledged_span(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _WRITER, url, stdout=subprocess.PIPE
    )
    assert child.stdout is not None
    acked = 0
    while acked < 300:
        line = (await asyncio.wait_for(child.stdout.readline(), 60)).decode().split()
        assert line, "the writer stopped early"
        if line[0] == "acked":
            acked = int(line[1])
    child.send_signal(signal.SIGKILL)
    await child.wait()
    with sqlite3.connect(sqlite_path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    async with open_store(url, watchdog_interval=None) as store:
        page = await store.query_spans("r", limit=100_000)
    stored = {s.span_id for s in page.items}
    assert {f"s{i}" for i in range(acked)} <= stored
    assert [s.sequence for s in page.items] == list(range(1, len(page.items) + 1))
