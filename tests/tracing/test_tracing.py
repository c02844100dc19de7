"""Tracing against a real MemoryStore: isolation of concurrent rollouts, batching, no loss."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from opentelemetry import trace

from fulmen.errors import ConfigError
from fulmen.store import Store
from fulmen.tracing import (
    agent_names_by_response_id,
    as_agent,
    current_trace,
    emit_exception,
    emit_message,
    emit_observation,
    emit_reward,
    operation,
    primary_reward,
    rewards_from_spans,
    rollout_scope,
    semconv,
)
from fulmen.types import Span, SpanStatusCode
from tests.tracing.conftest import Tracing, claim_many


async def spans_of(store: Store, rollout_id: str) -> list[Span]:
    return (await store.query_spans(rollout_id, limit=10_000)).items


async def test_concurrent_rollouts_do_not_cross_talk(tracing: Tracing) -> None:
    claims = await claim_many(tracing.store, 60)

    async def one(index: int) -> None:
        c = claims[index]
        with rollout_scope(tracing.tracer, c.rollout.rollout_id, c.attempt.attempt_id):  # type: ignore[arg-type]
            for step in range(3):
                async with as_agent(f"agent-{index}"):
                    await asyncio.sleep(0.001 * ((index * 7 + step) % 5))  # interleave tasks
                    emit_observation({"index": index, "step": step})
            emit_reward(float(index))

    await asyncio.gather(*(one(i) for i in range(len(claims))))
    await tracing.exporter.flush()
    for index, c in enumerate(claims):
        spans = await spans_of(tracing.store, c.rollout.rollout_id)
        # root + 3 agent spans + 3 observations + 1 reward, nothing from other rollouts
        assert len(spans) == 8
        assert {s.attempt_id for s in spans} == {c.attempt.attempt_id}
        assert {s.trace_id for s in spans} == {spans[-1].trace_id}
        assert rewards_from_spans(spans) == {"reward": float(index)}
        observed = [s for s in spans if s.name == semconv.SPAN_OBSERVATION]
        assert {s.attributes[semconv.AGENT_NAME] for s in observed} == {f"agent-{index}"}
        assert all(
            f'"index": {index}' in str(s.attributes[semconv.OBSERVATION_CONTENT]) for s in observed
        )
    assert tracing.exporter.dropped == 0


async def test_spans_are_batched_off_the_hot_path_and_none_lost(store: Store) -> None:
    from fulmen.tracing.exporter import StoreSpanExporter
    from fulmen.tracing.provider import create_provider, provider_tracer

    calls: list[int] = []
    original = store.add_spans

    async def counting_add_spans(spans: Any) -> Any:
        calls.append(len(spans))
        return await original(spans)

    store.add_spans = counting_add_spans  # type: ignore[method-assign]
    exporter = StoreSpanExporter(store, batch_size=64, interval=10.0)
    exporter.start()
    provider = create_provider(exporter)
    tracer = provider_tracer(provider)
    (claim,) = await claim_many(store, 1)
    with rollout_scope(tracer, claim.rollout.rollout_id, claim.attempt.attempt_id):
        for i in range(500):
            with operation("step", i=i):
                pass
        # emitting never awaited the store: nothing is stored yet
        assert calls == []
    await exporter.flush()
    spans = await spans_of(store, claim.rollout.rollout_id)
    assert len(spans) == 501  # 500 operations + the root, none lost at rollout end
    assert max(calls) <= 64 and len(calls) >= 500 // 64
    assert sorted(s.attributes.get("i", -1) for s in spans if s.name == "step") == list(range(500))
    await exporter.aclose()
    provider.shutdown()


async def test_spans_from_worker_threads_keep_their_rollout(tracing: Tracing) -> None:
    claims = await claim_many(tracing.store, 8)

    def work(index: int) -> None:
        c = claims[index]
        with rollout_scope(tracing.tracer, c.rollout.rollout_id, c.attempt.attempt_id):  # type: ignore[arg-type]
            with as_agent("threaded"):
                emit_message("assistant", f"hello {index}")
            emit_reward({"score": index / 10, "len": 3}, primary="score")

    await asyncio.gather(*(asyncio.to_thread(work, i) for i in range(8)))
    await tracing.exporter.flush()
    for index, c in enumerate(claims):
        spans = await spans_of(tracing.store, c.rollout.rollout_id)
        message = next(s for s in spans if s.name == semconv.SPAN_MESSAGE)
        assert message.attributes[semconv.MESSAGE_CONTENT] == f"hello {index}"
        assert message.attributes[semconv.AGENT_NAME] == "threaded"
        assert primary_reward(spans) == pytest.approx(index / 10)


async def test_operation_decorator_records_exceptions_sync_and_async(tracing: Tracing) -> None:
    (claim,) = await claim_many(tracing.store, 1)

    @operation("tool.sync", tool="calc")
    def sync_tool(x: int) -> int:
        if x < 0:
            raise ValueError("negative")
        return x * 2

    @as_agent("helper")
    async def async_tool(x: int) -> int:
        await asyncio.sleep(0)
        return sync_tool(x)

    with rollout_scope(tracing.tracer, claim.rollout.rollout_id, claim.attempt.attempt_id):  # type: ignore[arg-type]
        assert await async_tool(2) == 4
        with pytest.raises(ValueError, match="negative"):
            await async_tool(-1)
        try:
            raise KeyError("lost key")
        except KeyError as exc:
            emit_exception(exc)
    await tracing.exporter.flush()
    spans = await spans_of(tracing.store, claim.rollout.rollout_id)
    tools = [s for s in spans if s.name == "tool.sync"]
    assert [t.status.code for t in tools] == [SpanStatusCode.UNSET, SpanStatusCode.ERROR]
    assert all(t.attributes["tool"] == "calc" for t in tools)
    assert all(t.attributes[semconv.AGENT_NAME] == "helper" for t in tools)
    by_id = {s.span_id: s for s in spans}
    assert all(by_id[t.parent_id or ""].name == semconv.SPAN_AGENT for t in tools)
    assert any(e.name == "exception" for e in tools[1].events)
    exc_span = next(s for s in spans if s.name == semconv.SPAN_EXCEPTION)
    assert exc_span.attributes[semconv.EXCEPTION_TYPE] == "KeyError"
    assert "lost key" in str(exc_span.attributes[semconv.EXCEPTION_STACKTRACE])


async def test_emitters_outside_a_rollout_do_nothing(caplog: pytest.LogCaptureFixture) -> None:
    assert current_trace() is None
    with caplog.at_level(logging.WARNING, logger="fulmen.tracing.emitters"):
        emit_reward(1.0)
    assert "outside a rollout" in caplog.text
    with operation("x") as span:
        assert not span.is_recording()


def test_reward_values_are_checked() -> None:
    with pytest.raises(ConfigError, match="finite"):
        emit_reward(float("nan"))
    with pytest.raises(ConfigError, match="'b'"):
        emit_reward({"a": 1.0}, primary="b")
    with pytest.raises(ConfigError, match="number"):
        emit_reward({"a": "high"})  # type: ignore[dict-item]


async def test_the_runner_provider_is_never_the_global_one(tracing: Tracing) -> None:
    (claim,) = await claim_many(tracing.store, 1)
    global_provider = trace.get_tracer_provider()
    with rollout_scope(tracing.tracer, claim.rollout.rollout_id, claim.attempt.attempt_id):  # type: ignore[arg-type]
        # code using OTel's global API inside a rollout does not reach fulmen's exporter
        trace.get_tracer("someone-else").start_span("global").end()
    assert trace.get_tracer_provider() is global_provider
    await tracing.exporter.flush()
    names = [s.name for s in await spans_of(tracing.store, claim.rollout.rollout_id)]
    assert names == [semconv.SPAN_ROLLOUT]


async def test_agent_names_join_by_response_id(tracing: Tracing) -> None:
    (claim,) = await claim_many(tracing.store, 1)
    with rollout_scope(tracing.tracer, claim.rollout.rollout_id, claim.attempt.attempt_id):  # type: ignore[arg-type]
        with as_agent("planner"), operation("llm", **{semconv.RESPONSE_ID: "chatcmpl-1"}):
            pass
        # an OpenInference-style span: the response id is inside output.value
        with (
            as_agent("critic"),
            operation("ChatOpenAI", **{"output.value": '{"id": "chatcmpl-2"}'}),
        ):
            pass
        with operation("orphan", **{semconv.RESPONSE_ID: "chatcmpl-3"}):
            pass
    await tracing.exporter.flush()
    spans = await spans_of(tracing.store, claim.rollout.rollout_id)
    assert agent_names_by_response_id(spans) == {"chatcmpl-1": "planner", "chatcmpl-2": "critic"}


async def test_per_call_reward_names_its_response(tracing: Tracing) -> None:
    (claim,) = await claim_many(tracing.store, 1)
    scope = rollout_scope(tracing.tracer, claim.rollout.rollout_id, claim.attempt.attempt_id)  # type: ignore[arg-type]
    with scope, as_agent("judge"):
        emit_reward(0.25, response_id="chatcmpl-9")
    await tracing.exporter.flush()
    spans = await spans_of(tracing.store, claim.rollout.rollout_id)
    (reward,) = [s for s in spans if s.name == semconv.SPAN_REWARD]
    assert reward.attributes[semconv.RESPONSE_ID] == "chatcmpl-9"
    assert reward.attributes[semconv.AGENT_NAME] == "judge"
    assert agent_names_by_response_id(spans) == {}


async def test_rewards_are_recorded_when_otel_sdk_is_disabled(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CrewAI's test setup (and some users) set this; fulmen's spans carry rewards and must stay.
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    from fulmen.tracing.exporter import StoreSpanExporter
    from fulmen.tracing.provider import create_provider, provider_tracer

    exporter = StoreSpanExporter(store, batch_size=50, interval=0.05)
    exporter.start()
    provider = create_provider(exporter)
    (claim,) = await claim_many(store, 1)
    tracer = provider_tracer(provider)
    with rollout_scope(tracer, claim.rollout.rollout_id, claim.attempt.attempt_id):
        emit_reward(0.5)
    await exporter.flush()
    rewards = rewards_from_spans(await spans_of(store, claim.rollout.rollout_id))
    await exporter.aclose()
    provider.shutdown()
    assert rewards == {"reward": 0.5}


async def test_a_span_with_hundreds_of_attributes_keeps_its_rollout(tracing: Tracing) -> None:
    # OpenInference writes every field of every message as its own attribute; OTel's default
    # limit (128) dropped the oldest ones, the rollout ids, and with them the whole span.
    (claim,) = await claim_many(tracing.store, 1)
    tracer: Any = tracing.tracer
    with (
        rollout_scope(tracer, claim.rollout.rollout_id, claim.attempt.attempt_id),
        as_agent("researcher"),
        tracer.start_as_current_span("Response") as span,
    ):
        for i in range(150):
            span.set_attribute(f"llm.input_messages.{i}.message.role", "user")
            span.set_attribute(f"llm.input_messages.{i}.message.content", f"turn {i}")
        span.set_attribute("output.value", '{"id": "resp-1"}')
    await tracing.exporter.flush()
    spans = await spans_of(tracing.store, claim.rollout.rollout_id)
    (stored,) = [s for s in spans if s.name == "Response"]
    assert len(stored.attributes) >= 302
    assert stored.attributes["llm.input_messages.0.message.content"] == "turn 0"
    assert agent_names_by_response_id(spans) == {"resp-1": "researcher"}
