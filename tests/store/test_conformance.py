"""The store conformance suite: one set of behaviours every backend must show.

Runs against memory, SQLite, PostgreSQL (in-process) and the HTTP service (through the client);
see ``conftest.py``. Timing-based tests use short timeouts and a fast watchdog; those whose
outcome must not depend on the machine's speed move the store's clock by hand (``store_clock``).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta, tzinfo

import pytest

from fulmen.errors import Conflict, InvalidRequest, InvalidTransition, NotFound, Unauthorized
from fulmen.store import Store
from fulmen.store import clock as store_clock_module
from fulmen.types import (
    AttemptStatus,
    Demonstration,
    LLMCallCreate,
    LLMChoice,
    LLMResource,
    Mode,
    PromptLineage,
    PromptScore,
    PromptTemplate,
    PruneReport,
    PruneRequest,
    ResourcesCreate,
    RewardCreate,
    RolloutConfig,
    RolloutCreate,
    RolloutQuery,
    RolloutStatus,
    SpanCreate,
    SpanEvent,
)
from fulmen.types.rewards import session_rollout_id
from tests.store.conftest import Backend


def rollout(i: int = 0, **kw: object) -> RolloutCreate:
    return RolloutCreate(input={"question": f"q{i}", "n": i}, **kw)  # type: ignore[arg-type]


def span(rollout_id: str, attempt_id: str, span_id: str, **kw: object) -> SpanCreate:
    fields: dict[str, object] = {
        "trace_id": "ab" * 16,
        "name": "step",
        "start_time": 1.0,
        "end_time": 2.0,
        "attributes": {"k": "v", "n": 1, "nested": {"a": [1, 2]}},
    }
    fields.update(kw)
    return SpanCreate(rollout_id=rollout_id, attempt_id=attempt_id, span_id=span_id, **fields)  # type: ignore[arg-type]


def call(call_id: str, rollout_id: str | None, attempt_id: str | None) -> LLMCallCreate:
    return LLMCallCreate(
        call_id=call_id,
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        request={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        response={"id": "resp-1", "choices": [{"message": {"content": "yo"}}]},
        prompt_token_ids=[1, 2, 3],
        choices=[
            LLMChoice(text="yo", token_ids=[7, 8], logprobs=[-0.5, -0.25], finish_reason="stop")
        ],
        is_token_level=True,
        response_id="resp-1",
        model="m",
        policy_version="v1",
        started_at=100.0,
        latency_s=0.01,
        usage={"prompt_tokens": 3, "completion_tokens": 2},
    )


async def claim_one(store: Store, worker: str = "w1") -> tuple[str, str]:
    claims = await store.claim(worker)
    assert len(claims) == 1
    return claims[0].rollout.rollout_id, claims[0].attempt.attempt_id


async def wait_status(
    store: Store, rollout_id: str, status: RolloutStatus, timeout: float = 5.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (await store.get_rollout(rollout_id)).status is status:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"rollout {rollout_id} never became {status.value}")


class StoreClock:
    """The store's wall clock, standing still until a test moves it with ``advance``.

    Deadlines then pass when the test says, never because a loaded machine was slow between
    two calls; the background watchdog still does the finding, at its own pace.
    """

    def __init__(self) -> None:
        self._now = datetime.now(UTC)

    def now(self, tz: tzinfo) -> datetime:  # what ``utc_now()`` calls
        return self._now.astimezone(tz)

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)


@pytest.fixture
def store_clock(monkeypatch: pytest.MonkeyPatch) -> StoreClock:
    clock = StoreClock()
    # Every timestamp and deadline of every backend comes from ``utc_now()``, which looks up
    # ``datetime`` in its module at each call (the HTTP server's thread included).
    monkeypatch.setattr(store_clock_module, "datetime", clock)
    return clock


# -- enqueue ----------------------------------------------------------------------------------


async def test_enqueue_assigns_ids_positions_and_queuing(store: Store) -> None:
    rollouts = await store.enqueue([rollout(i) for i in range(3)])
    assert [r.status for r in rollouts] == [RolloutStatus.QUEUING] * 3
    assert len({r.rollout_id for r in rollouts}) == 3
    positions = [r.position for r in rollouts]
    assert positions == sorted(positions) and len(set(positions)) == 3
    got = await store.get_rollout(rollouts[1].rollout_id)
    assert got.input == {"question": "q1", "n": 1}
    assert got.mode is Mode.TRAIN and got.attempt_count == 0
    assert got.enqueued_at.tzinfo is not None


async def test_enqueue_is_idempotent_by_rollout_id(store: Store) -> None:
    first = await store.enqueue([rollout(1, rollout_id="ro-fixed", metadata={"a": 1})])
    again = await store.enqueue([rollout(1, rollout_id="ro-fixed", metadata={"a": 1})])
    assert again[0].rollout_id == first[0].rollout_id == "ro-fixed"
    assert again[0].position == first[0].position
    assert (await store.stats()).rollouts[RolloutStatus.QUEUING] == 1
    with pytest.raises(Conflict):
        await store.enqueue([rollout(2, rollout_id="ro-fixed")])


async def test_enqueue_unknown_resources_version_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.enqueue([rollout(resources_version=7)])


async def test_get_unknown_ids_are_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.get_rollout("ro-nope")
    with pytest.raises(NotFound):
        await store.get_attempt("at-nope")
    with pytest.raises(NotFound):
        await store.list_attempts("ro-nope")
    with pytest.raises(NotFound):
        await store.update_attempt("at-nope", status=AttemptStatus.SUCCEEDED)
    with pytest.raises(NotFound):
        await store.update_rollout("ro-nope", status=RolloutStatus.CANCELLED)


# -- claims -----------------------------------------------------------------------------------


async def test_claim_is_fifo_and_creates_attempts(store: Store) -> None:
    ids = [r.rollout_id for r in await store.enqueue([rollout(i) for i in range(5)])]
    first = await store.claim("w1", limit=2)
    second = await store.claim("w2", limit=10)
    assert [c.rollout.rollout_id for c in first] == ids[:2]
    assert [c.rollout.rollout_id for c in second] == ids[2:]
    assert await store.claim("w3") == []
    claim = first[0]
    assert claim.rollout.status is RolloutStatus.RUNNING
    assert claim.attempt.status is AttemptStatus.RUNNING
    assert claim.attempt.number == 1 and claim.attempt.worker_id == "w1"
    assert claim.attempt.rollout_id == claim.rollout.rollout_id
    stored = await store.get_rollout(ids[0])
    assert stored.status is RolloutStatus.RUNNING and stored.attempt_count == 1
    assert stored.started_at is not None


async def test_claim_filters_by_mode(store: Store) -> None:
    train = await store.enqueue([rollout(0, mode=Mode.TRAIN)])
    val = await store.enqueue([rollout(1, mode=Mode.VAL)])
    claims = await store.claim("w", limit=5, modes=[Mode.VAL])
    assert [c.rollout.rollout_id for c in claims] == [val[0].rollout_id]
    claims = await store.claim("w", limit=5)
    assert [c.rollout.rollout_id for c in claims] == [train[0].rollout_id]


async def test_claim_with_same_claim_id_is_not_repeated(store: Store) -> None:
    await store.enqueue([rollout(i) for i in range(4)])
    first = await store.claim("w1", limit=2, claim_id="claim-1")
    repeat = await store.claim("w1", limit=2, claim_id="claim-1")
    assert [c.attempt.attempt_id for c in repeat] == [c.attempt.attempt_id for c in first]
    stats = await store.stats()
    assert stats.rollouts[RolloutStatus.QUEUING] == 2
    assert stats.attempts[AttemptStatus.RUNNING] == 2


async def test_concurrent_claims_never_double_claim_and_lose_none(store: Store) -> None:
    total = 60
    await store.enqueue([rollout(i) for i in range(total)])

    async def worker(n: int) -> list[str]:
        got: list[str] = []
        while True:
            claims = await store.claim(f"w{n}", limit=2)
            if not claims:
                return got
            got += [c.rollout.rollout_id for c in claims]

    results = await asyncio.gather(*(worker(n) for n in range(12)))
    claimed = [r for result in results for r in result]
    assert len(claimed) == total
    assert len(set(claimed)) == total
    assert (await store.stats()).attempts[AttemptStatus.RUNNING] == total


async def test_invalid_claim_limit_is_refused(store: Store) -> None:
    with pytest.raises(InvalidRequest):
        await store.claim("w", limit=0)


# -- lifecycle --------------------------------------------------------------------------------


async def test_success_finishes_rollout(store: Store) -> None:
    (r,) = await store.enqueue([rollout()])
    rid, aid = await claim_one(store)
    attempt = await store.update_attempt(aid, status=AttemptStatus.SUCCEEDED)
    assert attempt.status is AttemptStatus.SUCCEEDED and attempt.ended_at is not None
    done = await store.get_rollout(rid)
    assert done.status is RolloutStatus.SUCCEEDED and done.ended_at is not None
    assert done.rollout_id == r.rollout_id


async def test_failure_without_retry_fails_rollout_with_error(store: Store) -> None:
    await store.enqueue([rollout()])
    rid, aid = await claim_one(store)
    await store.update_attempt(aid, status=AttemptStatus.FAILED, error="Traceback: boom")
    done = await store.get_rollout(rid)
    assert done.status is RolloutStatus.FAILED
    assert done.error == "Traceback: boom"
    assert (await store.get_attempt(aid)).error == "Traceback: boom"


async def test_failure_is_retried_while_policy_allows(store: Store) -> None:
    config = RolloutConfig(max_attempts=2, retry_on=frozenset({AttemptStatus.FAILED}))
    await store.enqueue([rollout(config=config)])
    rid, first = await claim_one(store)
    await store.update_attempt(first, status=AttemptStatus.FAILED, error="e1")
    assert (await store.get_rollout(rid)).status is RolloutStatus.QUEUING
    rid2, second = await claim_one(store, "w2")
    assert rid2 == rid and second != first
    assert (await store.get_attempt(second)).number == 2
    await store.update_attempt(second, status=AttemptStatus.FAILED, error="e2")
    done = await store.get_rollout(rid)
    assert done.status is RolloutStatus.FAILED and done.attempt_count == 2
    attempts = await store.list_attempts(rid)
    assert [a.number for a in attempts] == [1, 2]
    assert [a.status for a in attempts] == [AttemptStatus.FAILED, AttemptStatus.FAILED]


async def test_failed_outcome_not_in_retry_on_is_final(store: Store) -> None:
    config = RolloutConfig(max_attempts=3, retry_on=frozenset({AttemptStatus.TIMEOUT}))
    await store.enqueue([rollout(config=config)])
    rid, aid = await claim_one(store)
    await store.update_attempt(aid, status=AttemptStatus.FAILED)
    assert (await store.get_rollout(rid)).status is RolloutStatus.FAILED


async def test_released_attempt_requeues_without_using_an_attempt(store: Store) -> None:
    await store.enqueue([rollout(config=RolloutConfig(max_attempts=1))])
    rid, first = await claim_one(store)
    await store.update_attempt(first, status=AttemptStatus.RELEASED)
    assert (await store.get_rollout(rid)).status is RolloutStatus.QUEUING
    _, second = await claim_one(store)
    await store.update_attempt(second, status=AttemptStatus.SUCCEEDED)
    assert (await store.get_rollout(rid)).status is RolloutStatus.SUCCEEDED


async def test_terminal_states_are_final(store: Store) -> None:
    await store.enqueue([rollout()])
    rid, aid = await claim_one(store)
    await store.update_attempt(aid, status=AttemptStatus.SUCCEEDED)
    with pytest.raises(InvalidTransition):
        await store.update_rollout(rid, status=RolloutStatus.CANCELLED)
    assert (await store.get_rollout(rid)).status is RolloutStatus.SUCCEEDED


async def test_callers_may_not_set_store_decided_statuses(store: Store) -> None:
    await store.enqueue([rollout()])
    rid, aid = await claim_one(store)
    with pytest.raises(InvalidRequest):
        await store.update_attempt(aid, status=AttemptStatus.TIMEOUT)
    with pytest.raises(InvalidRequest):
        await store.update_rollout(rid, status=RolloutStatus.SUCCEEDED)
    assert (await store.get_attempt(aid)).status is AttemptStatus.RUNNING


async def test_late_report_is_kept_but_changes_nothing(store: Store) -> None:
    config = RolloutConfig(max_attempts=2, retry_on=frozenset({AttemptStatus.FAILED}))
    await store.enqueue([rollout(config=config)])
    rid, aid = await claim_one(store)
    await store.update_attempt(aid, status=AttemptStatus.FAILED, error="first")
    late = await store.update_attempt(aid, status=AttemptStatus.SUCCEEDED, error="late")
    assert late.status is AttemptStatus.FAILED and late.error == "first"
    assert late.late_status is AttemptStatus.SUCCEEDED and late.late_error == "late"
    assert (await store.get_rollout(rid)).status is RolloutStatus.QUEUING
    assert (await store.get_attempt(aid)).late_status is AttemptStatus.SUCCEEDED


async def test_cancel_queuing_and_running_rollouts(store: Store) -> None:
    queued, running = await store.enqueue([rollout(0), rollout(1)])
    cancelled = await store.update_rollout(queued.rollout_id, status=RolloutStatus.CANCELLED)
    assert cancelled.status is RolloutStatus.CANCELLED
    rid, aid = await claim_one(store)
    assert rid == running.rollout_id  # the cancelled one is not claimable
    await store.update_rollout(rid, status=RolloutStatus.CANCELLED)
    assert (await store.get_attempt(aid)).status is AttemptStatus.CANCELLED
    late = await store.update_attempt(aid, status=AttemptStatus.SUCCEEDED)
    assert late.late_status is AttemptStatus.SUCCEEDED
    assert (await store.get_rollout(rid)).status is RolloutStatus.CANCELLED
    assert await store.claim("w") == []


async def test_update_rollout_metadata(store: Store) -> None:
    (r,) = await store.enqueue([rollout(metadata={"a": 1})])
    updated = await store.update_rollout(r.rollout_id, metadata={"a": 2, "b": [1]})
    assert updated.metadata == {"a": 2, "b": [1]}
    assert (await store.get_rollout(r.rollout_id)).metadata == {"a": 2, "b": [1]}


# -- watchdog: timeouts and lost heartbeats ----------------------------------------------------


async def test_watchdog_times_out_attempt_and_fails_rollout(store: Store) -> None:
    (r,) = await store.enqueue([rollout(config=RolloutConfig(timeout_s=0.3))])
    _, aid = await claim_one(store)
    # Nobody calls reconcile(): the background watchdog must find it.
    done = await store.wait_for_rollouts([r.rollout_id], timeout=5)
    assert [d.status for d in done] == [RolloutStatus.FAILED]
    attempt = await store.get_attempt(aid)
    assert attempt.status is AttemptStatus.TIMEOUT
    assert attempt.error and "timed out" in attempt.error


async def test_watchdog_retries_timed_out_attempt(store: Store, store_clock: StoreClock) -> None:
    config = RolloutConfig(timeout_s=0.3, max_attempts=2)
    (r,) = await store.enqueue([rollout(config=config)])
    _, first = await claim_one(store)
    # Past the first attempt's deadline; then the store's time stands still, so the retried
    # attempt cannot time out as well (and fail the rollout) however slow this machine is.
    store_clock.advance(1.0)
    await wait_status(store, r.rollout_id, RolloutStatus.QUEUING, timeout=30)
    _, second = await claim_one(store, "w2")
    await store.update_attempt(second, status=AttemptStatus.SUCCEEDED)
    assert (await store.get_rollout(r.rollout_id)).status is RolloutStatus.SUCCEEDED
    assert (await store.get_attempt(first)).status is AttemptStatus.TIMEOUT
    late = await store.update_attempt(first, status=AttemptStatus.SUCCEEDED)
    assert late.status is AttemptStatus.TIMEOUT and late.late_status is AttemptStatus.SUCCEEDED


async def test_watchdog_finds_lost_attempts_and_heartbeats_keep_them(
    store: Store, store_clock: StoreClock
) -> None:
    config = RolloutConfig(heartbeat_timeout_s=1.0, max_attempts=2)
    kept, lost = await store.enqueue([rollout(0, config=config), rollout(1, config=config)])
    _, kept_attempt = await claim_one(store, "alive")
    _, lost_attempt = await claim_one(store, "dead")
    # 1.6 s of store time, past the lost attempt's deadline, with a heartbeat every 0.1 s of
    # it: real stalls between heartbeats do not count, so the kept attempt cannot miss one.
    for _ in range(16):
        store_clock.advance(0.1)
        await store.heartbeat("alive", attempt_ids=[kept_attempt])
    await wait_status(store, lost.rollout_id, RolloutStatus.QUEUING, timeout=30)
    await store.reconcile()  # one more full pass at this time: it must leave the kept one alone
    worker = await store.heartbeat("alive", attempt_ids=[kept_attempt])
    assert worker.running_attempt_ids == [kept_attempt]
    assert (await store.get_attempt(kept_attempt)).status is AttemptStatus.RUNNING
    assert (await store.get_attempt(lost_attempt)).status is AttemptStatus.LOST
    assert (await store.get_rollout(lost.rollout_id)).status is RolloutStatus.QUEUING
    assert (await store.get_rollout(kept.rollout_id)).status is RolloutStatus.RUNNING


async def test_reconcile_can_be_called_directly(store: Store) -> None:
    await store.enqueue([rollout(config=RolloutConfig(timeout_s=0.05))])
    _, attempt_id = await claim_one(store)
    await asyncio.sleep(0.1)
    report = await store.reconcile()
    assert report.timed_out in ((), (attempt_id,))
    # The watchdog may have been first, or be ending the attempt right now: a PostgreSQL pass
    # skips rows another pass holds (SKIP LOCKED), and that pass commits a moment later.
    deadline = time.monotonic() + 5.0
    while (await store.get_attempt(attempt_id)).status is AttemptStatus.RUNNING:
        assert time.monotonic() < deadline, "the timed-out attempt was never ended"
        await asyncio.sleep(0.02)
    assert (await store.stats()).attempts[AttemptStatus.TIMEOUT] == 1


# -- spans and LLM calls ----------------------------------------------------------------------


async def test_spans_get_strictly_increasing_sequence_numbers(store: Store) -> None:
    await store.enqueue([rollout()])
    rid, aid = await claim_one(store)
    stored = await store.add_spans([span(rid, aid, f"s{i}") for i in range(5)])
    sequences = [s.sequence for s in stored]
    assert sequences == sorted(sequences) and len(set(sequences)) == 5 and sequences[0] >= 1
    more = await store.add_spans([span(rid, aid, "s5")])
    assert more[0].sequence > sequences[-1]
    page = await store.query_spans(rid)
    assert [s.span_id for s in page.items] == [f"s{i}" for i in range(6)]
    assert page.items[0].attributes == {"k": "v", "n": 1, "nested": {"a": [1, 2]}}


async def test_span_fields_round_trip(store: Store) -> None:
    await store.enqueue([rollout()])
    rid, aid = await claim_one(store)
    original = span(
        rid,
        aid,
        "s1",
        parent_id="p1",
        events=[SpanEvent(name="e", timestamp=1.5, attributes={"x": 1.25})],
        status={"code": "error", "message": "bad"},
    )
    (stored,) = await store.add_spans([original])
    (read,) = (await store.query_spans(rid)).items
    assert read == stored
    assert read.model_dump(exclude={"sequence"}) == original.model_dump()


async def test_span_appends_are_idempotent(store: Store) -> None:
    await store.enqueue([rollout()])
    rid, aid = await claim_one(store)
    first = await store.add_spans([span(rid, aid, "s1"), span(rid, aid, "s2")])
    again = await store.add_spans([span(rid, aid, "s2"), span(rid, aid, "s3")])
    assert again[0].sequence == first[1].sequence
    assert len((await store.query_spans(rid)).items) == 3
    assert (await store.stats()).spans == 3


async def test_concurrent_appends_keep_sequences_unique(store: Store) -> None:
    await store.enqueue([rollout()])
    rid, aid = await claim_one(store)

    async def append(n: int) -> list[int]:
        stored = await store.add_spans([span(rid, aid, f"t{n}-{i}") for i in range(3)])
        return [s.sequence for s in stored]

    results = await asyncio.gather(*(append(n) for n in range(15)))
    for sequences in results:
        assert sequences == sorted(sequences)
    flat = [s for seqs in results for s in seqs]
    assert len(set(flat)) == 45
    read = [s.sequence for s in (await store.query_spans(rid, limit=100)).items]
    assert read == sorted(flat)


async def test_spans_need_a_known_rollout_and_matching_attempt(store: Store) -> None:
    a, b = await store.enqueue([rollout(0), rollout(1)])
    rid_a, aid_a = await claim_one(store)
    rid_b, _ = await claim_one(store)
    with pytest.raises(NotFound):
        await store.add_spans([span("ro-nope", aid_a, "s")])
    with pytest.raises((InvalidRequest, NotFound)):
        await store.add_spans([span(rid_b, aid_a, "s")])
    with pytest.raises(NotFound):
        await store.query_spans("ro-nope")
    assert {rid_a, rid_b} == {a.rollout_id, b.rollout_id}


async def test_spans_of_superseded_attempts_are_kept(store: Store) -> None:
    config = RolloutConfig(max_attempts=2, retry_on=frozenset({AttemptStatus.FAILED}))
    await store.enqueue([rollout(config=config)])
    rid, first = await claim_one(store)
    await store.update_attempt(first, status=AttemptStatus.FAILED)
    _, second = await claim_one(store)
    await store.add_spans([span(rid, first, "late"), span(rid, second, "new")])
    assert [s.span_id for s in (await store.query_spans(rid, attempt_id=first)).items] == ["late"]
    assert [s.span_id for s in (await store.query_spans(rid, attempt_id=second)).items] == ["new"]


async def test_span_pagination_covers_everything_once(store: Store) -> None:
    await store.enqueue([rollout()])
    rid, aid = await claim_one(store)
    await store.add_spans([span(rid, aid, f"s{i:02d}") for i in range(23)])
    seen: list[str] = []
    after = 0
    while True:
        page = await store.query_spans(rid, after_sequence=after, limit=5)
        seen += [s.span_id for s in page.items]
        if page.next_cursor is None:
            break
        after = page.next_cursor
    assert seen == [f"s{i:02d}" for i in range(23)]


async def test_llm_calls_share_the_rollout_sequence_with_spans(store: Store) -> None:
    await store.enqueue([rollout()])
    rid, aid = await claim_one(store)
    (s1,) = await store.add_spans([span(rid, aid, "s1")])
    (c1,) = await store.add_llm_calls([call("c1", rid, aid)])
    (s2,) = await store.add_spans([span(rid, aid, "s2")])
    assert s1.sequence < c1.sequence < s2.sequence
    (read,) = (await store.query_llm_calls(rid)).items
    assert read.prompt_token_ids == [1, 2, 3]
    assert read.choices[0].token_ids == [7, 8]
    assert read.choices[0].logprobs == [-0.5, -0.25]
    assert read.is_token_level and read.response_id == "resp-1" and read.policy_version == "v1"
    assert read == c1


async def test_llm_calls_are_idempotent_and_untracked_ones_have_no_sequence(store: Store) -> None:
    await store.enqueue([rollout()])
    rid, aid = await claim_one(store)
    first = await store.add_llm_calls([call("c1", rid, aid)])
    again = await store.add_llm_calls([call("c1", rid, aid), call("c2", rid, aid)])
    assert again[0].sequence == first[0].sequence
    assert again[1].sequence > first[0].sequence
    (untracked,) = await store.add_llm_calls([call("u1", None, None)])
    assert untracked.sequence == 0
    assert (await store.stats()).llm_calls == 3
    assert [c.call_id for c in (await store.query_llm_calls(rid)).items] == ["c1", "c2"]


# -- rollout queries --------------------------------------------------------------------------


async def test_query_rollouts_filters(store: Store) -> None:
    await store.enqueue(
        [
            rollout(0, mode=Mode.TRAIN, task_id="t1"),
            rollout(1, mode=Mode.VAL, task_id="t1"),
            rollout(2, mode=Mode.TRAIN, task_id="t2"),
        ]
    )
    rid, aid = await claim_one(store)
    await store.update_attempt(aid, status=AttemptStatus.SUCCEEDED)
    by_status = await store.query_rollouts(RolloutQuery(statuses=[RolloutStatus.SUCCEEDED]))
    assert [r.rollout_id for r in by_status.items] == [rid]
    by_mode = await store.query_rollouts(RolloutQuery(mode=Mode.VAL))
    assert [r.input for r in by_mode.items] == [{"question": "q1", "n": 1}]
    by_task = await store.query_rollouts(RolloutQuery(task_id="t1"))
    assert len(by_task.items) == 2
    by_id = await store.query_rollouts(RolloutQuery(rollout_ids=[rid, "ro-nope"]))
    assert [r.rollout_id for r in by_id.items] == [rid]


async def test_query_rollouts_paginates_in_enqueue_order(store: Store) -> None:
    created = await store.enqueue([rollout(i) for i in range(11)])
    seen: list[str] = []
    cursor: int | None = None
    pages = 0
    while True:
        page = await store.query_rollouts(RolloutQuery(limit=4, cursor=cursor))
        pages += 1
        seen += [r.rollout_id for r in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == [r.rollout_id for r in created]
    assert pages == 3


# -- resources --------------------------------------------------------------------------------


def resources(model: str = "m1") -> ResourcesCreate:
    return ResourcesCreate(
        resources={
            "llm": LLMResource(
                base_url="http://127.0.0.1:1/v1",
                model=model,
                sampling={"default": {"temperature": 1.0}, "val": {"temperature": 0.0}},
            ),
            "prompt": PromptTemplate(template="Solve: {question}"),
        }
    )


async def test_resources_are_versioned_and_latest_is_default(store: Store) -> None:
    assert await store.latest_resources() is None
    (before,) = await store.enqueue([rollout(0)])
    assert before.resources_version is None
    v1 = await store.add_resources(resources("m1"))
    v2 = await store.add_resources(resources("m2"))
    assert (v1.version, v2.version) == (1, 2)
    latest = await store.latest_resources()
    assert latest is not None and latest.version == 2
    got = await store.get_resources(1)
    llm = got.resources["llm"]
    assert isinstance(llm, LLMResource) and llm.model == "m1"
    assert llm.sampling["val"] == {"temperature": 0.0}
    (after, pinned) = await store.enqueue([rollout(1), rollout(2, resources_version=1)])
    assert after.resources_version == 2 and pinned.resources_version == 1
    with pytest.raises(NotFound):
        await store.get_resources(3)


async def test_resources_are_idempotent_by_id(store: Store) -> None:
    first = await store.add_resources(resources().model_copy(update={"resources_id": "r-1"}))
    again = await store.add_resources(resources().model_copy(update={"resources_id": "r-1"}))
    assert again.version == first.version == 1
    with pytest.raises(Conflict):
        await store.add_resources(resources("other").model_copy(update={"resources_id": "r-1"}))
    assert (await store.stats()).resources_versions == 1


async def test_prompt_lineage_demos_and_scores_read_back_unchanged(store: Store) -> None:
    v1 = await store.add_resources(resources())
    child = PromptTemplate(
        instructions="Think first. Use {{braces}} literally.",
        template="Solve: {question}",
        demos=(
            Demonstration(inputs={"question": "1+1"}, output="2", metadata={"rollout": "r-1"}),
            Demonstration(
                inputs={"question": "2*3"},
                messages=(
                    {"role": "assistant", "content": "CALC(2*3)"},  # type: ignore[arg-type]
                    {"role": "user", "content": "RESULT: 6"},  # type: ignore[arg-type]
                ),
            ),
        ),
        lineage=PromptLineage(
            parent=v1.version,
            optimizer="apo",
            step=2,
            critique="The prompt never says to show the arithmetic.",
            edit="Added: think first.",
            run_id="apo-1",
            details={"beam": [1]},
        ),
    )
    score = PromptScore(version=2, name="prompt", score=0.75, instances={"t0": 1.0, "t1": 0.5})
    v2 = await store.add_resources(
        ResourcesCreate(
            resources={"prompt": child},
            metadata={"prompt_scores": [score.model_dump(mode="json")]},
        )
    )
    got = await store.get_resources(v2.version)
    assert got.resources["prompt"] == child
    assert got.resources["prompt"].model_dump() == child.model_dump()
    assert [PromptScore.model_validate(s) for s in got.metadata["prompt_scores"]] == [score]  # type: ignore[union-attr]


# -- waiting, workers, statistics -------------------------------------------------------------


async def test_wait_for_rollouts_wakes_when_they_finish(store: Store) -> None:
    a, b = await store.enqueue([rollout(0), rollout(1)])
    claims = await store.claim("w", limit=2)

    async def finish_later() -> None:
        await asyncio.sleep(0.2)
        for c in claims:
            await store.update_attempt(c.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)

    started = time.monotonic()
    task = asyncio.create_task(finish_later())
    done = await store.wait_for_rollouts([a.rollout_id, b.rollout_id], timeout=10)
    elapsed = time.monotonic() - started
    await task
    assert [r.rollout_id for r in done] == [a.rollout_id, b.rollout_id]
    assert all(r.status is RolloutStatus.SUCCEEDED for r in done)
    assert elapsed < 5  # woken by the change, not by the 10 s timeout


async def test_wait_for_rollouts_returns_finished_ones_at_timeout(store: Store) -> None:
    a, b = await store.enqueue([rollout(0), rollout(1)])
    await store.update_rollout(a.rollout_id, status=RolloutStatus.CANCELLED)
    started = time.monotonic()
    done = await store.wait_for_rollouts([a.rollout_id, b.rollout_id], timeout=0.3)
    assert time.monotonic() - started >= 0.25
    assert [r.rollout_id for r in done] == [a.rollout_id]


async def test_workers_and_stats(store: Store) -> None:
    await store.enqueue([rollout(i) for i in range(3)])
    claims = await store.claim("w1", limit=2)
    worker = await store.heartbeat(
        "w1", attempt_ids=[c.attempt.attempt_id for c in claims], metadata={"host": "h"}
    )
    assert worker.worker_id == "w1" and worker.metadata == {"host": "h"}
    await store.update_attempt(claims[0].attempt.attempt_id, status=AttemptStatus.SUCCEEDED)
    worker = await store.heartbeat("w1", attempt_ids=[c.attempt.attempt_id for c in claims])
    assert worker.running_attempt_ids == [claims[1].attempt.attempt_id]
    workers = await store.list_workers()
    assert [w.worker_id for w in workers] == ["w1"]
    stats = await store.stats()
    assert stats.rollouts[RolloutStatus.QUEUING] == 1
    assert stats.rollouts[RolloutStatus.RUNNING] == 1
    assert stats.rollouts[RolloutStatus.SUCCEEDED] == 1
    assert stats.attempts[AttemptStatus.SUCCEEDED] == 1
    assert stats.workers == 1


# -- durability and auth (by capability) -------------------------------------------------------


async def test_data_survives_reopening(backend: Backend) -> None:
    async with backend.open() as store:
        if not store.capabilities.is_durable:
            pytest.skip("backend is not durable")
        (r,) = await store.enqueue([rollout()])
        rid, aid = await claim_one(store)
        await store.add_spans([span(rid, aid, "s1")])
        await store.add_llm_calls([call("c1", rid, aid)])
        await store.add_resources(resources())
    async with backend.open() as store:
        assert (await store.get_rollout(r.rollout_id)).status is RolloutStatus.RUNNING
        assert [s.span_id for s in (await store.query_spans(rid)).items] == ["s1"]
        assert [c.call_id for c in (await store.query_llm_calls(rid)).items] == ["c1"]
        (s2,) = await store.add_spans([span(rid, aid, "s2")])
        assert s2.sequence == 3  # the sequence continues after span 1 and call 2
        assert (await store.latest_resources()) is not None


async def test_remote_store_requires_the_token(backend: Backend, store: Store) -> None:
    if not store.capabilities.is_remote:
        pytest.skip("not a remote store")
    async with backend.open(token="wrong") as bad:
        with pytest.raises(Unauthorized):
            await bad.stats()
    async with backend.open(token=None) as anonymous:
        with pytest.raises(Unauthorized):
            await anonymous.enqueue([rollout()])
    assert (await store.stats()).rollouts[RolloutStatus.QUEUING] == 0


# -- limits: what the store acknowledges it reads back; no input is a server error ------------

EDGE_JSON = {
    "wide_int": 2**100,
    "int64_min": -(2**63),
    "subnormal": 5e-324,
    "largest": 1.7976931348623157e308,
    "nul_in_data": "a\x00b",
    "unicode": "日本語 ✓",
}


async def test_values_at_their_limits_read_back_unchanged(store: Store) -> None:
    rollout_id = "é" * 128  # ids are counted in characters, multi-byte ones too
    config = RolloutConfig(timeout_s=1e300, heartbeat_timeout_s=1e300)
    request = rollout(0, rollout_id=rollout_id, task_id="t" * 256, config=config)
    request = request.model_copy(update={"input": EDGE_JSON, "metadata": {"m": EDGE_JSON}})
    await store.enqueue([request])
    got = await store.get_rollout(rollout_id)
    assert (got.input, got.metadata, got.task_id) == (EDGE_JSON, {"m": EDGE_JSON}, "t" * 256)
    assert got.config == config
    claimed_id, attempt_id = await claim_one(store)
    assert claimed_id == rollout_id
    await store.reconcile()  # huge timeouts are compared, not added to dates
    assert (await store.get_attempt(attempt_id)).status is AttemptStatus.RUNNING
    edge = span(
        rollout_id, attempt_id, "b" * 64, trace_id="a" * 64, parent_id="ü" * 64,
        start_time=-1.7976931348623157e308, attributes=EDGE_JSON,
    )  # fmt: skip
    await store.add_spans([edge])
    (stored,) = (await store.query_spans(rollout_id)).items
    assert stored.model_dump(exclude={"sequence"}) == edge.model_dump()
    record = call("c" * 128, rollout_id, attempt_id).model_copy(
        update={"choices": [LLMChoice(token_ids=[1], logprobs=[-1e308])], "request": EDGE_JSON}
    )
    await store.add_llm_calls([record])
    (stored_call,) = (await store.query_llm_calls(rollout_id)).items
    assert stored_call.model_dump(exclude={"sequence"}) == record.model_dump()


async def test_out_of_range_arguments_are_never_a_server_error(store: Store) -> None:
    """Lookups beyond what a column holds answer empty, ``NotFound`` or ``InvalidRequest``."""
    (r,) = await store.enqueue([rollout()])
    int64_max = 2**63 - 1
    assert (await store.query_rollouts(RolloutQuery(cursor=int64_max))).items == []
    assert (await store.query_spans(r.rollout_id, after_sequence=int64_max)).items == []
    lookups = [
        lambda: store.get_resources(2**31 - 1),
        lambda: store.get_resources(2**40),
        lambda: store.get_rollout("a\x00b"),
        lambda: store.get_attempt("x" * 1000),
        lambda: store.query_spans(r.rollout_id, after_sequence=2**70),
        lambda: store.query_llm_calls(r.rollout_id, after_sequence=2**70),
    ]
    for lookup in lookups:
        try:
            result = await lookup()
        except (NotFound, InvalidRequest):
            continue
        assert not getattr(result, "items", None), result


async def test_write_arguments_follow_the_wire_rules(store: Store) -> None:
    """Plain arguments that reach a column are refused alike on every backend."""
    with pytest.raises(InvalidRequest, match="worker_id"):
        await store.claim("w\x00")
    with pytest.raises(InvalidRequest, match="claim_id"):
        await store.claim("w", claim_id="c" * 129)
    with pytest.raises(InvalidRequest, match="attempt_ids"):
        await store.heartbeat("w", attempt_ids=["a\x00"])
    with pytest.raises(InvalidRequest, match="metadata"):
        await store.heartbeat("w", metadata={"load": float("nan")})
    await store.enqueue([rollout()])
    rid, aid = await claim_one(store)
    with pytest.raises(InvalidRequest, match="error"):
        await store.update_attempt(aid, status=AttemptStatus.FAILED, error="boom\x00")
    with pytest.raises(InvalidRequest, match="metadata"):
        await store.update_rollout(rid, metadata={"x": float("inf")})
    attempt = await store.get_attempt(aid)
    assert (attempt.status, attempt.error) == (AttemptStatus.RUNNING, None)
    assert (await store.get_rollout(rid)).metadata == {}
    assert "w" not in {w.worker_id for w in await store.list_workers()}


# -- posted rewards ---------------------------------------------------------------------------


async def finished_with_records(store: Store, i: int, **kw: object) -> tuple[str, str]:
    """Enqueue, claim and finish one rollout that recorded one span and one call."""
    (r,) = await store.enqueue([rollout(i, **kw)])
    (c,) = await store.claim(f"w{i}", claim_id=f"claim-{r.rollout_id}")
    rid, aid = c.rollout.rollout_id, c.attempt.attempt_id
    await store.add_spans([span(rid, aid, "s1")])
    record = call(f"call-{rid}", rid, aid).model_copy(update={"response_id": f"resp-{rid}"})
    await store.add_llm_calls([record])
    await store.update_attempt(aid, status=AttemptStatus.SUCCEEDED)
    return rid, aid


async def test_reward_posted_after_the_rollout_finished_is_its_latest_record(
    store: Store,
) -> None:
    rid, _ = await finished_with_records(store, 0)
    reward = await store.add_reward(RewardCreate.scalar(0.75, rollout_id=rid))
    assert (reward.rollout_id, reward.attempt_id, reward.values) == (rid, None, {"reward": 0.75})
    assert reward.primary == "reward"
    # The rollout's counter numbered the span (1) and the call (2): the reward comes after.
    assert reward.sequence == 3
    assert await store.list_rewards(rid) == [reward]
    assert (await store.get_rollout(rid)).status is RolloutStatus.SUCCEEDED


async def test_reward_by_response_id_names_the_calls_attempt(store: Store) -> None:
    rid, aid = await finished_with_records(store, 0)
    await store.add_llm_calls([call("untracked", None, None)])  # response id resp-1
    named = RewardCreate(response_id=f"resp-{rid}", values={"thumbs": 1.0, "latency": -2.0})
    reward = await store.add_reward(named)
    assert (reward.rollout_id, reward.attempt_id, reward.primary) == (rid, aid, None)
    assert reward.values == {"thumbs": 1.0, "latency": -2.0}
    with pytest.raises(NotFound, match="resp-1"):
        await store.add_reward(RewardCreate.scalar(1.0, response_id="resp-1"))
    with pytest.raises(NotFound, match="no-such"):
        await store.add_reward(RewardCreate.scalar(1.0, rollout_id="no-such"))
    with pytest.raises(NotFound):
        await store.list_rewards("no-such")


async def test_reward_by_session_id_reaches_the_sessions_rollout(store: Store) -> None:
    rid, _ = await finished_with_records(
        store, 0, rollout_id=session_rollout_id("user-42"), mode=Mode.PRODUCTION
    )
    reward = await store.add_reward(RewardCreate.scalar(-1.0, session_id="user-42"))
    assert (reward.rollout_id, reward.session_id) == (rid, "user-42")
    with pytest.raises(NotFound):
        await store.add_reward(RewardCreate.scalar(1.0, session_id="user-43"))


async def test_reward_key_stores_once_and_refuses_other_content(store: Store) -> None:
    rid, _ = await finished_with_records(store, 0)
    first = await store.add_reward(RewardCreate.scalar(1.0, rollout_id=rid, key="fb-1"))
    again = await store.add_reward(RewardCreate.scalar(1.0, rollout_id=rid, key="fb-1"))
    assert again == first
    with pytest.raises(Conflict, match="fb-1"):
        await store.add_reward(RewardCreate.scalar(0.0, rollout_id=rid, key="fb-1"))
    unkeyed = [await store.add_reward(RewardCreate.scalar(0.5, rollout_id=rid)) for _ in "ab"]
    assert len({r.key for r in unkeyed}) == 2
    assert [r.key for r in await store.list_rewards(rid)] == ["fb-1", *(r.key for r in unkeyed)]


# -- prune ------------------------------------------------------------------------------------


async def record_counts(store: Store, rollout_id: str) -> tuple[int, int, int, int]:
    return (
        len(await store.list_attempts(rollout_id)),
        len((await store.query_spans(rollout_id)).items),
        len((await store.query_llm_calls(rollout_id)).items),
        len(await store.list_rewards(rollout_id)),
    )


async def test_prune_deletes_old_finished_rollouts_and_nothing_else(store: Store) -> None:
    plain, _ = await finished_with_records(store, 0)
    rewarded, _ = await finished_with_records(store, 1)
    await store.add_reward(RewardCreate.scalar(1.0, rollout_id=rewarded))
    span_rewarded, span_attempt = await finished_with_records(store, 2)
    await store.add_spans([span(span_rewarded, span_attempt, "r", name="fulmen.reward")])
    validation, _ = await finished_with_records(store, 3, mode=Mode.VAL)
    await asyncio.sleep(0.01)
    cut = datetime.now(UTC)
    await asyncio.sleep(0.01)
    recent, _ = await finished_with_records(store, 5)
    _, queued = await store.enqueue([rollout(4), rollout(7)])
    running, running_attempt = await claim_one(store)  # the first of the two; FIFO
    await store.add_spans([span(running, running_attempt, "x")])
    before = {r: await record_counts(store, r) for r in (rewarded, span_rewarded, validation)}

    dry = await store.prune(
        PruneRequest(ended_before=cut, keep_rewarded=True, modes=[Mode.TRAIN], dry_run=True)
    )
    assert dry == PruneReport(dry_run=True, rollouts=1, attempts=1, spans=1, llm_calls=1)
    assert await record_counts(store, plain) == (1, 1, 1, 0)

    done = await store.prune(PruneRequest(ended_before=cut, keep_rewarded=True, modes=[Mode.TRAIN]))
    assert done == dry.model_copy(update={"dry_run": False})
    with pytest.raises(NotFound):
        await store.get_rollout(plain)
    for kept, counts in before.items():
        assert await record_counts(store, kept) == counts
    assert (await store.get_rollout(queued.rollout_id)).status is RolloutStatus.QUEUING
    assert (await store.get_rollout(running)).status is RolloutStatus.RUNNING
    assert await record_counts(store, running) == (1, 1, 0, 0)
    assert await record_counts(store, recent) == (1, 1, 1, 0)
    # The claim that took the pruned rollout replays without it.
    assert await store.claim("w0", claim_id=f"claim-{plain}") == []

    everything = await store.prune(PruneRequest(ended_before=cut))
    assert everything == PruneReport(
        dry_run=False, rollouts=3, attempts=3, spans=4, llm_calls=3, rewards=1
    )
    stats = await store.stats()
    assert sum(stats.rollouts.values()) == 3  # queued, running, recent
    assert (stats.spans, stats.llm_calls) == (2, 1)
    (later,) = await store.enqueue([rollout(6)])
    assert later.position > (await store.get_rollout(recent)).position
    with pytest.raises(NotFound):
        await store.add_reward(RewardCreate.scalar(1.0, response_id=f"resp-{plain}"))


async def test_a_pruned_rollout_cancelled_while_queuing_leaves_the_queue_working(
    store: Store,
) -> None:
    cancelled, waiting = await store.enqueue([rollout(0), rollout(1)])
    await store.update_rollout(cancelled.rollout_id, status=RolloutStatus.CANCELLED)
    report = await store.prune(PruneRequest(ended_before=datetime.now(UTC)))
    assert (report.rollouts, report.attempts) == (1, 0)
    (claim,) = await store.claim("w")
    assert claim.rollout.rollout_id == waiting.rollout_id
