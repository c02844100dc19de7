"""The Search-R1 example of 0.x v0.2.2 (``examples/search_r1``): an async class agent.

``training_rollout_async`` takes an extra ``temperature`` (1.0), which
``validation_rollout_async`` sets to 0.0; the client is built on ``llm.endpoint`` (0.2's
tracer recorded the calls whatever URL they used); the reward is an async ``@reward``
function. ``main`` is the example's: the legacy ``Trainer(n_workers=128).fit(agent, URL)``.
"""

from __future__ import annotations

import os
import re
from typing import Any, ClassVar, cast

from openai import OpenAI

from fulmen.compat.agentlightning import (
    LLM,
    LitAgent,
    NamedResources,
    Trainer,
    configure_logger,
    reward,
)

configure_logger()

INSTRUCTION = "Answer inside <answer> and </answer>. Question: "


def compute_score_em(prediction: str, golden_answers: list[str]) -> float:
    match = re.search(r"<answer>(.*?)</answer>", prediction, re.DOTALL)
    return float(bool(match) and match.group(1).strip().lower() in golden_answers)


@reward
async def eval(prediction: str, ground_truth: list[str]) -> float:
    return compute_score_em(prediction, ground_truth)


def call_llm(client: OpenAI, model: str, content: str, temperature: float = 1.0) -> str:
    response = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": content}],
        temperature=temperature,
        max_tokens=16,
    )
    return response.choices[0].message.content or ""


class Searchr1Agent(LitAgent[Any]):
    temperatures: ClassVar[list[float]] = []

    async def training_rollout_async(
        self, task: Any, resources: NamedResources, rollout: Any, temperature: float = 1.0
    ) -> Any:
        self.temperatures.append(temperature)
        llm: LLM = cast(LLM, resources.get("main_llm"))
        client = OpenAI(
            base_url=llm.endpoint, api_key=os.environ.get("OPENAI_API_KEY", "token-abc123")
        )
        try:
            content = call_llm(client, llm.model, INSTRUCTION + task["question"], temperature)
        finally:
            client.close()
        return await eval(content, list(task["golden_answers"]))

    async def validation_rollout_async(
        self, task: Any, resources: NamedResources, rollout: Any
    ) -> Any:
        return await self.training_rollout_async(task, resources, rollout, temperature=0.0)


def main() -> None:
    Trainer(n_workers=128).fit(Searchr1Agent(), "http://localhost:9999/")
