"""What the gateway reads from an agent's request besides the model call itself.

The body, read within a size limit before it is all in memory; the session headers a client
sends to tell its sessions and sub-agents apart; the agent's name from ``x-fulmen-agent``.
"""

from __future__ import annotations

from urllib.parse import unquote

from starlette.requests import ClientDisconnect, Request

from fulmen.errors import PayloadTooLarge
from fulmen.types.records import AGENT_NAME_HEADER

__all__ = ["agent_name", "read_body", "session_headers"]


async def read_body(request: Request, limit: int) -> bytes:
    """Read the request's body; one over ``limit`` bytes is refused (413) before it is all read.

    A body sent without ``Content-Length`` (chunked) is counted as it arrives, so no body
    larger than ``limit`` is ever held in memory.
    """
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise PayloadTooLarge(f"request body of {length} bytes exceeds {limit}")
    # The ASGI messages themselves (``Request.stream`` adds an async generator per call).
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk: bytes = message.get("body", b"")
        more = message.get("more_body", False)
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds {limit} bytes")
        chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def session_headers(request: Request, names: tuple[str, ...]) -> dict[str, str] | None:
    """Return the session headers the client sent, each value cut to what a record holds."""
    found: dict[str, str] = {}
    for name in names:
        value = request.headers.get(name)
        if value:
            value = value.replace("\0", "").strip()[:256]
            if value:
                found[name] = value
    return found or None


def agent_name(request: Request) -> str | None:
    """Return the agent's name from ``x-fulmen-agent`` (URL-decoded, at most 256 characters)."""
    raw = request.headers.get(AGENT_NAME_HEADER)
    name = unquote(raw).strip()[:256] if raw else ""
    return name or None
