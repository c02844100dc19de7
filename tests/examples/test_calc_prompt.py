"""The calc example reads its prompt from the rollout's resources; as shipped, nothing changed.

``GOLDEN`` is what the calc agent sent before its prompt became a resource (its constants and
``few_shot_messages``, rendered for one question): the default prompt must render exactly
that, through the agent's real path (runner, gateway, recorded calls), so GRPO on calc sees the
same tokens as before. A published prompt version reaches the agent instead of the default.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fulmen.agent.runner import Runner
from fulmen.gateway import GatewayConfig, create_app
from fulmen.store import open_store
from fulmen.types import (
    Demonstration,
    LLMResource,
    PromptMessage,
    PromptTemplate,
    ResourcesCreate,
    RolloutCreate,
)
from tests.gateway.scripted_upstream import Reply, Script, create_upstream_app, serve_app

CALC = Path(__file__).resolve().parents[2] / "examples" / "calc"
QUESTION = "Tom has 3 apples and buys 4 more. How many apples does Tom have now?"
GOLDEN: list[dict[str, str]] = [
    {
        "role": "user",
        "content": "Solve the word problem. First write CALC(expression) with the arithmetic to "
        "compute. You will get RESULT: value. Then write ANSWER: number.\nQuestion: Ann has 12 "
        "stickers and gets 5 more. How many stickers does Ann have?",
    },
    {"role": "assistant", "content": "CALC(12 + 5)"},
    {"role": "user", "content": "RESULT: 17"},
    {"role": "assistant", "content": "ANSWER: 17"},
    {
        "role": "user",
        "content": "Question: A box holds 6 rows of 4 eggs, and 3 eggs break. How many eggs are "
        "left?",
    },
    {"role": "assistant", "content": "CALC(6 * 4 - 3)"},
    {"role": "user", "content": "RESULT: 21"},
    {"role": "assistant", "content": "ANSWER: 21"},
    {
        "role": "user",
        "content": "Question: There are 7 red and 8 blue cars, each with 4 wheels. How many "
        "wheels?",
    },
    {"role": "assistant", "content": "CALC((7 + 8) * 4)"},
    {"role": "user", "content": "RESULT: 60"},
    {"role": "assistant", "content": "ANSWER: 60"},
    {"role": "user", "content": f"Question: {QUESTION}"},
]


@pytest.fixture
def calc() -> Iterator[ModuleType]:
    """The example's agent module, imported as the example imports it (its directory on path)."""
    sys.path.insert(0, str(CALC))
    # another example's ``agent``/``tasks`` module may have been imported by an earlier test
    sys.modules.pop("agent", None)
    sys.modules.pop("tasks", None)
    try:
        yield importlib.import_module("agent")
    finally:
        sys.path.remove(str(CALC))
        sys.modules.pop("agent", None)
        sys.modules.pop("tasks", None)


def test_shipped_prompt_renders_the_messages_the_agent_always_sent(calc: ModuleType) -> None:
    assert calc.CALC_PROMPT.messages(question=QUESTION) == GOLDEN


async def run_calc(calc: ModuleType, prompt: PromptTemplate | None) -> list[list[Any]]:
    """One calc rollout through runner + gateway; returns the messages of each recorded call."""
    script = Script(
        reply_for=lambda body: Reply(
            content="ANSWER: 7"
            if body["messages"][-1]["content"].startswith("RESULT")
            else "CALC(3 + 4)"
        )
    )
    store = await open_store("memory://")
    try:
        async with serve_app(create_upstream_app(script)) as upstream:
            resources: dict[str, Any] = {"llm": LLMResource(base_url=f"{upstream}/v1", model="m")}
            if prompt is not None:
                resources["prompt"] = prompt
            await store.add_resources(ResourcesCreate(resources=resources))
            (rollout,) = await store.enqueue(
                [RolloutCreate(input={"id": "t", "question": QUESTION, "answer": 7})]
            )
            app = create_app(store, [f"{upstream}/v1"], config=GatewayConfig(flush_interval_s=0.01))
            async with serve_app(app) as gateway_url:
                runner = Runner(store, calc.calc_agent, gateway_url=gateway_url, poll_interval=0.02)
                stats = await runner.run(until_idle=True)
                await app.state.gateway.flush()
        assert stats.succeeded == 1
        calls = (await store.query_llm_calls(rollout.rollout_id)).items
        return [c.request["messages"] for c in sorted(calls, key=lambda c: c.sequence)]
    finally:
        await store.aclose()


async def test_without_a_published_prompt_the_agent_sends_the_golden_messages(
    calc: ModuleType,
) -> None:
    first, second = await run_calc(calc, prompt=None)
    assert first == GOLDEN
    assert second == [
        *GOLDEN,
        {"role": "assistant", "content": "CALC(3 + 4)"},
        {"role": "user", "content": "RESULT: 7"},
    ]


async def test_a_published_prompt_version_replaces_the_default(calc: ModuleType) -> None:
    demo = Demonstration(
        inputs={"question": "Two plus two?"},
        messages=(
            PromptMessage(role="assistant", content="CALC(2 + 2)"),
            PromptMessage(role="user", content="RESULT: 4"),
            PromptMessage(role="assistant", content="ANSWER: 4"),
        ),
    )
    published = calc.CALC_PROMPT.model_copy(update={"demos": (demo,)})
    first, _ = await run_calc(calc, prompt=published)
    assert first == published.messages(question=QUESTION)
    assert first[0]["content"].endswith("Question: Two plus two?") and len(first) == 5
