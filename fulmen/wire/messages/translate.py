"""Anthropic's Messages API over an engine's chat path: requests and replies translated both ways.

Claude Code, the Claude Agent SDK and Anthropic's clients call ``POST /v1/messages``. A
token-level engine (fulmen's built-in server, vLLM) gives token ids and logprobs on its chat
path only, so the gateway sends a Messages call as a chat completion (``chat_request``) and
turns the reply back into a Messages object (``message_from_chat``; streams:
``fulmen.wire.messages.stream``). The agent sees the Messages API; the record keeps the
engine's token ids, like any chat call.

Translated: ``system`` (a string or text blocks, joined by a blank line), ``messages`` (text,
``tool_use``, ``tool_result`` and ``role: "system"`` messages at their place; ``thinking``
blocks are dropped), function ``tools`` (``input_schema``), ``tool_choice``, ``max_tokens``,
``temperature``, ``top_p``, ``top_k``, ``stop_sequences``, ``stream``. Every other field
(``thinking``, ``metadata``, ``context_management``, ``cache_control``, ``service_tier``,
``container``, ``mcp_servers``, ...) is ignored; server tools (a ``type`` other than
``custom``) are dropped and named in the translation's ``dropped_tools``; image and document
blocks are refused with a 400 naming them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any, Final

import orjson

from fulmen.wire.errors import BadRequest
from fulmen.wire.json_values import as_array, as_object
from fulmen.wire.translation import ChatTranslation

__all__ = [
    "MessageIds",
    "anthropic_error_body",
    "assistant_message",
    "chat_request",
    "message_from_chat",
    "message_object",
    "message_usage",
    "stop_reason",
    "tool_input",
    "tool_use_block",
]

# Anthropic's error types by HTTP status; any other 4xx is a request error, any 5xx an API one.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def anthropic_error_body(status: int, message: str) -> dict[str, Any]:
    """Return Anthropic's error shape for an error of HTTP ``status`` saying ``message``."""
    kind = _ERROR_TYPES.get(status)
    if kind is None:
        kind = "api_error" if status >= 500 else "invalid_request_error"
    return {"type": "error", "error": {"type": kind, "message": message}}


# The chat fields a Messages request's own fields become, where the name does not change.
_SAME: Final = ("model", "max_tokens", "temperature", "top_p", "top_k", "stream")
_CHAT_TOOL_CHOICE: Final = {"auto": "auto", "any": "required", "none": "none"}
# Blocks that hold no part of the next prompt (Claude's own reasoning) and are dropped.
_DROPPED_BLOCKS: Final = frozenset({"thinking", "redacted_thinking"})


class MessageIds:
    """The ids one translated message shows: the message and its ``tool_use`` blocks."""

    def __init__(self) -> None:
        self.hex = uuid.uuid4().hex
        self.message = f"msg_{self.hex}"

    def tool_use(self, index: int) -> str:
        """Return the id of tool call ``index`` (Anthropic's ``toolu_`` form)."""
        return f"toolu_{self.hex}_{index}"


def chat_request(body: Mapping[str, Any]) -> ChatTranslation:
    """Return the chat completion request that asks what Messages request ``body`` asks.

    Raises ``BadRequest`` (with the field at fault as ``param``) for what a chat completion
    cannot express.
    """
    out: dict[str, Any] = {k: body[k] for k in _SAME if body.get(k) is not None}
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": _system_text(system, "system")})
    raw = body.get("messages")
    if not isinstance(raw, list):
        raise _bad(f"'messages' must be a list, got {type(raw).__name__}", "messages")
    for position, value in enumerate(as_array(raw)):
        _add_message(messages, value, position)
    out["messages"] = messages
    stops = body.get("stop_sequences")
    if stops:
        out["stop"] = stops
    tools, dropped = _tools(as_array(body.get("tools")))
    if tools:
        out["tools"] = tools
    choice = as_object(body.get("tool_choice"))
    if choice is not None:
        out.update(_tool_choice(choice))
    return ChatTranslation(out, dropped)


def _bad(message: str, param: str) -> BadRequest:
    return BadRequest(message, detail={"param": param})


def _system_text(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    return "\n\n".join(_texts(value, where, allowed=frozenset({"text"})))


def _texts(blocks: Any, where: str, *, allowed: frozenset[str]) -> list[str]:
    texts: list[str] = []
    for position, value in enumerate(as_array(blocks)):
        block = as_object(value) or {}
        kind = block.get("type")
        if kind in _DROPPED_BLOCKS:
            continue
        if kind not in allowed:
            raise _refused(kind, f"{where}[{position}]")
        text = block.get("text")
        texts.append(text if isinstance(text, str) else "")
    return texts


def _refused(kind: Any, where: str) -> BadRequest:
    return _bad(
        f"{where} is a {kind!r} block, which a token-level engine cannot be sent (text-only "
        "models); supported blocks: text, tool_use, tool_result, thinking (dropped)",
        where,
    )


def _add_message(messages: list[dict[str, Any]], value: Any, position: int) -> None:
    where = f"messages[{position}]"
    message = as_object(value)
    if message is None:
        raise _bad(f"{where} must be an object, got {type(value).__name__}", where)
    role = message.get("role")
    content = message.get("content")
    if role == "system":  # Claude Code sends these mid-conversation
        messages.append({"role": "system", "content": _system_text(content, f"{where}.content")})
    elif role == "user":
        _add_user(messages, content, f"{where}.content")
    elif role == "assistant":
        _add_assistant(messages, content, f"{where}.content")
    else:
        raise _bad(f"{where} has an unknown role {role!r} (user, assistant, system)", where)


def _add_user(messages: list[dict[str, Any]], content: Any, where: str) -> None:
    if isinstance(content, str):
        messages.append({"role": "user", "content": content})
        return
    texts: list[str] = []
    for position, value in enumerate(as_array(content)):
        block = as_object(value) or {}
        kind = block.get("type")
        if kind == "tool_result":
            if texts:  # text before a result stays before it
                messages.append({"role": "user", "content": "\n\n".join(texts)})
                texts = []
            messages.append(_tool_message(block, f"{where}[{position}]"))
        elif kind == "text":
            text = block.get("text")
            texts.append(text if isinstance(text, str) else "")
        elif kind not in _DROPPED_BLOCKS:
            raise _refused(kind, f"{where}[{position}]")
    if texts:
        messages.append({"role": "user", "content": "\n\n".join(texts)})


def _tool_message(block: dict[str, Any], where: str) -> dict[str, Any]:
    content = block.get("content")
    if isinstance(content, str):
        text = content
    else:
        text = "\n\n".join(_texts(content, f"{where}.content", allowed=frozenset({"text"})))
    if block.get("is_error"):
        # A chat tool message has no error flag: the model reads it in the text instead.
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text}


def _add_assistant(messages: list[dict[str, Any]], content: Any, where: str) -> None:
    if isinstance(content, str):
        messages.append({"role": "assistant", "content": content})
        return
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for position, value in enumerate(as_array(content)):
        block = as_object(value) or {}
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            texts.append(text if isinstance(text, str) else "")
        elif kind == "tool_use":
            # json.dumps's default separators, as engines' tool parsers write arguments, so
            # a call sent back renders as the engine produced it.
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
            function = {"name": block.get("name"), "arguments": arguments}
            calls.append({"id": block.get("id"), "type": "function", "function": function})
        elif kind not in _DROPPED_BLOCKS:
            raise _refused(kind, f"{where}[{position}]")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    if message["content"] is not None or calls:
        messages.append(message)


def _tools(tools: list[Any]) -> tuple[list[dict[str, Any]], list[str]]:
    served: list[dict[str, Any]] = []
    dropped: list[str] = []
    for value in tools:
        tool = as_object(value) or {}
        kind = tool.get("type")
        if kind not in (None, "custom"):  # a server tool (web search, code execution, ...)
            dropped.append(str(kind))
            continue
        function = {"name": tool.get("name"), "parameters": tool.get("input_schema") or {}}
        if tool.get("description"):
            function["description"] = tool["description"]
        served.append({"type": "function", "function": function})
    return served, dropped


def _tool_choice(choice: dict[str, Any]) -> dict[str, Any]:
    kind = choice.get("type")
    out: dict[str, Any] = {}
    if kind == "tool":
        out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    elif isinstance(kind, str) and kind in _CHAT_TOOL_CHOICE:
        out["tool_choice"] = _CHAT_TOOL_CHOICE[kind]
    else:
        raise _bad(f"tool_choice type {kind!r} is unknown (auto, any, tool, none)", "tool_choice")
    if choice.get("disable_parallel_tool_use"):
        out["parallel_tool_calls"] = False
    return out


def tool_input(arguments: Any) -> dict[str, Any]:
    """Return a tool call's ``arguments`` (JSON text) as the ``input`` object of a ``tool_use``.

    Arguments that are not a JSON object (a model's malformed call) become ``{}``: a Messages
    client expects an object, and the record keeps what the model generated as token ids.
    """
    try:
        value = orjson.loads(arguments) if isinstance(arguments, str | bytes) else arguments
    except orjson.JSONDecodeError:
        return {}
    return as_object(value) or {}


def stop_reason(choice: Mapping[str, Any], request: Mapping[str, Any]) -> tuple[str, str | None]:
    """Return a chat choice's ``(stop_reason, stop_sequence)`` in Messages terms.

    A ``stop`` finish is ``stop_sequence`` only when the engine names the matched string (vLLM's
    ``stop_reason``) and it is one the request listed; otherwise ``end_turn``.
    """
    message = as_object(choice.get("message") or choice.get("delta")) or {}
    finish = choice.get("finish_reason")
    if finish == "tool_calls" or as_array(message.get("tool_calls")):
        return "tool_use", None
    if finish == "length":
        return "max_tokens", None
    matched = choice.get("stop_reason")
    if isinstance(matched, str) and matched in as_array(request.get("stop_sequences")):
        return "stop_sequence", matched
    return "end_turn", None


def message_usage(usage: Any) -> dict[str, Any]:
    """Convert a chat ``usage`` object to the Messages ``usage`` shape."""
    fields = as_object(usage) or {}
    return {
        "input_tokens": fields.get("prompt_tokens") or 0,
        "output_tokens": fields.get("completion_tokens") or 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def message_object(
    request: Mapping[str, Any],
    ids: MessageIds,
    *,
    content: list[dict[str, Any]],
    usage: dict[str, Any],
    stop: tuple[str | None, str | None] = (None, None),
) -> dict[str, Any]:
    """Build a Messages ``message`` object; ``model`` echoes the name the agent asked for."""
    return {
        "id": ids.message,
        "type": "message",
        "role": "assistant",
        "model": request.get("model"),
        "content": content,
        "stop_reason": stop[0],
        "stop_sequence": stop[1],
        "usage": usage,
    }


def tool_use_block(ids: MessageIds, index: int, call: Any) -> dict[str, Any]:
    """Build the ``tool_use`` block of chat tool call ``call`` (number ``index``)."""
    function = as_object((as_object(call) or {}).get("function")) or {}
    return {
        "type": "tool_use",
        "id": ids.tool_use(index),
        "name": function.get("name") or "",
        "input": tool_input(function.get("arguments")),
    }


def message_from_chat(
    chat: Mapping[str, Any], request: Mapping[str, Any], ids: MessageIds
) -> dict[str, Any]:
    """Return the Messages object for chat reply ``chat`` to Messages request ``request``.

    The first choice becomes a ``text`` block (when it has text) followed by one ``tool_use``
    block per tool call.
    """
    choice = as_object(next(iter(as_array(chat.get("choices"))), None)) or {}
    message = as_object(choice.get("message")) or {}
    content: list[dict[str, Any]] = []
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    for index, call in enumerate(as_array(message.get("tool_calls"))):
        content.append(tool_use_block(ids, index, call))
    return message_object(
        request,
        ids,
        content=content,
        usage=message_usage(chat.get("usage")),
        stop=stop_reason(choice, request),
    )


def assistant_message(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """Return a Messages object's content as one chat assistant message (text and tool calls).

    The inverse of what ``message_from_chat`` builds, for readers of records that speak chat
    (SFT export); ``None`` when the content holds neither text nor a ``tool_use`` block.
    """
    translated: list[dict[str, Any]] = []
    _add_assistant(translated, message.get("content"), "content")
    return translated[0] if translated else None
