"""Demonstrations from call records, and the seeded draws of the search (pure functions)."""

from __future__ import annotations

from typing import Any

import pytest

from fulmen.algorithms.demos.extraction import demonstration_from, exchange_after_prompt
from fulmen.algorithms.demos.search import draw_candidates, split_tasks
from fulmen.errors import ConfigError
from fulmen.transitions.trajectory import AttemptRecords
from fulmen.types import LLMCall, LLMChoice

PROMPT = [
    {"role": "user", "content": "Add.\nQ: 1 + 1"},
    {"role": "assistant", "content": "CALC(1 + 1)"},
    {"role": "user", "content": "Q: 2 + 3"},
]


def call(n: int, messages: list[dict[str, Any]], reply: str) -> LLMCall:
    return LLMCall(
        call_id=f"c{n}",
        rollout_id="r1",
        attempt_id="a1",
        request={"messages": messages},
        response={"choices": [{"message": {"role": "assistant", "content": reply}}]},
        choices=[LLMChoice(text=reply)],
        started_at=float(n),
        sequence=n,
    )


def records(*calls: LLMCall) -> AttemptRecords:
    return AttemptRecords("r1", "a1", "t1", calls, [])


def test_the_exchange_is_what_followed_the_first_prompt_up_to_the_last_reply() -> None:
    second = [
        *PROMPT,
        {"role": "assistant", "content": "CALC(2 + 3)"},
        {"role": "user", "content": "RESULT: 5"},
    ]
    attempt = records(call(1, PROMPT, "CALC(2 + 3)"), call(2, second, "ANSWER: 5"))
    turns = exchange_after_prompt(attempt)
    assert turns is not None
    assert [(t.role, t.content) for t in turns] == [
        ("assistant", "CALC(2 + 3)"),
        ("user", "RESULT: 5"),
        ("assistant", "ANSWER: 5"),
    ]
    task = {"q": "2 + 3", "answer": 5}
    demo = demonstration_from(attempt, task, ["q"], reward=1.0)
    assert demo is not None
    assert demo.inputs == {"q": "2 + 3"}  # the answer key never reaches the prompt
    assert demo.metadata == {
        "rollout_id": "r1",
        "task_id": "t1",
        "call_ids": ["c1", "c2"],
        "reward": 1.0,
        "is_tidied": False,
    }


def test_tidy_trims_the_model_turns_only_and_says_so() -> None:
    second = [
        *PROMPT,
        {"role": "assistant", "content": "CALC(2 + 3) junk"},
        {"role": "user", "content": "RESULT: 5 junk"},
    ]
    attempt = records(call(1, PROMPT, "CALC(2 + 3) junk"), call(2, second, "ANSWER: 5 junk"))
    demo = demonstration_from(
        attempt, {"q": "2 + 3"}, ["q"], reward=1.0, tidy=lambda text: text.removesuffix(" junk")
    )
    assert demo is not None and demo.metadata["is_tidied"] is True
    assert [m.content for m in demo.messages] == ["CALC(2 + 3)", "RESULT: 5 junk", "ANSWER: 5"]
    plain = demonstration_from(attempt, {"q": "2 + 3"}, ["q"], reward=1.0)
    assert plain is not None and plain.metadata["is_tidied"] is False
    assert plain.messages[0].content == "CALC(2 + 3) junk"


def test_calls_that_are_not_one_conversation_give_no_demonstration() -> None:
    unrelated = [{"role": "user", "content": "something else"}]
    attempt = records(call(1, PROMPT, "CALC(2 + 3)"), call(2, unrelated, "ANSWER: 5"))
    assert exchange_after_prompt(attempt) is None
    assert (
        demonstration_from(records(call(1, PROMPT, "x")), {"other": 1}, ["q"], reward=1.0) is None
    )
    assert exchange_after_prompt(records()) is None


def test_candidates_are_distinct_seeded_and_a_longer_search_extends_a_shorter_one() -> None:
    short = draw_candidates(6, demos=3, count=4, seed=7)
    long = draw_candidates(6, demos=3, count=10, seed=7)
    assert long[:4] == short and len(set(long)) == 10
    assert all(len(set(c)) == 3 and all(0 <= i < 6 for i in c) for c in long)
    assert draw_candidates(6, demos=3, count=4, seed=8) != short
    # A pool of two has only two orders of two: the search stops there.
    assert sorted(draw_candidates(2, demos=3, count=5, seed=0)) == [(0, 1), (1, 0)]
    with pytest.raises(ConfigError, match="empty pool"):
        draw_candidates(0, demos=1, count=1, seed=0)


def test_search_tasks_and_demonstration_sources_never_overlap() -> None:
    search, sources = split_tasks(10, search=4, seed=1)
    assert len(search) == 4 and sorted(search + sources) == list(range(10))
    assert split_tasks(3, search=10, seed=1)[1] != []  # one task is always left to teach
    with pytest.raises(ConfigError, match="at least 2 training tasks"):
        split_tasks(1, search=1, seed=0)
