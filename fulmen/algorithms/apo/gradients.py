"""Textual gradients: what the critic is shown, what the editor is asked, and its answer parsed.

The critic sees the prompt, a few low-reward rollouts (the task's input, each model call's last
message and reply, the reward) and is asked why the prompt led there (the "gradient"). The
editor sees the part of the prompt being optimized and the critique, and answers with a new
version between ``<prompt>`` tags. Pure text functions; the model calls are in ``client.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from fulmen.types import LLMCall, PromptTemplate

__all__ = [
    "FailedRollout",
    "critique_messages",
    "edit_messages",
    "edited_prompt",
    "failed_rollout",
]

_TAGGED = re.compile(r"<prompt>\s*(.*?)\s*(?:</prompt>|$)", re.DOTALL | re.IGNORECASE)

_CRITIC_SYSTEM = (
    "You review the prompt of an AI agent. You are shown the prompt and runs in which the "
    "agent got a low reward. Explain briefly, as a numbered list, what in the prompt made the "
    "agent fail and what the prompt should say instead."
)
_EDITOR_SYSTEM = (
    "You rewrite the prompt of an AI agent to fix the problems a reviewer found. Keep what "
    "works, keep every {placeholder} exactly as written, and answer with the new prompt only, "
    "between <prompt> and </prompt>."
)


@dataclass(frozen=True)
class FailedRollout:
    """One low-reward rollout as the critic sees it: input, the model's turns, the reward."""

    task: Any
    turns: tuple[tuple[str, str], ...]
    reward: float


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _last_message(request: dict[str, Any]) -> str:
    messages = request.get("messages")
    if isinstance(messages, list) and messages:
        last: Any = messages[-1]
        if isinstance(last, dict):
            content: Any = last.get("content")  # pyright: ignore[reportUnknownMemberType]
            return content if isinstance(content, str) else json.dumps(content)
    prompt = request.get("prompt") or request.get("input")
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


def failed_rollout(
    task: Any, calls: Sequence[LLMCall], reward: float, *, max_chars: int
) -> FailedRollout:
    """Build what the critic sees of a rollout from its recorded calls."""
    turns = tuple(
        (
            _clip(_last_message(call.request), max_chars),
            _clip(call.choices[0].text or "" if call.choices else "", max_chars),
        )
        for call in calls
    )
    return FailedRollout(task, turns, reward)


def _task_text(task: Any, max_chars: int) -> str:
    text = task if isinstance(task, str) else json.dumps(task, ensure_ascii=False)
    return _clip(text, max_chars)


def critique_messages(
    prompt: PromptTemplate, failures: Sequence[FailedRollout], *, max_chars: int
) -> list[dict[str, str]]:
    """Return the chat asking the critic why ``prompt`` led to ``failures``."""
    parts = [f"The agent's prompt:\n<prompt>\n{prompt.export_text()}\n</prompt>\n"]
    for number, failure in enumerate(failures, 1):
        lines = [f"Run {number}: input {_task_text(failure.task, max_chars)}"]
        for index, (sent, reply) in enumerate(failure.turns, 1):
            lines.append(f"  call {index} last message: {sent}")
            lines.append(f"  call {index} reply: {reply}")
        lines.append(f"  reward: {failure.reward:g}")
        parts.append("\n".join(lines))
    parts.append("Why did the prompt lead to these low rewards? How should it change?")
    return [
        {"role": "system", "content": _CRITIC_SYSTEM},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def _edited_part(prompt: PromptTemplate) -> str:
    """Return the text the editor rewrites: the instructions, else the template."""
    return prompt.instructions_text() if prompt.instructions else prompt.template


def edit_messages(prompt: PromptTemplate, critique: str) -> list[dict[str, str]]:
    """Return the chat asking the editor to rewrite the prompt's text from ``critique``."""
    fields = ", ".join("{" + f + "}" for f in prompt.field_names())
    keep = f" It must contain {fields}." if fields and not prompt.instructions else ""
    user = (
        f"Prompt:\n<prompt>\n{_edited_part(prompt)}\n</prompt>\n\n"
        f"Reviewer's feedback:\n{critique.strip()}\n\n"
        f"Write the improved prompt.{keep} Answer with it between <prompt> and </prompt>."
    )
    return [{"role": "system", "content": _EDITOR_SYSTEM}, {"role": "user", "content": user}]


def edited_prompt(prompt: PromptTemplate, answer: str) -> tuple[PromptTemplate | None, str]:
    """Apply the editor's ``answer`` to ``prompt``: the new prompt, or ``None`` and why not.

    The text between ``<prompt>`` tags (or the whole answer when there are none) replaces the
    instructions, or the template when the prompt has no instructions; the result must be a
    valid template with the same fields, different from the original.
    """
    match = _TAGGED.search(answer)
    text = (match.group(1) if match else answer).strip()
    if not text:
        return None, "the editor returned no text"
    if text == _edited_part(prompt).strip():
        return None, "the editor returned the prompt unchanged"
    if prompt.instructions:  # instructions are plain text: any brace the editor wrote is literal
        update = {"instructions": text.replace("{", "{{").replace("}", "}}")}
    else:
        update = {"template": text}
    data = {**prompt.model_dump(), **update, "fields": prompt.fields, "lineage": None}
    try:
        return PromptTemplate.model_validate(data), ""
    except ValidationError as exc:
        return None, f"the edit is not a valid prompt: {exc.errors()[0]['msg']}"
