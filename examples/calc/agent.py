"""The calc agent: solves word problems with a calculator tool, through the OpenAI client.

The protocol is plain text so a *base* model can follow it from three examples: the model first
writes ``CALC(<expression>)``; the agent evaluates the expression and answers ``RESULT: <value>``;
the model then writes ``ANSWER: <number>``. The reward is 1.0 for the exact answer, else 0.0.
Two model calls per rollout; both are trained.

The instructions and the solved examples are a prompt resource the agent receives as ``prompt``,
like ``llm``: ``CALC_PROMPT`` (three hand-written examples) when the run publishes none, or the
version an optimizer published (``algorithm: demos`` replaces the examples with the model's own
successful runs).
"""

from __future__ import annotations

import re
from typing import Any

from openai import AsyncOpenAI
from tasks import evaluate_expression, make_tasks

import fulmen
from fulmen.types import Demonstration, PromptMessage, PromptTemplate


def solved(question: str, expression: str, answer: str) -> Demonstration:
    """A worked example in the calc protocol: the tool call, its result, the answer."""
    return Demonstration(
        inputs={"question": question},
        messages=(
            PromptMessage(role="assistant", content=f"CALC({expression})"),
            PromptMessage(role="user", content=f"RESULT: {answer}"),
            PromptMessage(role="assistant", content=f"ANSWER: {answer}"),
        ),
    )


CALC_PROMPT = PromptTemplate(
    instructions=(
        "Solve the word problem. First write CALC(expression) with the arithmetic to compute. "
        "You will get RESULT: value. Then write ANSWER: number."
    ),
    template="Question: {question}",
    demos=(
        solved(
            "Ann has 12 stickers and gets 5 more. How many stickers does Ann have?", "12 + 5", "17"
        ),
        solved(
            "A box holds 6 rows of 4 eggs, and 3 eggs break. How many eggs are left?",
            "6 * 4 - 3",
            "21",
        ),
        solved(
            "There are 7 red and 8 blue cars, each with 4 wheels. How many wheels?",
            "(7 + 8) * 4",
            "60",
        ),
    ),
)

_CALC = re.compile(r"CALC\(([^()]*(?:\([^()]*\)[^()]*)*)\)")
_ANSWER = re.compile(r"ANSWER:\s*(-?\d+(?:\.\d+)?)")
MAX_TOKENS = 24


def parse_answer(text: str) -> float | None:
    """The number after ``ANSWER:``, or None."""
    match = _ANSWER.search(text)
    return float(match.group(1)) if match else None


def tidy_turn(text: str) -> str:
    """The part of a model turn the agent reads: ``CALC(...)`` or ``ANSWER: n`` (else all of it).

    ``algorithm: demos`` (``demos.yaml``) passes the model's recorded turns through it before they
    become examples, so a stray token the base model wrote after ``CALC(2 + 3)`` and the agent
    ignored is not taught back to it.
    """
    for pattern in (_CALC, _ANSWER):
        match = pattern.search(text)
        if match is not None:
            return match.group(0)
    return text


def calculator(text: str) -> str | None:
    """Evaluate the first ``CALC(...)`` in ``text``; ``None`` when there is none."""
    match = _CALC.search(text)
    if match is None:
        return None
    try:
        value = evaluate_expression(match.group(1))
    except ValueError as exc:
        return f"error: {exc}"
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"


async def solve(
    client: AsyncOpenAI, model: str, question: str, prompt: PromptTemplate = CALC_PROMPT
) -> tuple[float | None, list[str]]:
    """Run the two-step protocol; returns the parsed answer and the model's outputs."""
    messages: list[Any] = prompt.messages(question=question)
    first = await client.chat.completions.create(
        model=model, messages=messages, max_tokens=MAX_TOKENS, stop=["\n"]
    )
    call_text = first.choices[0].message.content or ""
    result = calculator(call_text)
    if result is None:
        return None, [call_text]
    messages += [
        {"role": "assistant", "content": call_text},
        {"role": "user", "content": f"RESULT: {result}"},
    ]
    second = await client.chat.completions.create(
        model=model, messages=messages, max_tokens=MAX_TOKENS, stop=["\n"]
    )
    answer_text = second.choices[0].message.content or ""
    return parse_answer(answer_text), [call_text, answer_text]


@fulmen.rollout
async def calc_agent(
    task: dict[str, Any], llm: fulmen.LLM, prompt: PromptTemplate = CALC_PROMPT
) -> float:
    """Reward 1.0 when the final answer equals the task's answer."""
    client = AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key)
    try:
        answer, _ = await solve(client, llm.model, task["question"], prompt)
    finally:
        await client.close()
    return 1.0 if answer is not None and abs(answer - task["answer"]) < 1e-6 else 0.0


def train_tasks() -> list[dict[str, Any]]:
    """512 generated training problems."""
    return make_tasks("train", 512)


def test_tasks() -> list[dict[str, Any]]:
    """64 held-out problems (never in the training split)."""
    return make_tasks("test", 64)
