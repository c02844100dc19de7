"""The search example's real agent (OpenAI Agents SDK) through fulmen's Runner and gateway.

The scripted upstream plays the model: two ``search`` tool calls, then an answer. The tool runs
for real (the FTS5 index over the generated corpus), and the second prompt must carry its
passages. Both of the SDK's model classes are run: the default Responses model (the gateway
translates ``/v1/responses`` for the token-level engine) and Chat Completions. Every call
lands with token ids under the SDK agent's name ``researcher``, the reward is the answer's F1,
and running out of turns is reward 0.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("agents")

from fulmen.transitions.trajectory import TransitionOptions
from tests.examples.loading import example_modules
from tests.gateway.conftest import Running
from tests.gateway.scripted_upstream import Reply
from tests.integrations.through_runner import (
    agent_names,
    assert_reward,
    assert_token_level,
    run_one,
)

_ENDPOINTS = {"responses": "responses", "chat": "chat/completions"}


@pytest.fixture(scope="module")
def example() -> Iterator[ModuleType]:
    """The example's agent module, imported from its directory; its modules dropped afterwards."""
    with example_modules("search", "search_agent") as (module,):
        yield module


def _task(example: ModuleType, kind: str, api: str) -> dict[str, Any]:
    world = sys.modules["search_world"]
    task = next(t for t in world.test_tasks() if t["kind"] == kind)
    return {**task, "api": api}


def _script_solution(gw: Running, task: dict[str, Any], subject: str, answer: str) -> None:
    gw.script.replies.extend(
        [
            Reply(tool_calls=[("search", {"query": subject})]),
            Reply(tool_calls=[("search", {"query": task["hops"][0]})]),
            Reply(content=f"Answer: {answer}."),
        ]
    )


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_two_searches_and_the_answer_are_trained_calls(
    gw: Running, example: ModuleType, api: str
) -> None:
    task = _task(example, "founder_city", api)
    subject = example._subject(task)
    _script_solution(gw, task, subject, task["answer"])
    records = await run_one(gw, example.search_agent, [], task)

    assert_token_level(records)
    assert [c.endpoint for c in records.calls] == [_ENDPOINTS[api]] * 3
    assert [c.choices[0].finish_reason for c in records.calls] == ["tool_calls"] * 2 + ["stop"]
    assert_reward(records, 1.0)
    # The SDK's own agent name, with no instrumentation package.
    assert agent_names(records) == ["researcher"] * 3
    # The engine got chat completions: worked examples, the question, the real tool results.
    requests = gw.script.requests
    assert all(r["stop"] == example.STOP for r in requests)
    last = requests[2]["messages"]
    assert [m["role"] for m in last][-5:] == ["user", "assistant", "tool", "assistant", "tool"]
    assert last[-5]["content"] == task["question"]
    assert f"{subject} was founded by {task['hops'][0]}" in last[-3]["content"]
    assert f"{task['hops'][0]} was born in {task['answer']}" in last[-1]["content"]
    # The worked examples precede the question, each with its two searches' results.
    assert sum(m["role"] == "tool" for m in last) == 2 * example.EXAMPLES_SHOWN + 2

    trained = records.trajectory(options=TransitionOptions(agents=("researcher",)))
    assert [t.agent_name for t in trained.transitions] == ["researcher"] * 3
    assert [t.call_ids for t in trained.transitions] == [[c.call_id] for c in records.calls]
    assert all(t.reward == 1.0 for t in trained.transitions)
    other = records.trajectory(options=TransitionOptions(agents=("checker",)))
    assert other.transitions == []
    # config.yaml merges: each prompt extends the previous prompt + completion token-exactly.
    merged = records.trajectory(options=TransitionOptions(agents=("researcher",), merge=True))
    (transition,) = merged.transitions
    assert transition.call_ids == [c.call_id for c in records.calls]
    assert merged.diagnostics.merges == 2


async def test_a_partial_answer_gets_its_token_f1(gw: Running, example: ModuleType) -> None:
    task = _task(example, "employer_founder", "responses")
    first_name = task["answer"].split()[0]  # a founder's name has two words
    _script_solution(gw, task, example._subject(task), first_name)
    records = await run_one(gw, example.search_agent, [], task)
    assert len(records.calls) == 3
    assert records.final_reward == pytest.approx(2 / 3)  # one of the answer's two words


async def test_running_out_of_turns_is_reward_zero(gw: Running, example: ModuleType) -> None:
    task = _task(example, "employer_city", "responses")
    gw.script.replies.extend(
        [Reply(tool_calls=[("search", {"query": task["hops"][0]})])] * example.MAX_TURNS
    )
    records = await run_one(gw, example.search_agent, [], task)
    assert len(records.calls) == example.MAX_TURNS
    assert agent_names(records) == ["researcher"] * example.MAX_TURNS
    assert_reward(records, 0.0)


def test_worked_examples_are_solved_questions_worded_like_the_question(
    example: ModuleType,
) -> None:
    world = sys.modules["search_world"]
    task = _task(example, "founder_city", "responses")
    items = example.worked_examples(task["question"])
    questions = [i["content"] for i in items if i.get("role") == "user"]
    assert len(questions) == example.EXAMPLES_SHOWN
    assert questions[-1].startswith("In which city was the founder of")
    # About the demo half only: no training or held-out entity appears in the examples.
    demo = {o.name for o in world.make_world(0).orgs if o.half == "demo"}
    demo |= {p.name for p in world.make_world(0).people if p.half == "demo"}
    assert all(example._subject({"question": q}) in demo for q in questions)
    text = repr(items)
    assert example._subject(task) not in text and task["hops"][0] not in text
