"""A streamed chat completion, re-emitted as the Anthropic Messages API's server-sent events.

``MessageEvents`` follows Anthropic's event order: ``message_start`` (the message with empty
content and the prompt's token count, sent with the engine's first chunk, which carries the
prompt's token ids) and a ``ping``; text as a ``text`` block whose ``text_delta`` events carry
the text the moment the engine streams it; then, when the engine's stream ends, each tool call
as a whole ``tool_use`` block (``input: {}`` at its start, the arguments in one
``input_json_delta``), ``message_delta`` with the stop reason and usage, and
``message_stop``. Every block ends with ``content_block_stop``. An engine failure mid-stream
ends the stream with an ``error`` event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from fulmen.wire.json_values import as_array, as_object
from fulmen.wire.messages.translate import (
    MessageIds,
    anthropic_error_body,
    message_from_chat,
    message_object,
)

__all__ = ["MessageEvents"]


class MessageEvents:
    """Turns the chunks of one streamed chat completion into Messages events (SSE bytes).

    Args:
        request: the agent's Messages request.
        ids: the ids the message shows (shared with the record).
    """

    def __init__(self, request: Mapping[str, Any], ids: MessageIds) -> None:
        self._request = request
        self._ids = ids
        self._is_started = False
        self._is_text_open = False
        self._blocks = 0

    @staticmethod
    def _event(kind: str, **fields: Any) -> bytes:
        payload = orjson.dumps({"type": kind, **fields})
        return b"event: " + kind.encode() + b"\ndata: " + payload + b"\n\n"

    def opening(self) -> bytes:
        """Return nothing: ``message_start`` waits for the first chunk and its prompt ids."""
        return b""

    def _start(self, chunk: Mapping[str, Any] | None) -> bytes:
        self._is_started = True
        prompt = as_array((chunk or {}).get("prompt_token_ids"))
        usage = {
            "input_tokens": len(prompt),
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        message = message_object(self._request, self._ids, content=[], usage=usage)
        return self._event("message_start", message=message) + self._event("ping")

    def add(self, chunk: Mapping[str, Any]) -> bytes:
        """Return the events for one chat chunk: the opening, then text deltas of choice 0."""
        out = b"" if self._is_started else self._start(chunk)
        choice = as_object(next(iter(as_array(chunk.get("choices"))), None)) or {}
        if choice.get("index", 0) != 0:
            return out  # a Messages reply has one answer
        text = (as_object(choice.get("delta")) or {}).get("content")
        if not isinstance(text, str) or not text:
            return out
        if not self._is_text_open:
            self._is_text_open = True
            block = {"type": "text", "text": ""}
            out += self._event("content_block_start", index=0, content_block=block)
            self._blocks = 1
        delta = {"type": "text_delta", "text": text}
        return out + self._event("content_block_delta", index=0, delta=delta)

    def closing(self, chat: Mapping[str, Any] | None, error: Mapping[str, Any] | None) -> bytes:
        """Return the closing events, given the chat reply rebuilt from the stream or its error."""
        if error is not None or chat is None:
            failure = dict(error or {"message": "the engine's stream ended without a reply"})
            body = anthropic_error_body(502, str(failure.get("message")))
            return self._event("error", error=body["error"])
        out = b"" if self._is_started else self._start(chat)
        if self._is_text_open:
            out += self._event("content_block_stop", index=0)
        message = message_from_chat(chat, self._request, self._ids)
        for block in as_array(message["content"]):
            if block["type"] == "tool_use":
                out += self._tool_use(block)
        usage = message["usage"]
        delta = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
        out += self._event("message_delta", delta=delta, usage=usage)
        return out + self._event("message_stop")

    def _tool_use(self, block: dict[str, Any]) -> bytes:
        index = self._blocks
        self._blocks += 1
        opened = {**block, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": orjson.dumps(block["input"]).decode()}
        return (
            self._event("content_block_start", index=index, content_block=opened)
            + self._event("content_block_delta", index=index, delta=delta)
            + self._event("content_block_stop", index=index)
        )
