"""Server-sent events: splitting an upstream byte stream into events, and rebuilding the reply.

``SSEDecoder`` turns bytes into whole events; ``StreamAccumulator`` folds the JSON chunks of a
streamed chat or completion reply into the reply a non-streamed call would have returned
(text, tool calls, token ids, logprobs, usage), so a streamed call is recorded like any other.
"""

from __future__ import annotations

from typing import Any

from fulmen.wire.json_values import as_array, as_object
from fulmen.wire.openai import CHAT

__all__ = ["SSEDecoder", "StreamAccumulator", "event_data"]


class SSEDecoder:
    """Incremental splitter of an SSE byte stream into events (without the blank line)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data`` and return the events it completed."""
        buffer = self._buffer + data
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        *events, self._buffer = buffer.split(b"\n\n")
        return [e for e in events if e]

    def tail(self) -> bytes:
        """Bytes after the last complete event (a stream cut mid-event)."""
        return self._buffer


def event_data(event: bytes) -> bytes | None:
    """Return the ``data:`` payload of an event (data lines joined), or ``None``."""
    lines = [line[5:] for line in event.split(b"\n") if line.startswith(b"data:")]
    if not lines:
        return None
    return b"\n".join(line[1:] if line.startswith(b" ") else line for line in lines)


class _Choice:
    """What one choice has accumulated so far."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.role: str | None = None
        self.text: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.token_ids: list[int] | None = None
        self.prompt_token_ids: list[int] | None = None
        self.logprobs: dict[str, list[Any]] = {}
        self.finish_reason: str | None = None
        self.stop_reason: Any = None

    def add_ids(self, ids: Any) -> None:
        items = as_array(ids)
        if items or ids == []:
            self.token_ids = (self.token_ids or []) + items

    def add_logprobs(self, logprobs: Any) -> None:
        for key, value in (as_object(logprobs) or {}).items():
            items = as_array(value)
            if items or value == []:
                self.logprobs.setdefault(key, []).extend(items)

    def add_tool_calls(self, deltas: Any) -> None:
        for item in as_array(deltas):
            delta = as_object(item)
            if delta is None:
                continue
            index = _index(delta.get("index"), default=len(self.tool_calls))
            call = self.tool_calls.setdefault(
                index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            )
            if delta.get("id"):
                call["id"] = delta["id"]
            if delta.get("type"):
                call["type"] = delta["type"]
            function = as_object(delta.get("function"))
            if function is not None:
                call["function"]["name"] += function.get("name") or ""
                call["function"]["arguments"] += function.get("arguments") or ""


def _index(value: Any, *, default: int = 0) -> int:
    return value if isinstance(value, int) else default


class StreamAccumulator:
    """Folds streamed chunks of ``chat/completions`` or ``completions`` into one reply."""

    def __init__(self, endpoint: str) -> None:
        self._is_chat = endpoint == CHAT
        self._top: dict[str, Any] = {}
        self._choices: dict[int, _Choice] = {}
        self.error: dict[str, Any] | None = None

    def add(self, chunk: dict[str, Any]) -> None:
        """Fold one decoded chunk in."""
        error = as_object(chunk.get("error"))
        if error is not None:
            self.error = error
            return
        for key in ("id", "created", "model", "system_fingerprint", "policy_version"):
            if key in chunk and key not in self._top:
                self._top[key] = chunk[key]
        if isinstance(chunk.get("prompt_token_ids"), list):
            self._top["prompt_token_ids"] = chunk["prompt_token_ids"]
        if chunk.get("usage") is not None:
            self._top["usage"] = chunk["usage"]
        for raw in as_array(chunk.get("choices")):
            choice = as_object(raw)
            if choice is not None:
                self._add_choice(choice)

    def _add_choice(self, raw: dict[str, Any]) -> None:
        index = _index(raw.get("index"))
        choice = self._choices.get(index)
        if choice is None:
            choice = self._choices[index] = _Choice(index)
        choice.add_ids(raw.get("token_ids"))
        if isinstance(raw.get("prompt_token_ids"), list):
            choice.prompt_token_ids = raw["prompt_token_ids"]
        choice.add_logprobs(raw.get("logprobs"))
        if raw.get("finish_reason") is not None:
            choice.finish_reason = raw["finish_reason"]
        if raw.get("stop_reason") is not None:
            choice.stop_reason = raw["stop_reason"]
        delta = as_object(raw.get("delta")) if self._is_chat else raw
        if delta is not None:
            text = delta.get("content") if self._is_chat else delta.get("text")
            if isinstance(text, str):
                choice.text.append(text)
            if self._is_chat:
                choice.role = choice.role or delta.get("role")
                choice.add_tool_calls(delta.get("tool_calls"))

    def response(self) -> dict[str, Any]:
        """Return the reply a non-streamed call would have returned."""
        kind = "chat.completion" if self._is_chat else "text_completion"
        out: dict[str, Any] = {"object": kind, **self._top}
        out["choices"] = [self._choice(self._choices[i]) for i in sorted(self._choices)]
        if self.error is not None:
            out["error"] = self.error
        return out

    def _choice(self, choice: _Choice) -> dict[str, Any]:
        out: dict[str, Any] = {"index": choice.index, "finish_reason": choice.finish_reason}
        text = "".join(choice.text)
        if self._is_chat:
            message: dict[str, Any] = {"role": choice.role or "assistant", "content": text or None}
            if choice.tool_calls:
                message["tool_calls"] = [choice.tool_calls[i] for i in sorted(choice.tool_calls)]
            out["message"] = message
        else:
            out["text"] = text
            if choice.prompt_token_ids is not None:
                out["prompt_token_ids"] = choice.prompt_token_ids
        out["logprobs"] = choice.logprobs or None
        if choice.token_ids is not None:
            out["token_ids"] = choice.token_ids
        if choice.stop_reason is not None:
            out["stop_reason"] = choice.stop_reason
        return out
