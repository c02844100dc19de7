"""AutoGen AgentChat (an assistant with one tool), unchanged, pointed at the gateway."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("autogen_agentchat")
pytest.importorskip("autogen_ext.models.openai")

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_ext.models.openai import OpenAIChatCompletionClient

from fulmen.agent.api import rollout
from fulmen.agent.context import LLM
from fulmen.transitions.trajectory import TransitionOptions
from tests.gateway.conftest import Running, new_attempt
from tests.gateway.scripted_upstream import Reply, encode
from tests.integrations.through_runner import (
    agent_names,
    assert_reward,
    assert_token_level,
    instrumentation,
    run_one,
)

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


@rollout
async def assistant_rollout(task: dict[str, Any], llm: LLM) -> float:
    """The assistant as a fulmen rollout: its reward is whether the answer is right."""

    async def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    client = OpenAIChatCompletionClient(
        model=llm.model, base_url=llm.base_url, api_key=llm.api_key, model_info=MODEL_INFO
    )
    agent = AssistantAgent("assistant", model_client=client, tools=[add], reflect_on_tool_use=True)
    try:
        result = await agent.run(task=task["question"])
    finally:
        await client.close()
    return 1.0 if result.messages[-1].content == task["expected"] else 0.0


@pytest.mark.parametrize("instrumented", [True, False], ids=["instrumented", "plain"])
async def test_assistant_through_the_runner(gw: Running, instrumented: bool) -> None:
    # AutoGen's model-client spans carry no response id; OpenInference's openai client spans
    # nest under them and do, so both instrumentations together attribute each call.
    frameworks = instrumentation("autogen_agentchat", instrumented)
    frameworks += instrumentation("openai", instrumented)
    gw.script.replies.extend([Reply(tool_calls=[("add", {"a": 2, "b": 2})]), Reply(content="4")])
    task = {"question": "What is 2+2?", "expected": "4"}
    records = await run_one(gw, assistant_rollout, frameworks, task)
    assert_token_level(records)
    assert [c.choices[0].finish_reason for c in records.calls] == ["tool_calls", "stop"]
    assert_reward(records, 1.0)
    # Named either way: by the agent's own name on the requests, and by the spans when
    # instrumented.
    assert [c.agent_name for c in records.calls] == ["assistant", "assistant"]
    assert agent_names(records) == ["assistant", "assistant"]


@rollout
async def team_rollout(task: dict[str, Any], llm: LLM) -> float:
    """A planner and an answerer taking one turn each in a round-robin team."""
    client = OpenAIChatCompletionClient(
        model=llm.model, base_url=llm.base_url, api_key=llm.api_key, model_info=MODEL_INFO
    )
    planner = AssistantAgent("planner", model_client=client, system_message="Plan briefly.")
    answerer = AssistantAgent("answerer", model_client=client, system_message="Answer.")
    team = RoundRobinGroupChat([planner, answerer], max_turns=2)
    try:
        result = await team.run(task=task["question"])
    finally:
        await client.close()
    return 1.0 if result.messages[-1].to_text() == task["expected"] else 0.0


async def test_team_through_the_runner_names_calls_by_agent(gw: Running) -> None:
    # No instrumentation package: each agent's name travels on its own requests.
    gw.script.replies.extend([Reply(content="add the numbers"), Reply(content="4")])
    task = {"question": "What is 2+2?", "expected": "4"}
    records = await run_one(gw, team_rollout, [], task)
    assert_token_level(records, ["add the numbers", "4"])
    assert_reward(records, 1.0)
    assert [c.agent_name for c in records.calls] == ["planner", "answerer"]
    assert agent_names(records) == ["planner", "answerer"]
    trajectory = records.trajectory(options=TransitionOptions(agents=("answerer",)))
    (transition,) = trajectory.transitions
    assert transition.agent_name == "answerer" and transition.call_ids == [records.calls[1].call_id]
    assert transition.completion_token_ids == encode("4")
    assert trajectory.diagnostics.skipped_agent == 1
