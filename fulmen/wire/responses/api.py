"""OpenAI's Responses API as one ``WireApi``: served over the chat path of a token-level engine.

The translation itself is ``fulmen.wire.responses.translate`` (requests and replies),
``fulmen.wire.responses.stream`` (events) and ``fulmen.wire.responses.tools`` (tools); this
module binds them to one call and names the API's paths, spec and export.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from fulmen.wire.api import ApiSpec, WireApi
from fulmen.wire.errors import BadRequest
from fulmen.wire.openai import OPENAI_SCHEMAS
from fulmen.wire.responses.stream import ResponseEvents
from fulmen.wire.responses.tools import served_tools
from fulmen.wire.responses.translate import (
    ResponseIds,
    assistant_message,
    chat_request,
    response_from_chat,
)
from fulmen.wire.translation import ChatTranslation, EventStream

__all__ = ["RESPONSES", "RESPONSES_API", "ResponsesApi", "ResponsesTranslation"]

RESPONSES: Final = "responses"


class ResponsesTranslation:
    """One Responses call served as a chat completion (``Translation``)."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body
        self.ids = ResponseIds()
        self._chat: ChatTranslation | None = None

    def chat(self) -> ChatTranslation:
        """Return the chat request to send (built once, then cached)."""
        if self._chat is None:
            request = chat_request(self.body)
            self._chat = ChatTranslation(request, served_tools(self.body.get("tools"))[1])
        return self._chat

    def behaviour_fields(self) -> Mapping[str, Any]:
        """Return the agent's request: the behaviour rules name Responses fields themselves."""
        return self.body

    def reply(self, chat: Mapping[str, Any]) -> dict[str, Any]:
        """Return the Responses object for the engine's chat reply."""
        return response_from_chat(chat, self.body, self.ids)

    def error_reply(self, status: int, body: dict[str, Any]) -> dict[str, Any]:
        """Return the engine's error body as it is (both speak OpenAI's error shape)."""
        del status
        return body

    def events(self) -> EventStream:
        """Return the Responses event stream of this call."""
        return ResponseEvents(self.body, self.ids)


class ResponsesApi(WireApi):
    """The Responses API: translated for token-level engines, exported as the chat it became."""

    def translation(self, body: Mapping[str, Any]) -> ResponsesTranslation:
        """Return the call's translation to a chat completion."""
        return ResponsesTranslation(body)

    def conversation(self, request: Mapping[str, Any]) -> list[Any] | None:
        """Return the chat messages the engine got for ``request``."""
        try:
            return chat_request(request)["messages"]
        except BadRequest:
            return None

    def reply_message(self, response: Mapping[str, Any]) -> dict[str, Any] | None:
        """Return the reply's assistant message in chat form."""
        return assistant_message(response)


_ID_ROUTE = "responses/{id}"

_SCHEMAS = {
    "ResponsesRequest": {
        "type": "object",
        "description": (
            "OpenAI's Responses request; fields not listed pass through. Fields that need "
            "server state or hosted tools (previous_response_id, conversation, background, "
            "prompt, non-function tools) are refused with a 400 for token-level engines."
        ),
        "required": ["model", "input"],
        "properties": {
            "model": {"type": "string"},
            "instructions": {"type": "string"},
            "input": {
                "oneOf": [
                    {"type": "string", "minLength": 1},
                    {
                        "type": "array",
                        "minItems": 1,
                        "items": {"$ref": "#/components/schemas/ChatMessage"},
                    },
                ]
            },
            "max_output_tokens": {"type": "integer", "minimum": 1, "maximum": 4096},
            "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        },
    },
    "Response": {
        "type": "object",
        "description": "The Responses object (translated back from the engine's chat reply).",
        "required": ["id", "object", "output"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "response"},
            "status": {"type": "string"},
            "output": {"type": "array", "items": {"type": "object"}},
            "usage": {"type": ["object", "null"]},
        },
    },
}

#: ``POST /v1/responses``; a hosted upstream's stored responses are read and deleted by id.
RESPONSES_API: Final = ResponsesApi(
    name="openai-responses",
    endpoint=RESPONSES,
    forwarded=(
        ("GET", _ID_ROUTE),
        ("GET", f"{_ID_ROUTE}/input_items"),
        ("DELETE", _ID_ROUTE),
    ),
    spec=ApiSpec(
        "responses",
        "A Responses call",
        request="ResponsesRequest",
        reply="Response",
        schemas={**OPENAI_SCHEMAS, **_SCHEMAS},
    ),
)
