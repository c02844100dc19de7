"""CrewAI (one agent with a tool), unchanged, pointed at the gateway. Needs openai < 3: it
runs in its own venv (see requirements-crewai.txt) and skips elsewhere."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

# CrewAI phones home unless told not to; set before it is imported.
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

pytest.importorskip("crewai")

from crewai import LLM, Agent, Crew, Task
from crewai.tools import tool

from fulmen.agent.api import rollout
from fulmen.agent.context import LLM as FulmenLLM
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


@rollout
async def crew_rollout(task: dict[str, Any], llm: FulmenLLM) -> float:
    """The crew as a fulmen rollout: its reward is whether the answer is right."""

    @tool("add")
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    model = LLM(model=f"openai/{llm.model}", base_url=llm.base_url, api_key=llm.api_key)
    agent = Agent(role="calculator", goal="add numbers", backstory="exact", llm=model, tools=[add])
    work = Task(description=task["question"], expected_output="a number", agent=agent)
    # kickoff is sync; to_thread copies the context, so the rollout's trace follows it.
    result = await asyncio.to_thread(Crew(agents=[agent], tasks=[work]).kickoff)
    return 1.0 if str(result).strip().endswith(task["expected"]) else 0.0


@pytest.mark.parametrize("instrumented", [True, False], ids=["instrumented", "plain"])
async def test_crew_through_the_runner(gw: Running, instrumented: bool) -> None:
    # CrewAI's agent spans carry no response id; OpenInference's openai client spans nest
    # under them and do, so both instrumentations together attribute each call to the role.
    frameworks = instrumentation("crewai", instrumented)
    frameworks += instrumentation("openai", instrumented)
    gw.script.replies.extend(
        [
            Reply(tool_calls=[("add", {"a": 2, "b": 2})]),
            Reply(content="Thought: I now know the final answer\nFinal Answer: 4"),
        ]
    )
    records = await run_one(gw, crew_rollout, frameworks, {"question": "2+2?", "expected": "4"})
    assert_token_level(records)
    assert [c.choices[0].finish_reason for c in records.calls] == ["tool_calls", "stop"]
    assert_reward(records, 1.0)
    # Named either way: by the agent's own role on the requests, and by the spans when
    # instrumented.
    assert [c.agent_name for c in records.calls] == ["calculator", "calculator"]
    assert agent_names(records) == ["calculator", "calculator"]


PLAN = "Thought: I now know the final answer\nFinal Answer: add the numbers"
ANSWER = "Thought: I now know the final answer\nFinal Answer: 4"


def two_agent_crew(question: str, llm: FulmenLLM) -> Crew:
    """A planner and an answerer, one task each, in a sequential crew."""
    model = LLM(model=f"openai/{llm.model}", base_url=llm.base_url, api_key=llm.api_key)
    planner = Agent(role="planner", goal="plan the work", backstory="brief", llm=model)
    answerer = Agent(role="answerer", goal="answer exactly", backstory="exact", llm=model)
    plan = Task(description=question, expected_output="a plan", agent=planner)
    answer = Task(description=question, expected_output="a number", agent=answerer)
    return Crew(agents=[planner, answerer], tasks=[plan, answer])


@rollout
async def two_agent_crew_rollout(task: dict[str, Any], llm: FulmenLLM) -> float:
    """The two-agent crew as a fulmen rollout: its reward is whether the answer is right."""
    result = await asyncio.to_thread(two_agent_crew(task["question"], llm).kickoff)
    return 1.0 if str(result).strip() == task["expected"] else 0.0


async def test_two_agent_crew_through_the_runner_names_calls_by_role(gw: Running) -> None:
    # No instrumentation package: each agent's role travels on its own requests.
    gw.script.replies.extend([Reply(content=PLAN), Reply(content=ANSWER)])
    records = await run_one(gw, two_agent_crew_rollout, [], {"question": "2+2?", "expected": "4"})
    assert_token_level(records, [PLAN, ANSWER])
    assert_reward(records, 1.0)
    assert [c.agent_name for c in records.calls] == ["planner", "answerer"]
    assert agent_names(records) == ["planner", "answerer"]
    trajectory = records.trajectory(options=TransitionOptions(agents=("answerer",)))
    (transition,) = trajectory.transitions
    assert transition.agent_name == "answerer" and transition.call_ids == [records.calls[1].call_id]
    assert transition.completion_token_ids == encode(ANSWER)
    assert trajectory.diagnostics.skipped_agent == 1


@rollout
def sync_two_agent_crew_rollout(task: dict[str, Any], llm: FulmenLLM) -> float:
    """The same crew from a sync rollout function, which the runner runs in a worker process."""
    result = two_agent_crew(task["question"], llm).kickoff()
    return 1.0 if str(result).strip() == task["expected"] else 0.0


async def test_sync_crew_in_a_worker_process_names_calls_by_role(gw: Running) -> None:
    # The worker process installs the hook itself, after importing the agent's module.
    gw.script.replies.extend([Reply(content=PLAN), Reply(content=ANSWER)])
    task = {"question": "2+2?", "expected": "4"}
    records = await run_one(gw, sync_two_agent_crew_rollout, [], task, sync_isolation="process")
    assert_reward(records, 1.0)
    assert [c.agent_name for c in records.calls] == ["planner", "answerer"]
