"""OpenAI Agents SDK (its default Responses model and the chat-completions one), at the gateway."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIProvider,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from fulmen.agent.api import rollout
from fulmen.agent.context import LLM
from fulmen.transitions.trajectory import TransitionOptions
from tests.gateway.conftest import Running, new_attempt
from tests.gateway.scripted_upstream import Reply
from tests.integrations.through_runner import (
    agent_names,
    assert_reward,
    assert_token_level,
    instrumentation,
    run_one,
)


async def test_agent_with_a_tool_is_captured(gw: Running) -> None:
    set_tracing_disabled(True)  # no export to a hosted tracing service
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.extend([Reply(tool_calls=[("add", {"a": 2, "b": 2})]), Reply(content="4")])
    seen: list[tuple[int, int]] = []

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        seen.append((a, b))
        return a + b

    client = AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
    agent = Agent(
        name="calculator",
        instructions="Use the add tool.",
        tools=[add],
        model=OpenAIChatCompletionsModel(model="tiny-model", openai_client=client),
    )
    result = await Runner.run(agent, "What is 2+2?")
    await client.close()
    assert result.final_output == "4"
    assert seen == [(2, 2)]
    calls = await gw.calls(rollout_id)
    assert len(calls) == 2
    assert all(c.is_token_level and c.attempt_id == attempt_id for c in calls)
    assert calls[0].choices[0].finish_reason == "tool_calls"
    assert calls[0].choices[0].token_ids and calls[0].choices[0].logprobs
    tool_messages = [m for m in calls[1].request["messages"] if m.get("role") == "tool"]
    assert tool_messages and tool_messages[0]["content"] == "4"
    # The second prompt extends the first prompt + completion token-exactly.
    first = calls[0].prompt_token_ids
    assert calls[1].prompt_token_ids[: len(first)] == first


@rollout
async def calculator_rollout(task: dict[str, Any], llm: LLM) -> float:
    """The agent as a fulmen rollout: its reward is whether the answer is right."""

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
        agent = Agent(
            name="calculator",
            instructions="Use the add tool.",
            tools=[add],
            model=OpenAIChatCompletionsModel(model=llm.model, openai_client=client),
        )
        result = await Runner.run(agent, task["question"])
    return 1.0 if result.final_output == task["expected"] else 0.0


@pytest.mark.parametrize("instrumented", [True, False], ids=["instrumented", "plain"])
async def test_agent_through_the_runner(gw: Running, instrumented: bool) -> None:
    # The Agents SDK's generation spans carry no response id; OpenInference's openai client
    # spans nest under them and do, so both instrumentations together attribute each call.
    frameworks = instrumentation("openai_agents", instrumented)
    frameworks += instrumentation("openai", instrumented)
    gw.script.replies.extend([Reply(tool_calls=[("add", {"a": 2, "b": 2})]), Reply(content="4")])
    # The SDK's tracing feeds the instrumentor (which replaces the SDK's hosted exporter);
    # without the instrumentor it stays off so nothing is sent to a hosted tracing service.
    set_tracing_disabled(not instrumented)
    try:
        task = {"question": "2+2?", "expected": "4"}
        records = await run_one(gw, calculator_rollout, frameworks, task)
    finally:
        set_tracing_disabled(True)
    assert_token_level(records)
    assert [c.choices[0].finish_reason for c in records.calls] == ["tool_calls", "stop"]
    assert records.calls[1].choices[0].text == "4"
    assert_reward(records, 1.0)
    # Named either way: the call records carry the SDK's agent name (no package needed).
    assert [c.agent_name for c in records.calls] == ["calculator", "calculator"]
    assert agent_names(records) == ["calculator", "calculator"]


@rollout
async def default_model_rollout(task: dict[str, Any], llm: LLM) -> float:
    """The agent on the SDK's default model (the Responses API), as its author wrote it."""

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
        # No model class chosen: the provider's default, OpenAIResponsesModel.
        config = RunConfig(model_provider=OpenAIProvider(openai_client=client))
        agent = Agent(
            name="calculator", instructions="Use the add tool.", tools=[add], model=llm.model
        )
        result = await Runner.run(agent, task["question"], run_config=config)
    return 1.0 if result.final_output == task["expected"] else 0.0


async def test_default_model_trains_through_the_responses_api(gw: Running) -> None:
    set_tracing_disabled(True)
    gw.script.replies.extend([Reply(tool_calls=[("add", {"a": 2, "b": 2})]), Reply(content="4")])
    task = {"question": "2+2?", "expected": "4"}
    records = await run_one(gw, default_model_rollout, [], task)  # no instrumentation
    assert [c.endpoint for c in records.calls] == ["responses", "responses"]
    assert_token_level(records)
    assert [c.choices[0].finish_reason for c in records.calls] == ["tool_calls", "stop"]
    assert_reward(records, 1.0)
    # The engine got chat completions, the tool result included.
    assert "input" in records.calls[1].request and "messages" in gw.script.requests[1]
    assert [m["role"] for m in gw.script.requests[1]["messages"]][-2:] == ["assistant", "tool"]
    # The SDK's own agent name, with no instrumentation and no as_agent in the agent's code.
    assert [c.agent_name for c in records.calls] == ["calculator", "calculator"]
    trajectory = records.trajectory(options=TransitionOptions(agents=("calculator",), merge=True))
    (transition,) = trajectory.transitions  # two calls, one token-exact masked sequence
    assert transition.agent_name == "calculator" and trajectory.diagnostics.merges == 1
    assert transition.call_ids == [c.call_id for c in records.calls]


async def test_default_model_streamed_run_is_captured(gw: Running) -> None:
    set_tracing_disabled(True)
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.extend([Reply(tool_calls=[("add", {"a": 2, "b": 2})]), Reply(content="4")])

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    client = AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
    config = RunConfig(model_provider=OpenAIProvider(openai_client=client))
    agent = Agent(name="calculator", instructions="Use the add tool.", tools=[add], model="m")
    result = Runner.run_streamed(agent, "What is 2+2?", run_config=config)
    kinds = [event.type async for event in result.stream_events()]
    await client.close()
    assert result.final_output == "4"
    assert "raw_response_event" in kinds
    calls = await gw.calls(rollout_id)
    assert [(c.endpoint, c.is_stream, c.is_token_level) for c in calls] == [
        ("responses", True, True),
        ("responses", True, True),
    ]
    assert [c.choices[0].finish_reason for c in calls] == ["tool_calls", "stop"]
    assert calls[1].choices[0].text == "4"


@rollout
async def handoff_rollout(task: dict[str, Any], llm: LLM) -> float:
    """A triage agent hands off to a specialist: two agents of the SDK, default model."""
    async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
        config = RunConfig(model_provider=OpenAIProvider(openai_client=client))
        specialist = Agent(name="specialist", instructions="Answer.", model=llm.model)
        triage = Agent(
            name="triage", instructions="Hand off.", handoffs=[specialist], model=llm.model
        )
        result = await Runner.run(triage, task["question"], run_config=config)
    return 1.0 if result.final_output == task["expected"] else 0.0


async def test_handoff_calls_carry_each_agents_own_name(gw: Running) -> None:
    set_tracing_disabled(True)
    gw.script.replies.extend(
        [Reply(tool_calls=[("transfer_to_specialist", {})]), Reply(content="4")]
    )
    records = await run_one(gw, handoff_rollout, [], {"question": "2+2?", "expected": "4"})
    assert_token_level(records)
    assert_reward(records, 1.0)
    assert [c.agent_name for c in records.calls] == ["triage", "specialist"]
    trajectory = records.trajectory(options=TransitionOptions(agents=("specialist",)))
    (transition,) = trajectory.transitions
    assert transition.agent_name == "specialist"
    assert transition.call_ids == [records.calls[1].call_id]
