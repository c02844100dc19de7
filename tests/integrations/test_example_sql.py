"""The SQL example's LangGraph agent, unchanged, through the real Runner and gateway.

The scripted upstream plays the model: it writes a query, judges it, rewrites it. Each test
checks how many calls the graph made and in which node (the name reaches the gateway with no
instrumentation package), that every call is token-level, that the reward is the execution
match of the final query, and that selecting ``write_query`` and ``rewrite_query`` leaves the
checker's calls out of the transitions.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from fulmen.transitions.trajectory import AttemptRecords, TransitionOptions
from tests.examples.loading import example_modules
from tests.gateway.conftest import Running
from tests.gateway.scripted_upstream import Reply, encode
from tests.integrations.through_runner import (
    agent_names,
    assert_reward,
    assert_token_level,
    run_one,
)

TRAINED = TransitionOptions(agents=("write_query", "rewrite_query"))
TASK: dict[str, Any] = {
    "id": "shops_0:count_filter:1",
    "db_id": "shops_0",
    "question": "How many products have category kitchen?",
    "gold_sql": "SELECT COUNT(*) FROM products WHERE category = 'kitchen'",
    "ordered": False,
}
RIGHT = "SELECT COUNT(*) FROM products WHERE category = 'kitchen';"
WRONG_ROWS = "SELECT COUNT(*) FROM products"  # runs, but counts every product
BROKEN = "SELECT COUNT(*) FROM product WHERE category = 'kitchen'"  # no such table


@pytest.fixture(scope="module")
def sql_agent() -> Iterator[ModuleType]:
    """The example's agent module, imported as ``fulmen train`` imports it (directory on path)."""
    with example_modules("sql", "sql_agent") as (module,):
        yield module


async def run_sql(gw: Running, agent: ModuleType, replies: list[str]) -> AttemptRecords:
    gw.script.replies.extend(Reply(content=text) for text in replies)
    records = await run_one(gw, agent.sql_agent, [], TASK)
    assert_token_level(records, replies)
    assert not gw.script.replies, "the graph made fewer calls than scripted"
    return records


def last_message(records: AttemptRecords, index: int) -> str:
    """The text of the last message the agent sent in its ``index``-th call."""
    messages: Any = records.calls[index].request["messages"]
    return str(messages[-1]["content"])


def trained_calls(records: AttemptRecords) -> list[tuple[str | None, list[int]]]:
    trajectory = records.trajectory(options=TRAINED)
    return [(t.agent_name, t.completion_token_ids) for t in trajectory.transitions]


async def test_right_first_query_is_checked_once(gw: Running, sql_agent: ModuleType) -> None:
    records = await run_sql(gw, sql_agent, [RIGHT, "CORRECT"])
    assert agent_names(records) == ["write_query", "check_query"]
    assert_reward(records, 1.0)
    assert trained_calls(records) == [("write_query", encode(RIGHT))]
    check = last_message(records, 1)
    assert f"SQL: {RIGHT.rstrip(';')}\nResult: " in check  # the checker sees query and result
    write = last_message(records, 0)
    assert "CREATE TABLE products (" in write and TASK["question"] in write


async def test_a_failed_query_is_rewritten_without_asking_the_checker(
    gw: Running, sql_agent: ModuleType
) -> None:
    records = await run_sql(gw, sql_agent, [BROKEN, RIGHT, "CORRECT"])
    assert agent_names(records) == ["write_query", "rewrite_query", "check_query"]
    assert_reward(records, 1.0)
    rewrite = last_message(records, 1)
    assert "Result: error: no such table: product" in rewrite
    trajectory = records.trajectory(options=TRAINED)
    assert [t.agent_name for t in trajectory.transitions] == ["write_query", "rewrite_query"]
    assert trajectory.diagnostics.skipped_agent == 1
    assert all(t.reward == 1.0 for t in trajectory.transitions)


async def test_two_rewrites_at_most_then_the_last_query_counts(
    gw: Running, sql_agent: ModuleType
) -> None:
    # The checker rejects a query that runs; the rewrite fails (no checker call), the second
    # rewrite is final: the graph ends without judging it, and its result is the reward.
    records = await run_sql(gw, sql_agent, [WRONG_ROWS, "WRONG", BROKEN, WRONG_ROWS])
    assert agent_names(records) == ["write_query", "check_query", "rewrite_query", "rewrite_query"]
    assert_reward(records, 0.0)
    assert [name for name, _ in trained_calls(records)] == [
        "write_query",
        "rewrite_query",
        "rewrite_query",
    ]


async def test_a_wrong_query_the_checker_accepts_scores_zero(
    gw: Running, sql_agent: ModuleType
) -> None:
    records = await run_sql(gw, sql_agent, [WRONG_ROWS, "CORRECT"])
    assert agent_names(records) == ["write_query", "check_query"]
    assert_reward(records, 0.0)
    (transition,) = records.trajectory(options=TRAINED).transitions
    assert transition.agent_name == "write_query" and transition.reward == 0.0


def test_replies_are_parsed_as_the_base_model_writes_them(sql_agent: ModuleType) -> None:
    assert sql_agent.parse_sql("SELECT a FROM t;iatrics\nWrite one") == "SELECT a FROM t"
    assert sql_agent.parse_sql("```sql\nselect a from t\n```") == "select a from t"
    assert sql_agent.parse_verdict("CORRECTに通") == "correct"
    assert sql_agent.parse_verdict("WRONG condición") == "wrong"
    assert sql_agent.parse_verdict("CORRECT or WRONG") == "correct"
