"""OpenAI's chat completions and legacy completions: the APIs engines serve with token ids.

Both go to the engine as the agent sent them (plus the fields that ask for token ids and
logprobs, ``fulmen.gateway.capture``). The chat API also carries the other OpenAI paths an
agent's client needs (models, embeddings for hosted upstreams), forwarded unrecorded, and its
calls read as chat conversations for the SFT export.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from fulmen.wire.api import ApiSpec, WireApi
from fulmen.wire.json_values import as_array, as_object

__all__ = [
    "CHAT",
    "CHAT_API",
    "COMPLETIONS",
    "COMPLETIONS_API",
    "OPENAI_SCHEMAS",
    "TOKEN_ENDPOINTS",
]

CHAT: Final = "chat/completions"
COMPLETIONS: Final = "completions"
#: The endpoints engines answer with token ids when asked; every other API reaches a token-level
#: engine through its translation to chat, and is recorded as text when sent as it is.
TOKEN_ENDPOINTS: Final = frozenset({CHAT, COMPLETIONS})


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


_INTEGER = {"type": "integer", "minimum": 0}

#: The error shape and message every OpenAI-compatible route shares.
OPENAI_SCHEMAS: Final[Mapping[str, Any]] = {
    "OpenAIError": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": _ref("OpenAIErrorDetail")},
    },
    "OpenAIErrorDetail": {
        "type": "object",
        "required": ["message", "type", "code"],
        "properties": {
            "message": {"type": "string"},
            "type": {"type": "string"},
            "param": {"type": ["string", "null"]},
            "code": {"type": ["string", "null"]},
        },
    },
    "ChatMessage": {
        "type": "object",
        "required": ["role", "content"],
        "properties": {
            "role": {"enum": ["system", "developer", "user", "assistant"]},
            "content": {"type": "string"},
        },
    },
}


def _request(what: str, content: str, schema: dict[str, Any]) -> dict[str, Any]:
    """Return an OpenAI request schema: ``model``, ``content`` and the sampling bounds."""
    return {
        "type": "object",
        "description": f"OpenAI's {what} request; fields not listed pass through.",
        "required": ["model", content],
        "properties": {
            "model": {"type": "string"},
            content: schema,
            "max_tokens": {"type": "integer", "minimum": 1, "maximum": 4096},
            "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        },
    }


def _reply(kind: str, field: str, schema: dict[str, Any]) -> dict[str, Any]:
    """Return an OpenAI reply schema: ``object`` is ``kind``, each choice holds ``field``."""
    return {
        "type": "object",
        "description": "The engine's answer, as the agent asked for it.",
        "required": ["id", "object", "choices"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": kind},
            "choices": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["index", field],
                    "properties": {
                        "index": _INTEGER,
                        field: schema,
                        "finish_reason": {"type": ["string", "null"]},
                    },
                },
            },
            "usage": {"type": "object"},
        },
    }


_CHAT_REQUEST = _request(
    "chat completion",
    "messages",
    {"type": "array", "minItems": 1, "items": _ref("ChatMessage")},
)
_CHAT_REQUEST["properties"]["logprobs"] = {"type": "boolean"}
_CHAT_SCHEMAS = {
    "ChatCompletionRequest": _CHAT_REQUEST,
    "ChatCompletion": _reply("chat.completion", "message", {"type": "object"}),
}
_COMPLETION_SCHEMAS = {
    "CompletionRequest": _request(
        "legacy completion", "prompt", {"type": "string", "minLength": 1}
    ),
    "Completion": _reply("text_completion", "text", {"type": "string"}),
}


class ChatCompletionsApi(WireApi):
    """OpenAI's chat completions: served natively, read as a conversation by the export."""

    def conversation(self, request: Mapping[str, Any]) -> list[Any] | None:
        """Return the request's ``messages``."""
        messages = request.get("messages")
        return messages if isinstance(messages, list) else None

    def reply_message(self, response: Mapping[str, Any]) -> dict[str, Any] | None:
        """Return choice 0's message, without its unset fields."""
        choices = as_array(response.get("choices"))
        message = as_object((as_object(choices[0]) or {}).get("message")) if choices else None
        return None if message is None else {k: v for k, v in message.items() if v is not None}


#: ``POST /v1/chat/completions``, with the OpenAI paths its clients read besides.
CHAT_API: Final = ChatCompletionsApi(
    name="openai-chat",
    endpoint=CHAT,
    forwarded=(("GET", "models"), ("GET", "models/{id}"), ("POST", "embeddings")),
    spec=ApiSpec(
        "chat_completions",
        "A chat completion",
        request="ChatCompletionRequest",
        reply="ChatCompletion",
        schemas={**OPENAI_SCHEMAS, **_CHAT_SCHEMAS},
    ),
)

#: ``POST /v1/completions``: a prompt in, text out; recorded at token level like chat.
COMPLETIONS_API: Final = WireApi(
    name="openai-completions",
    endpoint=COMPLETIONS,
    spec=ApiSpec(
        "completions",
        "A legacy completion",
        request="CompletionRequest",
        reply="Completion",
        schemas={**OPENAI_SCHEMAS, **_COMPLETION_SCHEMAS},
    ),
)
