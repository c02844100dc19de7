"""Crash safety: SIGKILL the store server while clients append; nothing acknowledged is lost.

The server is a real ``fulmen store serve`` process over a SQLite file. Client tasks append
spans in batches and record every batch the server acknowledged. The server is killed with
SIGKILL mid-stream (no chance to flush or close anything), restarted on the same file, and
every acknowledged span must be there, in order, with the database passing its integrity check.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from fulmen.errors import StoreUnavailable
from fulmen.store.client import StoreClient
from fulmen.types import RolloutCreate, SpanCreate
from tests.store.http_server import ServerProcess

TOKEN = "crash-test-token"
CLIENTS = 4
BATCH = 20


def make_span(rollout_id: str, attempt_id: str, n: int) -> SpanCreate:
    return SpanCreate(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        trace_id="c" * 32,
        span_id=f"{n:016x}",
        name="step",
        start_time=float(n),
        end_time=float(n) + 0.5,
        attributes={"payload": "x" * 512, "n": n},
    )


async def append_until_failure(
    url: str, rollout_id: str, attempt_id: str, acked: list[str], started: asyncio.Event
) -> None:
    # retries=0: after the kill, fail at once instead of backing off.
    client = await StoreClient.connect(url, token=TOKEN, retries=0, timeout=5)
    n = 0
    try:
        while True:
            batch = [make_span(rollout_id, attempt_id, n + i) for i in range(BATCH)]
            stored = await client.add_spans(batch)
            assert [s.span_id for s in stored] == [s.span_id for s in batch]
            acked.extend(s.span_id for s in batch)  # acknowledged: must survive the kill
            n += BATCH
            if len(acked) >= 3 * BATCH:
                started.set()
    except StoreUnavailable:
        return  # the server died under us, as planned
    finally:
        await client.aclose()


async def test_acknowledged_spans_survive_sigkill(tmp_path: Path) -> None:
    db_path = tmp_path / "crash.db"
    db = f"sqlite:///{db_path}"
    server = ServerProcess(db, tmp_path / "server.log", token=TOKEN)
    try:
        setup = await StoreClient.connect(server.url, token=TOKEN)
        await setup.enqueue([RolloutCreate(input={"i": i}) for i in range(CLIENTS)])
        claims = await setup.claim("crash-worker", limit=CLIENTS)
        await setup.aclose()
        assert len(claims) == CLIENTS

        acked: list[list[str]] = [[] for _ in claims]
        started = [asyncio.Event() for _ in claims]
        tasks = [
            asyncio.create_task(
                append_until_failure(
                    server.url, c.rollout.rollout_id, c.attempt.attempt_id, acked[i], started[i]
                )
            )
            for i, c in enumerate(claims)
        ]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 60)
        server.kill()  # mid-stream: every client has requests in flight
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
    finally:
        if server.proc.poll() is None:
            server.kill()

    restarted = ServerProcess(db, tmp_path / "server2.log", token=TOKEN)
    try:
        client = await StoreClient.connect(restarted.url, token=TOKEN)
        for claim, mine in zip(claims, acked, strict=True):
            stored = []
            after = 0
            while True:
                page = await client.query_spans(claim.rollout.rollout_id, after_sequence=after)
                stored += page.items
                if page.next_cursor is None:
                    break
                after = page.next_cursor
            ids = [s.span_id for s in stored]
            assert len(mine) >= 3 * BATCH
            missing = set(mine) - set(ids)
            assert not missing, f"{len(missing)} acknowledged spans lost"
            assert ids[: len(mine)] == mine  # in the order they were acknowledged
            sequences = [s.sequence for s in stored]
            assert sequences == sorted(set(sequences))
        await client.aclose()
    finally:
        assert restarted.stop() == 0
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
