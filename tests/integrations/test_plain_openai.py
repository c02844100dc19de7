"""A plain ``openai`` two-agent rollout, default install: ``as_agent`` names reach the records.

No instrumentation package is activated; the names travel on the requests (``x-fulmen-agent``),
from the rollout's task, from a worker thread, and from a worker process.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai import AsyncOpenAI, OpenAI

from fulmen import as_agent
from fulmen.agent.api import rollout
from fulmen.agent.context import LLM
from fulmen.transitions.trajectory import TransitionOptions
from tests.gateway.conftest import Running
from tests.gateway.scripted_upstream import Reply, encode
from tests.integrations.through_runner import assert_reward, assert_token_level, run_one


@rollout
async def async_two_agents(task: dict[str, Any], llm: LLM) -> float:
    """A planner writes a plan, a solver answers with it: two agents, one client."""
    async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
        with as_agent("planner"):
            plan = await client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": task["question"]}]
            )
        with as_agent("solver"):
            answer = await client.chat.completions.create(
                model=llm.model,
                messages=[
                    {"role": "system", "content": f"Plan: {plan.choices[0].message.content}"},
                    {"role": "user", "content": task["question"]},
                ],
            )
    return 1.0 if answer.choices[0].message.content == task["expected"] else 0.0


@rollout
def sync_two_agents(task: dict[str, Any], llm: LLM) -> float:
    """The same two agents with the sync client (run in a worker thread or process)."""
    with OpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
        with as_agent("planner"):
            plan = client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": task["question"]}]
            )
        with as_agent("solver"):
            answer = client.chat.completions.create(
                model=llm.model,
                messages=[
                    {"role": "system", "content": f"Plan: {plan.choices[0].message.content}"},
                    {"role": "user", "content": task["question"]},
                ],
            )
    return 1.0 if answer.choices[0].message.content == task["expected"] else 0.0


@pytest.mark.parametrize(
    ("agent", "isolation"),
    [(async_two_agents, "process"), (sync_two_agents, "thread"), (sync_two_agents, "process")],
    ids=["async", "sync-thread", "sync-process"],
)
async def test_two_agents_yield_named_token_level_transitions(
    gw: Running, agent: Any, isolation: str
) -> None:
    gw.script.replies.extend([Reply(content="add them"), Reply(content="4")])
    task = {"question": "2+2?", "expected": "4"}
    records = await run_one(gw, agent, [], task, sync_isolation=isolation)
    assert_token_level(records, ["add them", "4"])
    assert_reward(records, 1.0)
    assert [c.agent_name for c in records.calls] == ["planner", "solver"]
    trajectory = records.trajectory(options=TransitionOptions(agents=("solver",)))
    (transition,) = trajectory.transitions
    assert transition.agent_name == "solver" and transition.reward == 1.0
    assert transition.completion_token_ids == encode("4")
    assert trajectory.diagnostics.skipped_agent == 1
