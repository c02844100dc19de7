"""Whole-result reads page through every page of the store's cursors."""

from __future__ import annotations

from fulmen.store import open_store
from fulmen.store.reading import iter_rollouts, read_llm_calls, read_spans
from fulmen.types import LLMCallCreate, RolloutCreate, RolloutQuery, SpanCreate


async def test_reads_cross_page_boundaries() -> None:
    async with open_store("memory://", watchdog_interval=None) as store:
        await store.enqueue([RolloutCreate(input=i) for i in range(5)])
        (claim,) = await store.claim("w")
        rid, aid = claim.rollout.rollout_id, claim.attempt.attempt_id
        spans = [
            SpanCreate(
                rollout_id=rid,
                attempt_id=aid,
                trace_id="t",
                span_id=f"s{i}",
                name="n",
                start_time=0,
            )
            for i in range(2_345)  # query_spans returns 1,000 per page
        ]
        await store.add_spans(spans)
        calls = [
            LLMCallCreate(call_id=f"c{i}", rollout_id=rid, attempt_id=aid, started_at=0)
            for i in range(1_001)
        ]
        await store.add_llm_calls(calls)
        assert [s.span_id for s in await read_spans(store, rid)] == [s.span_id for s in spans]
        assert len(await read_llm_calls(store, rid, attempt_id=aid)) == 1_001
        seen = [r.input async for r in iter_rollouts(store, RolloutQuery(limit=2))]
        assert seen == [0, 1, 2, 3, 4]
