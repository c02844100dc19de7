"""The toy agent, two seconds slower, for the runner host that is cut off.

The probe cuts that host's link the moment the store sees one of its attempts running. The toy
agent's own rollout (one 8-token call) can end within the probe's poll and the ``ip link``
command, and then nothing is left running to be lost; two seconds first keep it running.
Imported from the toy example's folder (the runner's working directory).
"""

from __future__ import annotations

import asyncio
from typing import Any

from agent import TOY_PROMPT, toy_agent

import fulmen
from fulmen.types import PromptTemplate


@fulmen.rollout
async def slow_toy_agent(
    task: dict[str, Any], llm: fulmen.LLM, prompt: PromptTemplate = TOY_PROMPT
) -> float:
    """``toy_agent`` after two seconds."""
    await asyncio.sleep(2)
    return float(await toy_agent(task, llm, prompt))
