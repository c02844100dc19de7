"""examples/math (AutoGen AgentChat + calculator tool) through the real Runner and gateway.

The scripted upstream plays the model: a Hermes-style tool call parsed into OpenAI
``tool_calls``, then the answer after the tool result. The example's own agent runs unchanged;
the test checks what training would see: two token-level calls per rollout (one when the model
answers without the tool), both named ``math_solver``, the calculator's real result sent back,
the exact-answer reward, and transitions only for the selected agent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("autogen_agentchat")
pytest.importorskip("autogen_ext.models.openai")

from fulmen.transitions.trajectory import TransitionOptions
from tests.examples.loading import example_modules
from tests.gateway.conftest import Running
from tests.gateway.scripted_upstream import Reply, encode
from tests.integrations.through_runner import (
    agent_names,
    assert_reward,
    assert_token_level,
    run_one,
)


@pytest.fixture(scope="module")
def example() -> Iterator[ModuleType]:
    """The example's agent module, imported as ``fulmen train`` does (its folder on the path)."""
    with example_modules("math", "math_agent") as (module,):
        yield module


def task_of(example: ModuleType) -> dict[str, Any]:
    (task,) = [t for t in example.test_tasks() if t["template"] == "packs"][:1]
    return task


def requests(records: Any) -> list[Any]:
    """The JSON each call sent, as the agent sent it (read like any parsed JSON)."""
    return [call.request for call in records.calls]


def calculator_call(expression: str) -> Reply:
    return Reply(tool_calls=[("calculator", {"expression": expression})])


async def test_tool_call_then_answer(gw: Running, example: ModuleType) -> None:
    task = task_of(example)  # "Mia buys a packs of b pencils and gives c ...": a * b - c
    gw.script.replies.extend(
        [calculator_call(task["expression"]), Reply(content=f"ANSWER: {task['answer']}")]
    )
    records = await run_one(gw, example.math_agent, [], task)
    assert_token_level(records)
    assert [c.choices[0].finish_reason for c in records.calls] == ["tool_calls", "stop"]
    assert_reward(records, 1.0)
    assert [c.agent_name for c in records.calls] == ["math_solver", "math_solver"]
    assert agent_names(records) == ["math_solver", "math_solver"]
    first, second = requests(records)
    # The first call offers the calculator and shows the worked examples as real chat turns.
    assert [t["function"]["name"] for t in first["tools"]] == ["calculator"]
    examples = [m for m in first["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in examples] == [e[2] for e in example.EXAMPLES]
    assert first["messages"][-1] == {"role": "user", "name": "user", "content": task["question"]}
    assert first["stop"] == example.STOP
    # The second sends back what the calculator computed, in answer to the model's call.
    assert second["messages"][-1]["role"] == "tool"
    assert second["messages"][-1]["content"] == str(task["answer"])
    called = json.loads(second["messages"][-2]["tool_calls"][0]["function"]["arguments"])
    assert called == {"expression": task["expression"]}

    trajectory = records.trajectory(options=TransitionOptions(agents=("math_solver",)))
    assert [t.agent_name for t in trajectory.transitions] == ["math_solver", "math_solver"]
    assert trajectory.transitions[-1].completion_token_ids == encode(f"ANSWER: {task['answer']}")
    assert all(t.reward == 1.0 for t in trajectory.transitions)
    other = records.trajectory(options=TransitionOptions(agents=("planner",)))
    assert other.transitions == [] and other.diagnostics.skipped_agent == 2


async def test_wrong_expression_scores_zero(gw: Running, example: ModuleType) -> None:
    task = task_of(example)
    # The model writes the numbers in the wrong order and copies the (wrong) result.
    wrong = task["expression"].replace("*", "+")
    result = example.calculator(wrong)
    gw.script.replies.extend([calculator_call(wrong), Reply(content=f"ANSWER: {result}")])
    records = await run_one(gw, example.math_agent, [], task)
    assert requests(records)[1]["messages"][-1]["content"] == result
    assert_reward(records, 0.0)


async def test_a_bad_expression_is_reported_back_to_the_model(
    gw: Running, example: ModuleType
) -> None:
    task = task_of(example)
    gw.script.replies.extend(
        [calculator_call("3 packs of 4 - 9"), Reply(content=f"ANSWER: {task['answer']}")]
    )
    records = await run_one(gw, example.math_agent, [], task)
    sent = requests(records)[1]["messages"][-1]
    assert sent["role"] == "tool" and "not an arithmetic expression" in sent["content"]
    assert_reward(records, 1.0)  # the answer is what is scored, however it was reached


async def test_an_answer_without_the_tool_is_one_call(gw: Running, example: ModuleType) -> None:
    task = task_of(example)
    gw.script.replies.append(Reply(content=f"ANSWER: {task['answer']}"))
    records = await run_one(gw, example.math_agent, [], task)
    assert_token_level(records)
    assert len(records.calls) == 1 and agent_names(records) == ["math_solver"]
    assert_reward(records, 1.0)
