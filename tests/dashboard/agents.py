"""An agent for the dashboard's replay test: the toy agent with its request worded differently,
so the replay of a recorded toy rollout diverges at call #1 in ``messages``."""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI

import fulmen


@fulmen.rollout
async def reworded_toy(task: dict[str, Any], llm: fulmen.LLM) -> float:
    """Ask for the toy task with "Reworded: " before it; reward as the toy's (letters ``a``)."""
    client = AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key)
    try:
        response = await client.chat.completions.create(
            model=llm.model,
            messages=[{"role": "user", "content": f"Reworded: {task['prompt']}"}],
            max_tokens=8,
        )
    finally:
        await client.close()
    return min(1.0, (response.choices[0].message.content or "").count("a") / 8)
