"""Dashboard under load: its heaviest API calls over 100,000 rollouts and 1,000,000 spans.

Fill (not timed as part of the figures): ``--template`` real rollouts go through the Store API
(enqueue, claim, ten spans each — a root span, eight operation spans with ~300 bytes of
attributes, a reward span — and succeed), then their rows are cloned with SQLAlchemy Core bulk
inserts (new ids, positions and reward values) up to ``--rollouts``. The rows are byte for byte
what the store writes, so every read goes through the real ``SqlStore`` code. A run with 1,000
steps of metrics and 20 model versions is added through the API.

Timed, through real HTTP to a ``DashboardServer`` over that store (``--samples`` requests each,
newest pages and pages at random depths so the reward cache rarely helps):

  rollouts_newest      the first page of the table (what the live view polls), 25 rows
  rollouts_random      a page of 25 at a random depth
  rollouts_status      status=succeeded & mode=train (the store filters), random depth
  rollouts_text        task text search for a term in 1 of 100 tasks (filtered here)
  rollouts_reward      reward in [0.9, 1] (about 1 in 10; a reward read per row examined)
  rollout_detail       one rollout: attempts, spans, calls, rewards, transitions
  run_metrics          a run with 1,000 steps of metrics
  info                 the newest position (the poll's cheapest call)

Baseline in the same run: ``store_query_rollouts`` times one ``query_rollouts(limit=25)`` at a
random depth straight on the store, the floor under a table page. Prints ONE JSON line with
p50/p95 in ms per call and ``target_p95_ms``.

    python benchmarks/dashboard_load.py                    # SQLite, 100k rollouts, 1M spans
    python benchmarks/dashboard_load.py --rollouts 20000   # smaller
    python benchmarks/dashboard_load.py --postgresql       # also a throwaway PostgreSQL
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fulmen.dashboard.server import DashboardServer
from fulmen.store import open_store
from fulmen.store.sql import schema
from fulmen.store.sql.schema import POSITION_COUNTER
from fulmen.types import (
    AttemptStatus,
    Mode,
    ModelKind,
    ModelVersion,
    RolloutCreate,
    RolloutQuery,
    Run,
    RunMetrics,
    SpanCreate,
)

TARGET_P95_MS = 300.0
PAGE_ROWS = 25  # the table's page, as the dashboard asks for it
SPANS_PER_ROLLOUT = 10
REWARD_MARK = 0.123456789  # replaced per clone by the clone's own reward


def template_spans(rollout_id: str, attempt_id: str, reward: float) -> list[SpanCreate]:
    """Ten spans as a runner writes them: the rollout, eight operations, the reward."""
    trace = f"{abs(hash(rollout_id)):032x}"[:32]
    root = f"{1:016x}"
    now = time.time()
    spans = [
        SpanCreate(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            trace_id=trace,
            span_id=root,
            name="fulmen.rollout",
            attributes={"fulmen.rollout.id": rollout_id, "fulmen.attempt.id": attempt_id},
            start_time=now,
            end_time=now + 1,
        )
    ]
    for k in range(8):
        spans.append(
            SpanCreate(
                rollout_id=rollout_id,
                attempt_id=attempt_id,
                trace_id=trace,
                span_id=f"{k + 2:016x}",
                parent_id=root,
                name="tool.call" if k % 2 else "fulmen.operation",
                attributes={"tool.name": f"tool-{k}", "input": "x" * 250, "step": k},
                start_time=now + k * 0.1,
                end_time=now + k * 0.1 + 0.05,
            )
        )
    spans.append(
        SpanCreate(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            trace_id=trace,
            span_id=f"{99:016x}",
            parent_id=root,
            name="fulmen.reward",
            attributes={
                "fulmen.reward.names": ["reward"],
                "fulmen.reward.values": [reward],
                "fulmen.reward.primary": "reward",
                "fulmen.reward.source": "return",
            },
            start_time=now + 0.9,
            end_time=now + 0.9,
        )
    )
    return spans


async def make_templates(url: str, count: int) -> list[str]:
    """Run ``count`` rollouts through the Store API; return their ids."""
    ids = [f"tmpl-{i:04d}" for i in range(count)]
    async with open_store(url, watchdog_interval=None) as store:
        await store.enqueue(
            [
                RolloutCreate(
                    rollout_id=rid,
                    input={"question": f"template question {i}", "tag": "tmpl"},
                    task_id=f"t{i}",
                    mode=Mode.TRAIN,
                )
                for i, rid in enumerate(ids)
            ]
        )
        claims = await store.claim("bench-worker", limit=count)
        for claim in claims:
            rid, aid = claim.rollout.rollout_id, claim.attempt.attempt_id
            await store.add_spans(template_spans(rid, aid, REWARD_MARK))
            await store.update_attempt(aid, status=AttemptStatus.SUCCEEDED)
    return ids


def _clone(row: dict[str, Any], old: list[str], new: list[str], extra: dict[str, Any]) -> dict:
    out = dict(row)
    for key, value in out.items():
        if isinstance(value, str):
            for a, b in zip(old, new, strict=True):
                value = value.replace(a, b)
            out[key] = value
    out.update(extra)
    return out


class _Database:
    """Runs a function on a SQLAlchemy ``Connection`` in one transaction, for either dialect.

    SQLite goes through the stdlib driver in a thread (what the store uses); PostgreSQL through
    asyncpg (the store's driver) with ``run_sync``.
    """

    def __init__(self, url: str) -> None:
        self._sync = sa.create_engine(url) if url.startswith("sqlite") else None
        self._async = (
            None
            if self._sync is not None
            else create_async_engine("postgresql+asyncpg://" + url.split("://", 1)[1])
        )

    async def run(self, fn: Callable[[sa.Connection], Any]) -> Any:
        if self._async is not None:
            async with self._async.begin() as conn:
                return await conn.run_sync(fn)
        engine = self._sync
        assert engine is not None

        def work() -> Any:
            with engine.begin() as conn:
                return fn(conn)

        return await asyncio.to_thread(work)

    async def aclose(self) -> None:
        if self._async is not None:
            await self._async.dispose()
        if self._sync is not None:
            self._sync.dispose()


async def bulk_fill(url: str, templates: list[str], total: int, batch: int = 2000) -> None:
    """Clone the template rollouts' rows up to ``total`` rollouts with bulk inserts."""
    db = _Database(url)
    tables = (schema.rollouts, schema.attempts, schema.spans)

    def read(conn: sa.Connection) -> dict[str, list[dict[str, Any]]]:
        return {
            table.name: [
                dict(r._mapping)
                for r in conn.execute(sa.select(table).where(table.c.rollout_id.in_(templates)))
            ]
            for table in tables
        }

    rows = await db.run(read)
    attempt_of = {r["rollout_id"]: r["attempt_id"] for r in rows[schema.attempts.name]}
    top = max(r["position"] for r in rows[schema.rollouts.name])
    rng = random.Random(0)
    made = len(templates)
    while made < total:
        out: dict[str, list[dict[str, Any]]] = {t.name: [] for t in tables}
        for i in range(made, min(made + batch, total)):
            tmpl = templates[i % len(templates)]
            rid, aid = f"r{i:07d}", f"a{i:07d}"
            old, new = [tmpl, attempt_of[tmpl]], [rid, aid]
            reward = repr(round(rng.random(), 4))
            task = "needle" if i % 100 == 0 else f"q{i}"
            for table in tables:
                for row in rows[table.name]:
                    if row["rollout_id"] != tmpl:
                        continue
                    extra: dict[str, Any] = {}
                    if table is schema.rollouts:
                        extra = {
                            "position": top + i,
                            "input_json": json.dumps({"question": task, "i": i}),
                            "task_id": f"t{i % 500}",
                            "mode": "val" if i % 4 == 0 else "train",
                        }
                    clone = _clone(row, old, new, extra)
                    if table is schema.spans:
                        clone["body"] = clone["body"].replace(repr(REWARD_MARK), reward)
                    out[table.name].append(clone)

        def insert(conn: sa.Connection, out: dict[str, list[dict[str, Any]]] = out) -> None:
            for table in tables:
                conn.execute(table.insert(), out[table.name])

        await db.run(insert)
        made = min(made + batch, total)

    def counter(conn: sa.Connection) -> None:
        conn.execute(
            sa.update(schema.meta)
            .where(schema.meta.c.key == POSITION_COUNTER)
            .values(value=top + total)
        )

    await db.run(counter)
    await db.aclose()


async def add_run(url: str) -> str:
    """A run with 1,000 steps of metrics and 20 model versions, through the API."""
    async with open_store(url, watchdog_interval=None) as store:
        run = await store.start_run(Run(run_id="bench-run", name="bench", started_at=time.time()))
        records = [
            RunMetrics(
                run_id=run.run_id,
                step=s,
                time=time.time() + s,
                values={"reward/mean": s / 1000, "time/step_s": 1.0, "tokens_per_s": 900.0},
            )
            for s in range(1, 1001)
        ]
        for k in range(0, 1000, 200):
            await store.add_run_metrics(records[k : k + 200])
        for v in range(1, 21):
            await store.add_model_version(
                ModelVersion(
                    run_id=run.run_id,
                    version=v,
                    step=v * 50,
                    kind=ModelKind.ADAPTER,
                    path=f"/runs/bench/adapters/step-{v * 50:05d}",
                    scores={"val/reward_mean": v / 20},
                )
            )
        return run.run_id


async def timed(call: Callable[[], Awaitable[Any]], samples: int) -> dict[str, float]:
    times: list[float] = []
    for _ in range(samples):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {
        "p50": round(statistics.median(times), 1),
        "p95": round(times[min(len(times) - 1, int(0.95 * len(times)))], 1),
    }


async def measure(url: str, total: int, samples: int) -> dict[str, Any]:
    """Time the dashboard's heaviest calls over the store at ``url``."""
    rng = random.Random(1)
    async with open_store(url, watchdog_interval=None) as store:
        server = DashboardServer(store)
        base = await server.start()
        figures: dict[str, Any] = {}
        try:
            async with httpx.AsyncClient(base_url=base, timeout=60) as client:

                async def get(path: str, **params: Any) -> Any:
                    response = await client.get(path, params=params)
                    response.raise_for_status()
                    return response.json()

                first = await get("/api/rollouts")
                assert len(first["items"]) == PAGE_ROWS, len(first["items"])
                newest = first["newest"]

                def depth() -> int:
                    return rng.randint(100, newest)

                async def direct() -> None:
                    await store.query_rollouts(
                        RolloutQuery(cursor=depth() - PAGE_ROWS, limit=PAGE_ROWS)
                    )

                ids = [f"r{rng.randint(100, total - 1):07d}" for _ in range(samples)]
                calls: dict[str, Callable[[], Awaitable[Any]]] = {
                    "store_query_rollouts": direct,
                    "info": lambda: get("/api/info"),
                    "rollouts_newest": lambda: get("/api/rollouts"),
                    "rollouts_random": lambda: get("/api/rollouts", before=depth()),
                    "rollouts_status": lambda: get(
                        "/api/rollouts", status="succeeded", mode="train", before=depth()
                    ),
                    "rollouts_text": lambda: get("/api/rollouts", q="needle", before=depth()),
                    "rollouts_reward": lambda: get(
                        "/api/rollouts", min_reward=0.9, max_reward=1.0, before=depth()
                    ),
                    "rollout_detail": lambda: get(f"/api/rollouts/{ids.pop()}"),
                    "run_metrics": lambda: get("/api/runs/bench-run/metrics"),
                }
                for name, call in calls.items():
                    figures[name] = await timed(call, samples)
                # what one costly request returns: rows found vs rows examined
                sample = await get("/api/rollouts", min_reward=0.9, max_reward=1.0)
                figures["rollouts_reward_rows_per_request"] = len(sample["items"])
                figures["rollouts_reward_examined_per_request"] = sample["examined"]
                sample = await get("/api/rollouts", q="needle")
                figures["rollouts_text_rows_per_request"] = len(sample["items"])
                figures["rollouts_text_examined_per_request"] = sample["examined"]
        finally:
            await server.aclose()
    return figures


async def bench_backend(url: str, args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    templates = await make_templates(url, args.template)
    await bulk_fill(url, templates, args.rollouts)
    await add_run(url)
    fill_s = time.perf_counter() - started
    async with open_store(url, watchdog_interval=None) as store:
        stats = await store.stats()
    assert sum(stats.rollouts.values()) == args.rollouts, stats
    assert stats.spans == args.rollouts * SPANS_PER_ROLLOUT, stats
    figures = await measure(url, args.rollouts, args.samples)
    return {"fill_s": round(fill_s, 1), "rollouts": args.rollouts, "spans": stats.spans, **figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=100_000)
    parser.add_argument("--template", type=int, default=20)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--postgresql", action="store_true", help="also a throwaway PostgreSQL")
    args = parser.parse_args()
    out: dict[str, Any] = {"target_p95_ms": TARGET_P95_MS}
    with tempfile.TemporaryDirectory() as tmp:
        sqlite_url = f"sqlite:///{Path(tmp) / 'dashboard.db'}"
        out["sqlite"] = asyncio.run(bench_backend(sqlite_url, args))
    if args.postgresql:
        from tests.pg_server import fresh_pg_database, postgres_server

        with postgres_server() as server_url:
            pg_url = asyncio.run(fresh_pg_database(server_url))
            out["postgresql"] = asyncio.run(bench_backend(pg_url, args))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
