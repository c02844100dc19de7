"""What a re-scoring reward function receives: a stored rollout as plain, typed values.

Agents compute their reward from the task and what the model answered (the toy example counts
letters in the answer; calc parses ``ANSWER: n`` from the last reply and compares it with the
task's ``answer``). ``RecordedRollout`` gives a new reward function the same things without
running the agent: the task as it was enqueued, every recorded call (the messages sent, the
reply's text and tool calls) and, as a shortcut, ``final_text``, the last reply's text.

>>> call = RecordedCall(messages=({"role": "user", "content": "hi"},), text="aaa")
>>> RecordedRollout(rollout_id="r1", task={"prompt": "hi"}, calls=(call,)).final_text
'aaa'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fulmen.transitions.trajectory import AttemptRecords
    from fulmen.types import LLMCall, Rollout

__all__ = ["RecordedCall", "RecordedRollout", "recorded_call", "recorded_rollout"]


@dataclass(frozen=True)
class RecordedCall:
    """One model call of a rollout as the agent made and saw it.

    Attributes:
        messages: the chat messages the agent sent (empty for ``completions`` calls).
        prompt: the prompt of a ``completions`` call (``None`` for chat).
        text: the reply's text (first choice; ``None`` when it had none, e.g. only tool calls).
        tool_calls: the first choice's tool calls as OpenAI shapes them (``function.name``,
            ``function.arguments`` as a JSON string).
        finish_reason: why the model stopped (``stop``, ``length``, ``tool_calls``).
        agent_name: the agent that made the call, when it was named.
        request / response: the raw JSON, for anything else.
    """

    messages: tuple[Mapping[str, Any], ...] = ()
    prompt: str | None = None
    text: str | None = None
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    finish_reason: str | None = None
    agent_name: str | None = None
    request: Mapping[str, Any] = field(default_factory=dict[str, Any])
    response: Mapping[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True)
class RecordedRollout:
    """A finished rollout as a reward function sees it.

    Attributes:
        rollout_id / task_id: which rollout and task.
        task: the task input, as the agent received it.
        calls: the latest attempt's model calls, in order.
        mode: ``train``, ``val``, ``test`` or ``production``.
        resources_version: the resources it ran with.
        reward: the reward stored now (the agent's, or a later posted one).
    """

    rollout_id: str
    task: Any
    calls: tuple[RecordedCall, ...] = ()
    task_id: str | None = None
    mode: str = "train"
    resources_version: int | None = None
    reward: float | None = None

    @property
    def final_text(self) -> str:
        """Return the last call's reply text, or ``""`` when there is none."""
        return (self.calls[-1].text or "") if self.calls else ""


def recorded_call(call: LLMCall) -> RecordedCall:
    """Build the ``RecordedCall`` view of a stored call."""
    request = call.request
    response = call.response or {}
    first = _first_choice(response)
    message = first.get("message")
    message = message if isinstance(message, dict) else {}
    text = message.get("content") if call.endpoint == "chat/completions" else first.get("text")
    if not isinstance(text, str) and call.choices:
        text = call.choices[0].text
    messages = request.get("messages")
    prompt = request.get("prompt")
    tools = message.get("tool_calls")
    tool_calls = [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
    finish = first.get("finish_reason")
    return RecordedCall(
        messages=tuple(m for m in messages if isinstance(m, dict))
        if isinstance(messages, list)
        else (),
        prompt=prompt if isinstance(prompt, str) else None,
        text=text if isinstance(text, str) else None,
        tool_calls=tuple(tool_calls),
        finish_reason=finish if isinstance(finish, str) else None,
        agent_name=call.agent_name,
        request=request,
        response=response,
    )


def _first_choice(response: Mapping[str, Any]) -> dict[str, Any]:
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return {}


def recorded_rollout(rollout: Rollout, records: AttemptRecords) -> RecordedRollout:
    """Build the ``RecordedRollout`` of a stored rollout and its latest attempt's records."""
    return RecordedRollout(
        rollout_id=rollout.rollout_id,
        task=rollout.input,
        calls=tuple(recorded_call(c) for c in records.calls),
        task_id=rollout.task_id,
        mode=rollout.mode.value,
        resources_version=rollout.resources_version,
        reward=records.final_reward,
    )
