"""One call of a wire API served over an engine's chat path (Responses, Messages): ``Translation``.

A token-level engine gives token ids and logprobs on ``/v1/chat/completions`` only, so a call
of another wire API is sent there as a chat completion and its reply turned back into that
API's shape. Each such API gives one ``Translation`` per call (``WireApi.translation``): the
proxy forwards, streams and records a translated call the same way whichever API it is, and
the record keeps the engine's token ids like any chat call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["ChatTranslation", "EventStream", "Translation"]


@dataclass
class ChatTranslation:
    """A chat request built from another API's request, and what could not be carried over.

    Attributes:
        request: the chat completion request.
        dropped_tools: the type of each tool left out because no engine can serve it.
    """

    request: dict[str, Any]
    dropped_tools: list[str] = field(default_factory=list[str])


class EventStream(Protocol):
    """Turns one streamed chat completion's chunks into the API's server-sent events (bytes)."""

    def opening(self) -> bytes:
        """Return the events sent before the engine's first chunk (may be empty)."""
        ...

    def add(self, chunk: Mapping[str, Any]) -> bytes:
        """Return the events for one decoded chat chunk."""
        ...

    def closing(self, chat: Mapping[str, Any] | None, error: Mapping[str, Any] | None) -> bytes:
        """Return the last events, given the reply rebuilt from the stream or its error."""
        ...


class Translation(Protocol):
    """One call of a wire API served as a chat completion: its request, reply and stream.

    ``chat()`` raises ``BadRequest`` for a request the chat path cannot express.
    """

    def chat(self) -> ChatTranslation:
        """Return the chat request to send (built once, then cached)."""
        ...

    def behaviour_fields(self) -> Mapping[str, Any]:
        """Return the request under the field names the behaviour-policy rules read."""
        ...

    def reply(self, chat: Mapping[str, Any]) -> dict[str, Any]:
        """Return the API's reply object for the engine's successful chat reply ``chat``."""
        ...

    def error_reply(self, status: int, body: dict[str, Any]) -> dict[str, Any]:
        """Return the API's error body for the engine's error reply ``body`` (HTTP ``status``)."""
        ...

    def events(self) -> EventStream:
        """Return a new event stream for a streamed call."""
        ...
