"""AutoGen AgentChat (an assistant with one tool), unchanged, pointed at the gateway."""

from __future__ import annotations

import pytest

pytest.importorskip("autogen_agentchat")
pytest.importorskip("autogen_ext.models.openai")

from autogen_agentchat.agents import AssistantAgent
from autogen_ext.models.openai import OpenAIChatCompletionClient

from tests.gateway.conftest import Running, new_attempt
from tests.gateway.scripted_upstream import Reply

MODEL_INFO = {
    "vision": False,
    "function_calling": True,
    "json_output": False,
    "family": "unknown",
    "structured_output": False,
}


async def test_assistant_with_a_tool_is_captured(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.extend([Reply(tool_calls=[("add", {"a": 2, "b": 2})]), Reply(content="4")])
    seen: list[tuple[int, int]] = []

    async def add(a: int, b: int) -> int:
        """Add two integers."""
        seen.append((a, b))
        return a + b

    client = OpenAIChatCompletionClient(
        model="tiny-model",
        base_url=gw.base_url(rollout_id, attempt_id),
        api_key="x",
        model_info=MODEL_INFO,
    )
    agent = AssistantAgent("assistant", model_client=client, tools=[add], reflect_on_tool_use=True)
    result = await agent.run(task="What is 2+2?")
    await client.close()
    assert seen == [(2, 2)]
    assert result.messages[-1].content == "4"
    calls = await gw.calls(rollout_id)
    assert len(calls) == 2
    assert all(c.is_token_level and c.attempt_id == attempt_id for c in calls)
    assert calls[0].choices[0].finish_reason == "tool_calls"
    assert calls[1].choices[0].text == "4"
