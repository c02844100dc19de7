"""0.x's trace adapters as what they configured in fulmen.

0.x turned spans into training data with an adapter object; fulmen builds transitions from the
gateway's call records (``fulmen.transitions``), configured by ``algorithm.transitions``. The
adapters 0.x training scripts pass to ``Trainer(adapter=...)`` are accepted for what they
select: ``TracerTraceToTriplet(agent_match=...)`` and ``LlmProxyTraceToTriplet`` the calls to
train on, ``TraceToMessages`` the conversations APO's critic reads (fulmen's ``apo`` reads
the gateway's records).

``TraceToMessages().adapt(spans)`` works as in 0.x: ``LightningStore.query_spans`` returns the
gateway's record of each model call as a span (``fulmen.compat.agentlightning.spans``), and
each chat call becomes one ``OpenAIMessages``: the messages sent and the reply, with the tools
offered. The triplet adapters' ``adapt`` is refused: fulmen's training data are transitions
(``fulmen.transitions.load_trajectory``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from fulmen.compat.agentlightning.agent_match import agent_patterns
from fulmen.compat.agentlightning.errors import NotSupported
from fulmen.compat.agentlightning.spans import call_of_span

__all__ = [
    "LlmProxyTraceToTriplet",
    "OpenAIMessages",
    "TraceAdapter",
    "TraceToMessages",
    "TracerTraceToTriplet",
]


class OpenAIMessages(TypedDict):
    """One model call as a chat conversation: the messages and reply, and the tools offered."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None


class TraceAdapter:
    """Base of the adapters ``agl.Trainer`` accepts; ``agents()`` is what it selects."""

    def agents(self) -> tuple[str, ...] | None:
        """Return the fnmatch patterns of the agents whose calls train (``None``: every call)."""
        return None

    def adapt(self, source: Any) -> Any:
        """Refused: fulmen builds training data from the gateway's records."""
        raise NotSupported(
            f"{type(self).__name__}.adapt",
            why="fulmen builds transitions from the gateway's call records, not from spans",
            instead="fulmen.transitions.load_trajectory(store, rollout_id) or "
            "LightningStore.query_spans",
        )


class TracerTraceToTriplet(TraceAdapter):
    """Selects the calls to train by agent name (``agent_match``, a regular expression)."""

    def __init__(self, *, agent_match: str | None = None, **options: Any) -> None:
        if options:
            raise NotSupported(
                f"TracerTraceToTriplet({', '.join(sorted(options))})",
                why="fulmen's transitions are configured by algorithm.transitions",
                instead="set merge / credit / missing_reward under algorithm.transitions",
            )
        self.agent_match = agent_match

    def agents(self) -> tuple[str, ...] | None:
        """Return the agent patterns ``agent_match`` translates to."""
        return agent_patterns(self.agent_match) if self.agent_match is not None else None


class LlmProxyTraceToTriplet(TraceAdapter):
    """Every call the proxy recorded trains: fulmen's default."""


class TraceToMessages(TraceAdapter):
    """Turn a rollout's model calls into chat conversations (what APO and fine-tuning read)."""

    def adapt(self, source: Sequence[Any]) -> list[OpenAIMessages]:  # type: ignore[override]
        """Return one ``OpenAIMessages`` per recorded chat call among ``source``, in order.

        ``source`` is what ``LightningStore.query_spans`` returns; spans that are not model
        calls are skipped, as 0.x skipped spans without ``gen_ai`` attributes. A Responses or
        Messages API call is refused (its request is not a chat message list).
        """
        out: list[OpenAIMessages] = []
        for span in source:
            call = call_of_span(span)
            if call is None:
                continue
            endpoint, request, response = call
            if endpoint != "chat/completions":
                raise NotSupported(
                    f"TraceToMessages.adapt of a {endpoint} call",
                    why="its request is not a list of chat messages",
                    instead="read span.attributes['fulmen.call.request'] and "
                    "['fulmen.call.response'] of the call's span",
                )
            messages = [dict(m) for m in request.get("messages") or [] if isinstance(m, dict)]
            choices = (response or {}).get("choices") or []
            reply = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
            if isinstance(reply, dict):
                messages.append(dict(reply))
            tools = request.get("tools")
            out.append(OpenAIMessages(messages=messages, tools=tools or None))
        return out
