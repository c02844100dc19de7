"""CrewAI (one agent with a tool), unchanged, pointed at the gateway. Needs openai < 3: it
runs in its own venv (see requirements-crewai.txt) and skips elsewhere."""

from __future__ import annotations

import asyncio
import os

import pytest

# CrewAI phones home unless told not to; set before it is imported.
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

pytest.importorskip("crewai")

from crewai import LLM, Agent, Crew, Task
from crewai.tools import tool

from tests.gateway.conftest import Running, new_attempt
from tests.gateway.scripted_upstream import Reply

# CrewAI's own code touches its deprecated fields; that is not what this test is about.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


async def test_crew_with_a_tool_is_captured(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.extend(
        [
            Reply(tool_calls=[("add", {"a": 2, "b": 2})]),
            Reply(content="Thought: I now know the final answer\nFinal Answer: 4"),
        ]
    )
    seen: list[tuple[int, int]] = []

    @tool("add")
    def add(a: int, b: int) -> int:
        """Add two integers."""
        seen.append((a, b))
        return a + b

    llm = LLM(model="openai/tiny-model", base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
    agent = Agent(role="calculator", goal="add numbers", backstory="exact", llm=llm, tools=[add])
    task = Task(description="What is 2+2?", expected_output="a number", agent=agent)
    crew = Crew(agents=[agent], tasks=[task])
    result = await asyncio.to_thread(crew.kickoff)
    assert "4" in str(result)
    calls = await gw.calls(rollout_id)
    assert all(c.is_token_level and c.attempt_id == attempt_id for c in calls)
    assert all(c.choices[0].token_ids and c.choices[0].logprobs for c in calls)
    assert seen == [(2, 2)]  # native tool calling: the round trip went through the gateway
    assert len(calls) == 2
    assert calls[0].request.get("tools") and calls[0].choices[0].finish_reason == "tool_calls"
