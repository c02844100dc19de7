"""OpenAI Agents SDK (chat-completions model, one tool), unchanged, pointed at the gateway."""

from __future__ import annotations

import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from tests.gateway.conftest import Running, new_attempt
from tests.gateway.scripted_upstream import Reply


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
