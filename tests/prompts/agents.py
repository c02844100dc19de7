"""Agents that read their prompt from the rollout's resources, for the prompt tests.

The reward is scripted from the prompt's text so a test knows which version should score
higher: a task is solved when the prompt's instructions contain the task's ``word``.
"""

from __future__ import annotations

from typing import Any

import fulmen
from fulmen.types import PromptTemplate


@fulmen.rollout
async def word_agent(task: dict[str, Any], prompt: PromptTemplate) -> float:
    """Reward 1.0 when the rendered prompt mentions the task's word, else 0.0."""
    text = prompt.render(**task)
    return 1.0 if task["word"] in prompt.instructions and text.endswith(task["q"]) else 0.0


@fulmen.rollout
def sync_word_agent(task: dict[str, Any], prompt: PromptTemplate) -> float:
    """The same as ``word_agent``, sync, so the runner runs it in a worker process."""
    return 1.0 if task["word"] in prompt.instructions else 0.0
