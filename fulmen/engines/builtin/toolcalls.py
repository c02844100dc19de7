"""Tool calls in the Hermes format: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

:func:`parse_tool_calls` splits a finished completion into plain content and OpenAI
``tool_calls``; a block whose body is not a JSON object with a string ``name`` stays in the
content, so nothing the model wrote is lost. :class:`ToolCallStreamFilter` holds streamed text
back from the first ``<tool_call>`` on, so a streaming client sees content deltas and then the
parsed calls, never the raw markup.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

__all__ = ["TOOL_CALL_END", "TOOL_CALL_START", "ToolCallStreamFilter", "parse_tool_calls"]

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def _call(body: str) -> dict[str, Any] | None:
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {
            "name": data["name"],
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Split ``text`` into (content or ``None``, tool calls in OpenAI's shape).

    >>> text = 'Sure.<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'
    >>> content, calls = parse_tool_calls(text)
    >>> content, calls[0]["function"]["name"], calls[0]["function"]["arguments"]
    ('Sure.', 'f', '{"x": 1}')
    """
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    last = 0
    for match in _BLOCK.finditer(text):
        call = _call(match.group(1))
        if call is None:
            continue
        calls.append(call)
        kept.append(text[last : match.start()])
        last = match.end()
    kept.append(text[last:])
    content = "".join(kept).strip() if calls else text
    return (content or None), calls


class ToolCallStreamFilter:
    """Streams content text until a ``<tool_call>`` may begin, then holds the rest back."""

    def __init__(self) -> None:
        self.text = ""
        self._sent = 0
        self._holding = False

    def feed(self, delta: str) -> str:
        """Add generated text; return the part that is safe to stream as content now."""
        self.text += delta
        if self._holding:
            return ""
        start = self.text.find(TOOL_CALL_START, self._sent)
        if start >= 0:
            self._holding = True
            out, self._sent = self.text[self._sent : start], start
            return out
        # keep back a tail that could be the beginning of "<tool_call>"
        safe = len(self.text)
        for k in range(1, len(TOOL_CALL_START)):
            if self.text.endswith(TOOL_CALL_START[:k]):
                safe = len(self.text) - k
        out, self._sent = self.text[self._sent : safe], max(self._sent, safe)
        return out

    def finish(self) -> tuple[str, list[dict[str, Any]]]:
        """At the end: (remaining content to stream, parsed tool calls)."""
        content, calls = parse_tool_calls(self.text)
        if not calls:
            rest, self._sent = self.text[self._sent :], len(self.text)
            return rest, []
        streamed = self.text[: self._sent]
        tail = (content or "")[len(streamed.strip()) :] if content else ""
        return tail, calls
