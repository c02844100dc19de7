"""The Responses API over an engine's chat path: requests and replies translated both ways.

Token-level engines give token ids and logprobs on ``/v1/chat/completions``. fulmen's built-in
server has no ``/v1/responses``, and vLLM's gives token ids only in its own raw-message fields
(``enable_response_messages``), never in stream events. So the gateway sends a ``/v1/responses``
call for a token-level engine as a chat completion and turns the reply back into a Responses
object (``response_from_chat``; streams: ``fulmen.wire.responses.stream``). The agent sees
the Responses API; the record keeps the engine's token ids, like any chat call. Text-only
(hosted) upstreams get the Responses call unchanged.

Translated: ``instructions``; ``input`` as text or items (messages with text parts,
``function_call``, ``function_call_output``; ``reasoning`` items are dropped); function tools
(namespaces flattened, other tools dropped: ``fulmen.wire.responses.tools``);
``tool_choice``; ``max_output_tokens``; ``text.format``; ``top_logprobs`` and the
``message.output_text.logprobs`` include. What needs server state (``previous_response_id``,
``conversation``, ``background``, ``prompt``) or image or file inputs is refused with a 400
naming it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any, Final

from fulmen.wire.errors import BadRequest
from fulmen.wire.json_values import as_array, as_object
from fulmen.wire.responses.tools import chat_tool_choice, function_tools, served_tools

__all__ = [
    "LOGPROBS_INCLUDE",
    "ResponseIds",
    "assistant_message",
    "chat_request",
    "function_call_item",
    "message_item",
    "output_logprobs",
    "response_from_chat",
    "response_object",
    "response_usage",
]

LOGPROBS_INCLUDE: Final = "message.output_text.logprobs"

# Responses fields with no chat equivalent that change nothing on a token-level engine.
_DROPPED: Final = frozenset(
    {
        "include",
        "input",
        "instructions",
        "max_output_tokens",
        "max_tool_calls",
        "metadata",
        "prompt_cache_key",
        "prompt_cache_retention",
        "reasoning",
        "safety_identifier",
        "service_tier",
        "store",
        "stream_options",
        "text",
        "tool_choice",
        "tools",
        "top_logprobs",
        "truncation",
    }
)
# Responses fields that need state or services the engine does not have.
_REFUSED: Final = ("previous_response_id", "conversation", "prompt", "background")
_TEXT_PARTS: Final = frozenset({"input_text", "output_text", "text", "refusal"})


class ResponseIds:
    """The ids one translated response shows: the response, its message and its tool calls."""

    def __init__(self) -> None:
        self.hex = uuid.uuid4().hex
        self.response = f"resp_{self.hex}"
        self.message = f"msg_{self.hex}"

    def function_call(self, index: int) -> str:
        """Return the item id of tool call ``index``."""
        return f"fc_{self.hex}_{index}"


def chat_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """Return the chat completion request that asks what Responses request ``body`` asks.

    Raises ``BadRequest`` for anything a chat completion cannot express.
    """
    for key in _REFUSED:
        if body.get(key):
            raise BadRequest(
                f"Responses field {key!r} needs a hosted Responses API; a token-level engine "
                "serves stateless calls only (send the whole conversation as input)"
            )
    out = {k: v for k, v in body.items() if k not in _DROPPED and k not in _REFUSED}
    out["messages"] = _messages(body)
    tools, _ = served_tools(body.get("tools"))
    if tools:
        out["tools"] = tools
    if body.get("tool_choice") is not None:
        out["tool_choice"] = chat_tool_choice(body["tool_choice"])
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = body["max_output_tokens"]
    response_format = _response_format(as_object(body.get("text")))
    if response_format is not None:
        out["response_format"] = response_format
    if body.get("top_logprobs"):
        out["logprobs"] = True
        out["top_logprobs"] = body["top_logprobs"]
    elif LOGPROBS_INCLUDE in as_array(body.get("include")):
        out["logprobs"] = True
    return out


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    raw = body.get("input")
    if isinstance(raw, str):
        messages.append({"role": "user", "content": raw})
        return messages
    if not isinstance(raw, list):
        raise BadRequest(f"Responses 'input' must be a string or a list, got {type(raw).__name__}")
    for position, value in enumerate(as_array(raw)):
        item = as_object(value)
        if item is None:
            raise BadRequest(f"input[{position}] must be an object, got {type(value).__name__}")
        _add_item(messages, item, position)
    return messages


def _add_item(messages: list[dict[str, Any]], item: dict[str, Any], position: int) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role not in ("system", "developer", "user", "assistant"):
            raise BadRequest(f"input[{position}] has an unknown role {role!r}")
        content = _text(item.get("content"), position)
        messages.append({"role": "system" if role == "developer" else role, "content": content})
    elif kind == "function_call":
        call = {
            "id": item.get("call_id"),
            "type": "function",
            "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"},
        }
        last = messages[-1] if messages else None
        # Consecutive calls (and the text before them) are one assistant turn in chat form.
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        output = item.get("output")
        content = output if isinstance(output, str) else _text(output, position)
        messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": content})
    elif kind != "reasoning":  # a reasoning summary is not part of the next prompt
        raise BadRequest(
            f"input[{position}] of type {kind!r} cannot be sent to a token-level engine "
            "(supported: message, function_call, function_call_output, reasoning)"
        )


def _text(content: Any, position: int) -> str:
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for value in as_array(content):
        part = as_object(value) or {}
        kind = part.get("type")
        if kind not in _TEXT_PARTS:
            raise BadRequest(f"input[{position}] has a {kind!r} part; only text parts are served")
        text = part.get("text", part.get("refusal"))
        texts.append(text if isinstance(text, str) else "")
    return "".join(texts)


def _response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = as_object((text or {}).get("format"))
    if fmt is None or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    return {"type": fmt.get("type")}


def output_logprobs(chat_logprobs: Any) -> list[dict[str, Any]]:
    """Convert a chat choice's ``logprobs`` to Responses ``output_text.logprobs`` entries."""
    entries = as_array((as_object(chat_logprobs) or {}).get("content"))
    out: list[dict[str, Any]] = []
    for value in entries:
        entry = as_object(value) or {}
        tops = [as_object(t) or {} for t in as_array(entry.get("top_logprobs"))]
        out.append(
            {
                "token": entry.get("token", ""),
                "logprob": entry.get("logprob"),
                "bytes": entry.get("bytes") or [],
                "top_logprobs": [
                    {
                        "token": t.get("token", ""),
                        "logprob": t.get("logprob"),
                        "bytes": t.get("bytes"),
                    }
                    for t in tops
                ],
            }
        )
    return out


def message_item(
    ids: ResponseIds, text: str, logprobs: list[dict[str, Any]], status: str
) -> dict[str, Any]:
    """Build the assistant ``message`` output item holding ``text``."""
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}
    return {
        "type": "message",
        "id": ids.message,
        "status": status,
        "role": "assistant",
        "content": [part],
    }


def function_call_item(ids: ResponseIds, index: int, call: Any, status: str) -> dict[str, Any]:
    """Build the ``function_call`` output item of chat tool call ``call`` (number ``index``)."""
    fields = as_object(call) or {}
    function = as_object(fields.get("function")) or {}
    return {
        "type": "function_call",
        "id": ids.function_call(index),
        "call_id": fields.get("id") or ids.function_call(index),
        "name": function.get("name") or "",
        "arguments": function.get("arguments") or "",
        "status": status,
    }


def response_usage(usage: Any) -> dict[str, Any]:
    """Convert a chat ``usage`` object to the Responses ``usage`` shape."""
    fields = as_object(usage) or {}
    prompt = fields.get("prompt_tokens") or 0
    completion = fields.get("completion_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": fields.get("total_tokens") or prompt + completion,
    }


def response_from_chat(
    chat: Mapping[str, Any], request: Mapping[str, Any], ids: ResponseIds
) -> dict[str, Any]:
    """Return the Responses object for chat reply ``chat`` to Responses request ``request``.

    The first choice becomes a ``message`` item (when it has text) followed by one
    ``function_call`` item per tool call; a ``length`` finish makes the response
    ``incomplete``, as OpenAI reports a ``max_output_tokens`` cut.
    """
    choice = as_object(next(iter(as_array(chat.get("choices"))), None)) or {}
    message = as_object(choice.get("message")) or {}
    is_cut = choice.get("finish_reason") == "length"
    status = "incomplete" if is_cut else "completed"
    wants_logprobs = bool(request.get("top_logprobs")) or LOGPROBS_INCLUDE in as_array(
        request.get("include")
    )
    output: list[dict[str, Any]] = []
    text = message.get("content")
    if isinstance(text, str) and text:
        logprobs = output_logprobs(choice.get("logprobs")) if wants_logprobs else []
        output.append(message_item(ids, text, logprobs, status))
    for index, call in enumerate(as_array(message.get("tool_calls"))):
        output.append(function_call_item(ids, index, call, "completed"))
    return response_object(
        request,
        ids,
        status=status,
        output=output,
        model=chat.get("model"),
        usage=response_usage(chat.get("usage")),
    )


def response_object(
    request: Mapping[str, Any],
    ids: ResponseIds,
    *,
    status: str,
    output: list[dict[str, Any]],
    model: Any = None,
    usage: dict[str, Any] | None = None,
    created_at: float | None = None,
) -> dict[str, Any]:
    """Build a Responses ``response`` object echoing ``request``'s settings."""
    return {
        "id": ids.response,
        "object": "response",
        "created_at": int(created_at if created_at is not None else time.time()),
        "status": status,
        "model": model if isinstance(model, str) else request.get("model"),
        "output": output,
        "usage": usage,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "metadata": request.get("metadata") or {},
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": None,
        "store": False,
        "temperature": request.get("temperature"),
        "text": request.get("text") or {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"),
        # The tools the engine was given (``fulmen.wire.responses.tools``), not all asked for.
        "tools": function_tools(request.get("tools")),
        "top_p": request.get("top_p"),
        "truncation": request.get("truncation") or "disabled",
    }


def assistant_message(response: Mapping[str, Any]) -> dict[str, Any] | None:
    """Return a Responses object's output as one chat assistant message (text and tool calls).

    The inverse of what ``response_from_chat`` builds, for readers of records that speak chat
    (SFT export); ``None`` when the output holds neither text nor a function call.
    """
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for value in as_array(response.get("output")):
        item = as_object(value) or {}
        if item.get("type") == "message":
            for part in as_array(item.get("content")):
                text = (as_object(part) or {}).get("text")
                if isinstance(text, str):
                    texts.append(text)
        elif item.get("type") == "function_call":
            function = {"name": item.get("name"), "arguments": item.get("arguments")}
            calls.append({"id": item.get("call_id"), "type": "function", "function": function})
    if not texts and not calls:
        return None
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    return message
