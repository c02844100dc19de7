"""Which tools of a Responses request a token-level engine gets, as chat function tools.

The rule: a ``function`` tool is served as it is; a ``namespace`` (the Codex CLI groups MCP
tools that way) is flattened into the function tools it holds, under their own names; every
other tool (``web_search``, ``file_search``, ``local_shell``, ``custom``, ``mcp``,
``image_generation``, ...) needs a hosted service or a grammar an engine's chat path does not
take, so it is dropped and its type named in ``dropped``. The model is then told only about
the tools it can call, and the response echoes those (its ``tools``), so the record shows
what was served next to the request as the agent sent it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from fulmen.wire.errors import BadRequest
from fulmen.wire.json_values import as_array, as_object

__all__ = ["chat_tool_choice", "function_tools", "served_tools"]

_FUNCTION_FIELDS: Final = ("name", "description", "parameters", "strict")


def function_tools(tools: Any, dropped: list[str] | None = None) -> list[dict[str, Any]]:
    """Return the Responses function tools ``tools`` serves, namespaces flattened.

    The type of each tool left out is appended to ``dropped`` when given.
    """
    out: list[dict[str, Any]] = []
    for tool in _flattened(as_array(tools)):
        if tool.get("type") == "function":
            out.append({"type": "function", **{k: tool[k] for k in _FUNCTION_FIELDS if k in tool}})
        elif dropped is not None:
            dropped.append(str(tool.get("type")))
    return out


def _flattened(tools: list[Any]) -> Iterator[dict[str, Any]]:
    for value in tools:
        tool = as_object(value) or {}
        if tool.get("type") == "namespace":
            yield from _flattened(as_array(tool.get("tools")))
        else:
            yield tool


def served_tools(tools: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """Return (chat function tools, types of the tools dropped) for Responses ``tools``."""
    dropped: list[str] = []
    chat = [
        {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}
        for tool in function_tools(tools, dropped)
    ]
    return chat, dropped


def chat_tool_choice(value: Any) -> Any:
    """Return a Responses ``tool_choice`` as a chat one; ``BadRequest`` if it has none."""
    if isinstance(value, str):
        return value
    choice = as_object(value) or {}
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise BadRequest(f"tool_choice {value!r} is not supported by a token-level engine")
