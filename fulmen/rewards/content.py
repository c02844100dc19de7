r"""What a judge reads of a rollout: ``JudgedRollout``, built from the store's records.

The judge sees the task as the agent received it and the model's replies: the last one
(``content: final``) or every one in order with its agent's name and tool calls
(``transcript``). A ``check`` criterion gets the same ``JudgedRollout``.

>>> run = JudgedRollout("r1", {"q": "2+2?"}, (JudgedReply(text="4"),))
>>> run.final_text, render_content(run, mode="transcript", max_chars=1000)
('4', '[reply 1]\n4')
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from fulmen.transitions.trajectory import AttemptRecords
    from fulmen.types import LLMCall, Rollout

__all__ = ["JudgedReply", "JudgedRollout", "judged_rollout", "render_content", "render_task"]


@dataclass(frozen=True)
class JudgedReply:
    """One model reply of the rollout: its text, tool calls (``name(arguments)``) and agent."""

    text: str | None = None
    tool_calls: tuple[str, ...] = ()
    agent_name: str | None = None


@dataclass(frozen=True)
class JudgedRollout:
    """A finished rollout as a judge or a ``check`` function sees it.

    Attributes:
        rollout_id / task_id: which rollout and task.
        task: the task input, as the agent received it.
        replies: the latest attempt's model replies, in store order.
    """

    rollout_id: str
    task: Any
    replies: tuple[JudgedReply, ...] = ()
    task_id: str | None = None

    @property
    def final_text(self) -> str:
        """Return the last reply's text, or ``""`` when there is none."""
        return (self.replies[-1].text or "") if self.replies else ""


def judged_rollout(rollout: Rollout, records: AttemptRecords) -> JudgedRollout:
    """Build the ``JudgedRollout`` of a stored rollout from its latest attempt's records."""
    ordered = sorted(records.calls, key=lambda c: c.sequence)
    return JudgedRollout(
        rollout_id=rollout.rollout_id,
        task=rollout.input,
        replies=tuple(_reply(c) for c in ordered),
        task_id=rollout.task_id,
    )


def _reply(call: LLMCall) -> JudgedReply:
    response: dict[str, Any] = dict(call.response or {})
    choices = response.get("choices")
    first: Any = choices[0] if isinstance(choices, list) and choices else {}
    message: Any = first.get("message") if isinstance(first, dict) else None
    text: Any = None
    tools: list[str] = []
    if isinstance(message, dict):
        text = message.get("content")
        for tool in message.get("tool_calls") or []:
            fn = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(fn, dict):
                tools.append(f"{fn.get('name')}({fn.get('arguments')})")
    elif isinstance(first, dict):
        text = first.get("text")
    if not isinstance(text, str) and call.choices:
        text = call.choices[0].text
    return JudgedReply(
        text=text if isinstance(text, str) else None,
        tool_calls=tuple(tools),
        agent_name=call.agent_name,
    )


def render_task(task: Any) -> str:
    """Render the task as the judge reads it: a string as it is, anything else as sorted JSON."""
    return task if isinstance(task, str) else json.dumps(task, sort_keys=True, ensure_ascii=False)


def render_content(
    rollout: JudgedRollout, *, mode: Literal["final", "transcript"], max_chars: int
) -> str:
    """Render the rollout's replies as the judge reads them, cut to their last ``max_chars``."""
    if mode == "final":
        text = rollout.final_text
    else:
        parts: list[str] = []
        for index, reply in enumerate(rollout.replies, 1):
            agent = f", agent {reply.agent_name}" if reply.agent_name else ""
            body = [reply.text or "", *(f"<tool call> {t}" for t in reply.tool_calls)]
            parts.append(f"[reply {index}{agent}]\n" + "\n".join(b for b in body if b))
        text = "\n\n".join(parts)
    if len(text) > max_chars:
        text = "[... cut ...]\n" + text[-max_chars:]
    return text or "(no reply)"
