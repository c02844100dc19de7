"""Several store objects (separate engines and connections) on one database at once.

Two ``SqlStore`` objects share nothing in-process, so for the database they are the same as two
processes; one test also runs a second real process.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from pathlib import Path

from fulmen.store import open_store
from fulmen.types import RolloutConfig, RolloutCreate, RolloutStatus, SpanCreate


async def _claim_all(store: object, worker: str, found: list[str]) -> None:
    while True:
        claims = await store.claim(worker, limit=3)  # type: ignore[attr-defined]
        if not claims:
            return
        found.extend(c.rollout.rollout_id for c in claims)


async def test_concurrent_claims_from_two_stores_never_double_claim(sql_url: str) -> None:
    async with (
        open_store(sql_url, watchdog_interval=None) as one,
        open_store(sql_url, watchdog_interval=None) as two,
    ):
        queued = await one.enqueue([RolloutCreate(input=i) for i in range(90)])
        found: list[str] = []
        await asyncio.gather(
            *(
                _claim_all(store, f"w{i}-{n}", found)
                for n, store in enumerate((one, two))
                for i in range(4)
            )
        )
        assert Counter(found).most_common(1)[0][1] == 1
        assert sorted(found) == sorted(r.rollout_id for r in queued)
        stats = await two.stats()
        assert stats.rollouts[RolloutStatus.RUNNING] == 90


_CLAIMER = """
import asyncio, sys
from fulmen.store import open_store

async def main():
    async with open_store(sys.argv[1], watchdog_interval=None) as store:
        while claims := await store.claim("child", limit=2):
            for c in claims:
                print(c.rollout.rollout_id, flush=True)

asyncio.run(main())
"""


async def test_a_second_process_claims_from_the_same_sqlite_file(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    async with open_store(url, watchdog_interval=None) as store:
        queued = await store.enqueue([RolloutCreate(input=i) for i in range(60)])
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _CLAIMER, url, stdout=subprocess.PIPE
        )
        mine: list[str] = []
        await _claim_all(store, "parent", mine)
        out, _ = await asyncio.wait_for(child.communicate(), 60)
        assert child.returncode == 0
    theirs = out.decode().split()
    assert not set(mine) & set(theirs)
    assert sorted(mine + theirs) == sorted(r.rollout_id for r in queued)


def _spans(rollout_id: str, attempt_id: str, n: int) -> list[SpanCreate]:
    return [
        SpanCreate(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            trace_id="t" * 32,
            span_id=f"s{i}",
            name="step",
            start_time=float(i),
        )
        for i in range(n)
    ]


async def test_racing_appends_of_the_same_spans_store_them_once(sql_url: str) -> None:
    async with (
        open_store(sql_url, watchdog_interval=None) as one,
        open_store(sql_url, watchdog_interval=None) as two,
    ):
        await one.enqueue([RolloutCreate(input=0, rollout_id="r")])
        (claim,) = await one.claim("w")
        batch = _spans("r", claim.attempt.attempt_id, 20)
        results = await asyncio.gather(
            *(
                store.add_spans(batch[i:] + batch[:i])
                for i in range(0, 20, 5)
                for store in (one, two)
            )
        )
        by_key = {(s.attempt_id, s.span_id): s.sequence for s in results[0]}
        for result in results[1:]:
            assert {(s.attempt_id, s.span_id): s.sequence for s in result} == by_key
        assert sorted(by_key.values()) == list(range(1, 21))
        page = await two.query_spans("r")
        assert [s.sequence for s in page.items] == list(range(1, 21))


async def test_watchdogs_of_two_stores_end_each_attempt_once(sql_url: str) -> None:
    async with (
        open_store(sql_url, watchdog_interval=None) as one,
        open_store(sql_url, watchdog_interval=None) as two,
    ):
        config = RolloutConfig(timeout_s=0.05, max_attempts=1)
        for round_ in range(3):
            await one.enqueue([RolloutCreate(input=i, config=config) for i in range(30)])
            claims = await one.claim("w", limit=30)
            await asyncio.sleep(0.1)
            reports = await asyncio.gather(*(s.reconcile() for s in (one, two, one, two)))
            ended = [a for r in reports for a in r.timed_out]
            # One round of concurrent passes ends every attempt, each exactly once.
            assert sorted(ended) == sorted(c.attempt.attempt_id for c in claims)
            failed = [r for report in reports for r in report.failed]
            assert len(failed) == len(set(failed)) == 30
            stats = await two.stats()
            assert stats.rollouts[RolloutStatus.FAILED] == 30 * (round_ + 1)
