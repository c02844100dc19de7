"""Demonstrations from recorded rollouts: the task's input fields and the model's own turns.

A successful rollout of a chat agent is one growing conversation: each call sends the earlier
messages plus the new ones. The demonstration of that rollout is what followed the first
call's prompt in the last call's conversation (for calc: ``CALC(...)``, ``RESULT: ...``,
``ANSWER: ...``), exactly as recorded by the gateway: never generated again. Its inputs are the
task's values of the prompt template's fields, so the agent renders it with the same template
as a new question.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from fulmen.transitions.export import call_conversation
from fulmen.transitions.trajectory import AttemptRecords
from fulmen.types.prompt import Demonstration, PromptMessage

__all__ = ["demonstration_from", "exchange_after_prompt", "unique_by_task"]

_ROLES = ("system", "user", "assistant", "tool")


def exchange_after_prompt(records: AttemptRecords) -> list[PromptMessage] | None:
    """Return the turns after the first call's prompt, up to the last call's reply.

    ``None`` when the attempt has no usable chat call, when its calls do not form one
    conversation (a later call does not start with the first call's messages), or when a turn
    is not plain text (tool calls, multi-part content), which a prompt demonstration cannot hold.
    """
    conversations = [c for c in map(call_conversation, records.calls) if c is not None]
    if not conversations:
        return None
    opening = conversations[0][:-1]
    last = conversations[-1]
    if last[: len(opening)] != opening:
        return None
    turns: list[PromptMessage] = []
    for message in last[len(opening) :]:
        role, content = message.get("role"), message.get("content")
        if role not in _ROLES or not isinstance(content, str) or message.get("tool_calls"):
            return None
        turns.append(PromptMessage(role=role, content=content))
    if not turns or turns[-1].role != "assistant":
        return None
    return turns


def demonstration_from(
    records: AttemptRecords,
    task: Any,
    fields: Sequence[str],
    *,
    reward: float,
    tidy: Callable[[str], str] | None = None,
) -> Demonstration | None:
    """Turn one successful attempt into a demonstration of a template with ``fields``.

    The inputs are ``task``'s values of ``fields`` (and nothing else: an answer key in the
    task must not reach the prompt); the turns come from ``exchange_after_prompt``, the
    model's own turns passed through ``tidy`` when given. The metadata names the source
    rollout, its calls and its reward, and says whether ``tidy`` changed a turn (the recorded
    text stays in the store under those call ids). ``None`` when the task lacks a field or the
    attempt has no usable exchange.
    """
    if not isinstance(task, Mapping) or any(f not in task for f in fields):
        return None
    turns = exchange_after_prompt(records)
    if turns is None:
        return None
    tidied = [
        PromptMessage(role=t.role, content=tidy(t.content))
        if tidy is not None and t.role == "assistant"
        else t
        for t in turns
    ]
    values: Mapping[str, Any] = task
    return Demonstration(
        inputs={f: values[f] for f in fields},
        messages=tuple(tidied),
        metadata={
            "rollout_id": records.rollout_id,
            "task_id": records.task_id,
            "call_ids": [c.call_id for c in records.calls],
            "reward": reward,
            "is_tidied": tidied != turns,
        },
    )


def unique_by_task(demos: Iterable[Demonstration]) -> list[Demonstration]:
    """Keep the first demonstration of each task (several rollouts may solve one task)."""
    seen: set[Any] = set()
    out: list[Demonstration] = []
    for demo in demos:
        key = demo.metadata.get("task_id") or demo.metadata.get("rollout_id")
        if key not in seen:
            seen.add(key)
            out.append(demo)
    return out
