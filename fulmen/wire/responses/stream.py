"""A streamed chat completion, re-emitted as the Responses API's server-sent events.

``ResponseEvents`` follows OpenAI's event order: ``response.created`` and
``response.in_progress`` first; text as ``response.output_text.delta`` events the moment the
engine streams it (inside one ``message`` item); then, when the engine's stream ends, each tool
call as a whole ``function_call`` item (its arguments in one delta) and ``response.completed``
(or ``response.incomplete`` after a ``max_output_tokens`` cut) carrying the full response, the
same object a non-streamed call returns. An engine failure mid-stream ends it with an ``error``
event and ``response.failed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from fulmen.wire.json_values import as_array, as_object
from fulmen.wire.responses.translate import (
    LOGPROBS_INCLUDE,
    ResponseIds,
    message_item,
    output_logprobs,
    response_from_chat,
    response_object,
)

__all__ = ["ResponseEvents"]


class ResponseEvents:
    """Turns the chunks of one streamed chat completion into Responses events (SSE bytes).

    Args:
        request: the agent's Responses request.
        ids: the ids the response shows (shared with the record).
    """

    def __init__(self, request: Mapping[str, Any], ids: ResponseIds) -> None:
        self._request = request
        self._ids = ids
        self._sequence = 0
        self._text: list[str] = []
        self._logprobs: list[dict[str, Any]] = []
        self._wants_logprobs = bool(request.get("top_logprobs")) or LOGPROBS_INCLUDE in as_array(
            request.get("include")
        )

    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"

    def opening(self) -> bytes:
        """Return the opening events, ``response.created`` and ``response.in_progress``."""
        response = response_object(self._request, self._ids, status="in_progress", output=[])
        return self._event("response.created", response=response) + self._event(
            "response.in_progress", response=response
        )

    def add(self, chunk: Mapping[str, Any]) -> bytes:
        """Return the events for one chat chunk: text deltas of its first choice, if any."""
        choice = as_object(next(iter(as_array(chunk.get("choices"))), None)) or {}
        if choice.get("index", 0) != 0:
            return b""  # a Responses reply has one answer
        delta = as_object(choice.get("delta")) or {}
        text = delta.get("content")
        if not isinstance(text, str) or not text:
            return b""
        out = b""
        if not self._text:
            out += self._open_message()
        self._text.append(text)
        logprobs = output_logprobs(choice.get("logprobs")) if self._wants_logprobs else []
        self._logprobs += logprobs
        return out + self._event(
            "response.output_text.delta",
            item_id=self._ids.message,
            output_index=0,
            content_index=0,
            delta=text,
            logprobs=logprobs,
        )

    def _open_message(self) -> bytes:
        item = message_item(self._ids, "", [], "in_progress")
        item["content"] = []
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return self._event("response.output_item.added", output_index=0, item=item) + self._event(
            "response.content_part.added",
            item_id=self._ids.message,
            output_index=0,
            content_index=0,
            part=part,
        )

    def closing(self, chat: Mapping[str, Any] | None, error: Mapping[str, Any] | None) -> bytes:
        """Return the closing events, given the chat reply rebuilt from the stream or its error."""
        if error is not None or chat is None:
            failure = dict(error or {"message": "the engine's stream ended without a reply"})
            response = response_object(self._request, self._ids, status="failed", output=[])
            response["error"] = {
                "code": failure.get("code") or "server_error",
                "message": failure.get("message"),
            }
            return self._event(
                "error", code=failure.get("code"), message=failure.get("message"), param=None
            ) + self._event("response.failed", response=response)
        response = response_from_chat(chat, self._request, self._ids)
        out = b""
        output = as_array(response["output"])
        index = 0
        if self._text:
            item = output[0]
            part = item["content"][0]
            common = {"item_id": self._ids.message, "output_index": 0, "content_index": 0}
            out += self._event(
                "response.output_text.done", **common, text=part["text"], logprobs=part["logprobs"]
            )
            out += self._event("response.content_part.done", **common, part=part)
            out += self._event("response.output_item.done", output_index=0, item=item)
            index = 1
        for position, item in enumerate(output[index:], start=index):
            out += self._function_call(position, item)
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        return out + self._event(kind, response=response)

    def _function_call(self, position: int, item: dict[str, Any]) -> bytes:
        opened = {**item, "arguments": "", "status": "in_progress"}
        item_id = item["id"]
        return (
            self._event("response.output_item.added", output_index=position, item=opened)
            + self._event(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=position,
                delta=item["arguments"],
            )
            + self._event(
                "response.function_call_arguments.done",
                item_id=item_id,
                output_index=position,
                name=item["name"],
                arguments=item["arguments"],
            )
            + self._event("response.output_item.done", output_index=position, item=item)
        )
