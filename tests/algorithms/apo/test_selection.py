"""Beam and Pareto selection rules, and how an editor's answer becomes a candidate prompt."""

from __future__ import annotations

import pytest

from fulmen.algorithms.apo.gradients import critique_messages, edited_prompt, failed_rollout
from fulmen.algorithms.apo.selection import Scored, select_beam, select_pareto
from fulmen.types import LLMCall, LLMChoice, PromptTemplate

# Mean-best is A; B wins task t4 alone; C is never best anywhere; t5 ties everyone.
A = Scored(1, 0.6, {"t1": 1.0, "t2": 1.0, "t3": 1.0, "t4": 0.0, "t5": 0.0})
B = Scored(2, 0.2, {"t1": 0.0, "t2": 0.0, "t3": 0.0, "t4": 1.0, "t5": 0.0})
C = Scored(3, 0.4, {"t1": 1.0, "t2": 1.0, "t3": 0.0, "t4": 0.0, "t5": 0.0})


def test_pareto_keeps_an_instance_best_candidate_that_the_beam_drops() -> None:
    assert [s.key for s in select_beam([A, B, C], width=2)] == [1, 3]
    assert [s.key for s in select_pareto([A, B, C], limit=4)] == [1, 2]


def test_pareto_limit_keeps_those_best_on_most_tasks() -> None:
    assert [s.key for s in select_pareto([A, B, C], limit=1)] == [1]


def test_no_task_tells_them_apart_keeps_the_best_mean() -> None:
    same = {"t1": 1.0}
    assert [
        s.key for s in select_pareto([Scored(5, 1.0, same), Scored(4, 1.0, same)], limit=3)
    ] == [4]


def test_beam_breaks_ties_by_age() -> None:
    assert [s.key for s in select_beam([Scored(9, 0.5, {}), Scored(3, 0.5, {})], width=1)] == [3]
    with pytest.raises(ValueError, match="at least 1, got 0"):
        select_beam([A], width=0)


PROMPT = PromptTemplate(instructions="Solve it.", template="Question: {question}")


def test_edit_replaces_instructions_and_keeps_braces_literal() -> None:
    edited, why = edited_prompt(
        PROMPT, 'Sure!\n<prompt>\nSolve it; reply like {"n": 1}.\n</prompt>'
    )
    assert why == "" and edited is not None
    assert edited.render(question="1+1") == 'Solve it; reply like {"n": 1}.\nQuestion: 1+1'
    assert edited.template == PROMPT.template and edited.lineage is None


@pytest.mark.parametrize(
    ("prompt", "answer", "why"),
    [
        (PROMPT, "<prompt>Solve it.</prompt>", "unchanged"),
        (PROMPT, "<prompt> </prompt>", "no text"),
        (PromptTemplate(template="Q: {question}"), "<prompt>Q: {q}</prompt>", "do not match"),
    ],
)
def test_bad_edits_are_refused_with_a_reason(prompt: PromptTemplate, answer: str, why: str) -> None:
    edited, reason = edited_prompt(prompt, answer)
    assert edited is None and why in reason


def test_the_critic_sees_prompt_calls_and_reward() -> None:
    call = LLMCall(
        call_id="c",
        request={"messages": [{"role": "user", "content": "Question: 2+2?"}]},
        choices=[LLMChoice(text="CALC(2 - 2)")],
        started_at=0.0,
        sequence=1,
    )
    failure = failed_rollout({"question": "2+2?"}, [call], 0.0, max_chars=100)
    system, user = critique_messages(PROMPT, [failure], max_chars=100)
    assert system["role"] == "system" and "Solve it.\nQuestion: {question}" in user["content"]
    assert "call 1 last message: Question: 2+2?" in user["content"]
    assert "call 1 reply: CALC(2 - 2)" in user["content"] and "reward: 0" in user["content"]
