"""Anthropic's Messages API as one ``WireApi``: served over the chat path of a token-level engine.

The translation itself is ``fulmen.wire.messages.translate`` (requests, replies, the error
shape) and ``fulmen.wire.messages.stream`` (events); this module binds them to one call and
names the API's paths, key header, spec and export.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from fulmen.wire.api import ApiSpec, WireApi, error_message
from fulmen.wire.errors import BadRequest
from fulmen.wire.messages.stream import MessageEvents
from fulmen.wire.messages.translate import (
    MessageIds,
    anthropic_error_body,
    assistant_message,
    chat_request,
    message_from_chat,
)
from fulmen.wire.openai import OPENAI_SCHEMAS
from fulmen.wire.translation import ChatTranslation, EventStream

__all__ = ["MESSAGES", "MESSAGES_API", "MessagesApi", "MessagesTranslation"]

MESSAGES: Final = "messages"


class MessagesTranslation:
    """One Anthropic Messages call served as a chat completion (``Translation``)."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body
        self.ids = MessageIds()
        self._chat: ChatTranslation | None = None

    def chat(self) -> ChatTranslation:
        """Return the chat request to send (built once, then cached)."""
        if self._chat is None:
            self._chat = chat_request(self.body)
        return self._chat

    def behaviour_fields(self) -> Mapping[str, Any]:
        """Return the chat request: its ``tool_choice`` is the one the rules know."""
        return self.chat().request

    def reply(self, chat: Mapping[str, Any]) -> dict[str, Any]:
        """Return the Messages object for the engine's chat reply."""
        return message_from_chat(chat, self.body, self.ids)

    def error_reply(self, status: int, body: dict[str, Any]) -> dict[str, Any]:
        """Return the engine's OpenAI-shaped error body in Anthropic's shape."""
        return anthropic_error_body(status, error_message(body))

    def events(self) -> EventStream:
        """Return the Messages event stream of this call."""
        return MessageEvents(self.body, self.ids)


class MessagesApi(WireApi):
    """The Messages API: Anthropic's error shape, translated calls, exported as chat."""

    def translation(self, body: Mapping[str, Any]) -> MessagesTranslation:
        """Return the call's translation to a chat completion."""
        return MessagesTranslation(body)

    def error_body(self, status: int, openai_body: dict[str, Any]) -> dict[str, Any]:
        """Return ``{"type": "error", "error": {"type", "message"}}``, Anthropic's shape."""
        return anthropic_error_body(status, error_message(openai_body))

    def stream_error(self, status: int, openai_body: dict[str, Any]) -> bytes:
        """Return Anthropic's ``error`` event."""
        body = self.error_body(status, openai_body)
        return b"event: error\ndata: " + orjson.dumps(body) + b"\n\n"

    def conversation(self, request: Mapping[str, Any]) -> list[Any] | None:
        """Return the chat messages the engine got for ``request``."""
        try:
            return chat_request(request).request["messages"]
        except BadRequest:
            return None

    def reply_message(self, response: Mapping[str, Any]) -> dict[str, Any] | None:
        """Return the reply's assistant message in chat form."""
        return assistant_message(response)


_SCHEMAS = {
    "AnthropicError": {
        "type": "object",
        "required": ["type", "error"],
        "properties": {
            "type": {"const": "error"},
            "error": {
                "type": "object",
                "required": ["type", "message"],
                "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    },
    "MessagesRequest": {
        "type": "object",
        "description": (
            "Anthropic's Messages request; fields not listed pass through or are ignored "
            "(thinking, metadata, cache_control). Image and document blocks are refused with "
            "a 400 for token-level engines."
        ),
        "required": ["model", "max_tokens", "messages"],
        "properties": {
            "model": {"type": "string"},
            "system": {"type": "string"},
            "max_tokens": {"type": "integer", "minimum": 1, "maximum": 4096},
            "messages": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["role", "content"],
                    "properties": {
                        "role": {"enum": ["user", "assistant"]},
                        "content": {"type": "string"},
                    },
                },
            },
            "temperature": {"type": "number", "minimum": 0, "maximum": 1},
        },
    },
    "Message": {
        "type": "object",
        "description": "The Messages object (translated back from the engine's chat reply).",
        "required": ["id", "type", "role", "content"],
        "properties": {
            "id": {"type": "string"},
            "type": {"const": "message"},
            "role": {"const": "assistant"},
            "content": {"type": "array", "items": {"type": "object"}},
            "stop_reason": {"type": ["string", "null"]},
            "usage": {"type": "object"},
        },
    },
}

#: ``POST /v1/messages`` (also below a base URL that ends in ``/v1``), keys in ``x-api-key``.
MESSAGES_API: Final = MessagesApi(
    name="anthropic-messages",
    endpoint=MESSAGES,
    aliases=(f"v1/{MESSAGES}",),
    key_header="x-api-key",
    forwarded=(("POST", f"{MESSAGES}/count_tokens"),),
    spec=ApiSpec(
        "messages",
        "An Anthropic Messages call",
        request="MessagesRequest",
        reply="Message",
        error="AnthropicError",
        schemas={**OPENAI_SCHEMAS, **_SCHEMAS},
    ),
)
