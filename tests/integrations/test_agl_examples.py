"""The 0.x tutorial agents migrated to fulmen (``examples/agl_*``), through the real Runner.

Each agent is the 0.x code with only its import line changed; it runs under fulmen's runner
and gateway with a scripted model: the SQL tutorial's LangGraph ``LitSQLAgent`` (class form,
``resources["main_llm"].get_base_url(...)``, ``trained_agents="write"``) and the calc
tutorial's AutoGen agent (decorator form, ``agl.emit_reward``). ``test_agl_train.py`` trains
both with ``fulmen train``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")
pytest.importorskip("autogen_agentchat")

from fulmen.transitions.trajectory import TransitionOptions
from tests.examples.loading import example_modules
from tests.gateway.conftest import Running
from tests.gateway.scripted_upstream import Reply
from tests.integrations.through_runner import agent_names, assert_reward, run_one

RIGHT = "SELECT COUNT(*) FROM products WHERE category = 'kitchen';"


@pytest.fixture(scope="module")
def sql_example() -> Iterator[tuple[ModuleType, dict[str, Any]]]:
    """The agent module and a training task ("How many products are in the kitchen ...")."""
    with example_modules("agl_sql", "agl_sql_agent", "agl_sql_data") as (agent, data):
        yield agent, {t["id"]: t for t in data.train_tasks()}["count_category:kitchen"]


@pytest.fixture(scope="module")
def calc_example() -> Iterator[tuple[ModuleType, dict[str, Any]]]:
    """The agent module and its first training problem."""
    with example_modules("agl_calc", "agl_calc_agent", "agl_calc_data") as (agent, data):
        yield agent, data.train_tasks()[0]


def _last_message(call: Any) -> str:
    return str(call.request["messages"][-1]["content"])


async def test_sql_litagent_class_runs_and_trains_its_writing_nodes(
    gw: Running, sql_example: tuple[ModuleType, dict[str, Any]]
) -> None:
    agent, task = sql_example
    gw.script.replies.extend([Reply(content="SELECT COUNT(*) FROM product"),
                              Reply(content="WRONG"), Reply(content=RIGHT),
                              Reply(content="THE QUERY IS CORRECT.")])  # fmt: skip
    # the class itself, as `agent: agl_sql_agent:LitSQLAgent` names it
    records = await run_one(gw, agent.LitSQLAgent, [], task, sync_isolation="thread")
    assert agent_names(records) == ["write_query", "check_query", "rewrite_query", "check_query"]
    write, check, rewrite, _ = (call.request for call in records.calls)
    # The writer: the worked examples as chat turns, then the compact tables and the question;
    # each reply ends at its line's end.
    assert len(write["messages"]) == 2 * len(agent.WRITE_EXAMPLES) + 1
    assert [m["content"] for m in write["messages"][1::2]] == [q for _, q in agent.WRITE_EXAMPLES]
    asked = _last_message(records.calls[0])
    assert "products(id, name, category, price, stock)" in asked and task["question"] in asked
    assert write["stop"] == rewrite["stop"] == agent.SQL_STOP and check["stop"] == ["\n"]
    # the checker saw the failed query's error; the rewriter got the query to fix
    assert len(check["messages"]) == 2 * len(agent.CHECK_EXAMPLES) + 1
    assert "Result: error: no such table: product" in _last_message(records.calls[1])
    assert "SQL: SELECT COUNT(*) FROM product\n" in _last_message(records.calls[2])
    assert_reward(records, 1.0)
    trained = records.trajectory(options=TransitionOptions(agents=("*write*",))).transitions
    assert [t.agent_name for t in trained] == ["write_query", "rewrite_query"]


async def test_sql_wrong_answer_scores_zero(
    gw: Running, sql_example: tuple[ModuleType, dict[str, Any]]
) -> None:
    agent, task = sql_example
    # the base model's verdict runs on into other text: CORRECT is still read
    gw.script.replies.extend([Reply(content="SELECT COUNT(*) FROM products"),
                              Reply(content="CORRECTに通")])  # fmt: skip
    records = await run_one(gw, agent.LitSQLAgent(), [], task, sync_isolation="thread")
    assert agent_names(records) == ["write_query", "check_query"]
    assert_reward(records, 0.0)


async def test_calc_autogen_agent_uses_its_tool_and_emits_the_reward(
    gw: Running, calc_example: tuple[ModuleType, dict[str, Any]]
) -> None:
    agent, task = calc_example
    result = task["result"]
    gw.script.replies.extend(
        [
            # the scripted model computes the answer through the tool
            Reply(tool_calls=[("calculator", {"expression": task["expression"]})]),
            # the marked number counts; the stop string " ###" cut the closing marker
            Reply(content=f"{result + 1}? ### ANSWER: {result}"),
        ]
    )
    records = await run_one(gw, agent.calc_agent, [], task)
    assert len(records.calls) == 2
    first = records.calls[0].request
    # 0.x's output format is asked once, in the system message; the worked examples are chat
    # turns (question, calculator call, its result, the answer), then the question itself.
    system = first["messages"][0]
    assert system["role"] == "system" and "### ANSWER: <answer> ###" in system["content"]
    results = [m["content"] for m in first["messages"] if m["role"] == "tool"]
    assert results == [result for _, _, result in agent.EXAMPLES]
    assert _last_message(records.calls[0]) == task["question"]
    assert first["stop"] == agent.STOP
    assert _last_message(records.calls[1]) == str(result)  # the tool's result
    assert_reward(records, 1.0)


async def test_calc_answer_without_the_format_is_its_last_number(
    gw: Running, calc_example: tuple[ModuleType, dict[str, Any]]
) -> None:
    agent, task = calc_example
    gw.script.replies.append(Reply(content=f"I think {task['result']}, no: {task['result'] + 1}."))
    records = await run_one(gw, agent.calc_agent, [], task)
    assert len(records.calls) == 1  # no tool call, so no reflection
    assert_reward(records, 0.0)


def test_sql_worked_examples_name_no_held_out_value(
    sql_example: tuple[ModuleType, dict[str, Any]],
) -> None:
    """The prompts' examples use the shop's tables, so none may give a held-out answer away."""
    agent, _ = sql_example
    with example_modules("agl_sql", "agl_sql_data") as (data,):
        heldout = {t["id"].split(":", 1)[1] for t in data.heldout_tasks()}
        questions = {t["question"] for t in data.train_tasks() + data.heldout_tasks()}
    examples = [*agent.WRITE_EXAMPLES, *agent.CHECK_EXAMPLES, agent.REWRITE_EXAMPLE]
    text = "\n".join(" ".join(example) for example in examples)
    assert [v for v in heldout if re.search(rf"\b{re.escape(v)}\b", text, re.I)] == []
    assert not {example[0] for example in examples} & questions
