"""The 0.x tutorial agents migrated to fulmen (``examples/agl_*``), through the real Runner.

Each agent is the 0.x code with only its import line changed; it runs under fulmen's runner
and gateway with a scripted model: the SQL tutorial's LangGraph ``LitSQLAgent`` (class form,
``resources["main_llm"].get_base_url(...)``, ``trained_agents="write"``) and the calc
tutorial's AutoGen agent (decorator form, ``agl.emit_reward``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from types import ModuleType

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")
pytest.importorskip("autogen_agentchat")

from fulmen.adapter.transitions import TransitionOptions
from tests.examples.loading import example_modules
from tests.gateway.conftest import Running
from tests.gateway.scripted_upstream import Reply
from tests.integrations.through_runner import agent_names, assert_reward, run_one

SQL_TASK = {
    "id": "sql0",
    "question": "How many products are in the kitchen category?",
    "gold": "SELECT COUNT(*) FROM products WHERE category = 'kitchen'",
}
RIGHT = "SELECT COUNT(*) FROM products WHERE category = 'kitchen';"


@pytest.fixture(scope="module")
def sql_agent() -> Iterator[ModuleType]:
    with example_modules("agl_sql", "agl_sql_agent") as (module,):
        yield module


@pytest.fixture(scope="module")
def calc_agent() -> Iterator[ModuleType]:
    with example_modules("agl_calc", "agl_calc_agent") as (module,):
        yield module


async def test_sql_litagent_class_runs_and_trains_its_writing_nodes(
    gw: Running, sql_agent: ModuleType
) -> None:
    gw.script.replies.extend([Reply(content="SELECT COUNT(*) FROM product"), Reply(content=RIGHT),
                              Reply(content="CORRECT")])  # fmt: skip
    # the class itself, as `agent: agl_sql_agent:LitSQLAgent` names it
    records = await run_one(gw, sql_agent.LitSQLAgent, [], SQL_TASK, sync_isolation="thread")
    assert agent_names(records) == ["write_query", "rewrite_query", "check_query"]
    assert_reward(records, 1.0)
    trained = records.trajectory(options=TransitionOptions(agents=("*write*",))).transitions
    assert [t.agent_name for t in trained] == ["write_query", "rewrite_query"]


async def test_sql_wrong_answer_scores_zero(gw: Running, sql_agent: ModuleType) -> None:
    gw.script.replies.extend([Reply(content="SELECT COUNT(*) FROM products"),
                              Reply(content="CORRECT")])  # fmt: skip
    records = await run_one(gw, sql_agent.LitSQLAgent(), [], SQL_TASK, sync_isolation="thread")
    assert_reward(records, 0.0)


async def test_calc_autogen_agent_uses_its_tool_and_emits_the_reward(
    gw: Running, calc_agent: ModuleType
) -> None:
    task = calc_agent.math_problems(1)[0]
    expression = task["question"]  # the scripted model computes it through the tool
    a, c, b = (int(n) for n in re.findall(r"\d+", expression))
    gw.script.replies.extend(
        [
            Reply(tool_calls=[("calculator", {"expression": f"{a} * {c} - {b}"})]),
            Reply(content=f"There are {a * c - b} apples left."),
        ]
    )
    records = await run_one(gw, calc_agent.calc_agent, [], task)
    assert len(records.calls) == 2
    tool_result = records.calls[1].request["messages"][-1]
    assert str(a * c - b) in str(tool_result["content"])
    assert_reward(records, 1.0)
