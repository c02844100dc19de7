"""``WireApi``: what the gateway, its OpenAPI spec and the export need to know of one wire API.

A wire API is a request path below ``/v1`` that agents POST model calls to (OpenAI's chat
completions, its legacy completions and Responses, Anthropic's Messages). The gateway records
every call of a listed API; what differs between APIs is written once, in the API's own
``WireApi``: the path and its aliases, the header its clients send their key in, the paths its
clients need besides the call (forwarded unrecorded), its error shape (plain and in a stream),
how a call is served over a token-level engine's chat path (``translation``), how a recorded
call reads as a chat conversation for the SFT export, and its routes in the OpenAPI spec. The
gateway, the key check, the spec and the export iterate ``fulmen.wire.table.wire_apis()``; an
installed distribution adds an API there through the ``fulmen.wire_apis`` entry-point group.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from fulmen.wire.json_values import as_object
from fulmen.wire.translation import Translation

__all__ = ["ApiSpec", "WireApi", "error_message"]

# A path below /v1 that a forwarded route may name: no leading slash, no dot-segment.
_PATH = re.compile(r"[a-z0-9_\-/{}]+")


@dataclass(frozen=True)
class ApiSpec:
    """The API's route in ``docs/gateway-openapi.json``.

    Attributes:
        operation_id: the untracked operation's id is ``{operation_id}_untracked``, the
            attempt's ``{operation_id}`` and ``{operation_id}_keyed``.
        summary: what one call is, e.g. ``"A chat completion"``.
        request: the component schema name of the request body.
        reply: the component schema name of a successful reply.
        error: the component schema name of the API's error body.
        schemas: the component schemas the API adds (its request, reply, error and parts).
    """

    operation_id: str
    summary: str
    request: str
    reply: str
    error: str = "OpenAIError"
    schemas: Mapping[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True)
class WireApi:
    """One wire API the gateway serves, records, documents and exports (see the module doc).

    Subclass it to change a behaviour (the error shape, the translation, the export); the
    defaults are OpenAI's: its error body, ``data:`` error events, no translation, no
    conversation.

    Attributes:
        name: the API's name in errors and docs, e.g. ``"anthropic-messages"``.
        endpoint: the path below ``/v1`` agents POST calls to, e.g. ``"messages"``; unique.
        aliases: other spellings of ``endpoint`` that mean it (an Anthropic client given a base
            URL ending in ``/v1`` calls ``v1/messages`` below it).
        key_header: a header its clients send their key in besides ``Authorization`` (never
            forwarded upstream when the gateway has a token).
        forwarded: ``(method, pattern)`` of other paths below ``/v1`` its clients need, matched
            whole (``{id}`` is one id segment) and forwarded unrecorded.
        spec: its route in the gateway's OpenAPI spec; ``None`` leaves it out.
    """

    name: str
    endpoint: str
    aliases: tuple[str, ...] = ()
    key_header: str | None = None
    forwarded: tuple[tuple[str, str], ...] = ()
    spec: ApiSpec | None = None

    def __post_init__(self) -> None:
        for path in (self.endpoint, *self.aliases, *(p for _, p in self.forwarded)):
            if not _PATH.fullmatch(path) or path.startswith("/") or ".." in path:
                raise ValueError(f"wire API {self.name!r}: {path!r} is not a path below /v1")

    def translation(self, body: Mapping[str, Any]) -> Translation | None:
        """Return how one call with ``body`` is served as a chat completion; ``None``: as is.

        Called only when the call goes to a token-level engine; a text-only upstream gets the
        call as the agent sent it.
        """
        del body
        return None

    def error_body(self, status: int, openai_body: dict[str, Any]) -> dict[str, Any]:
        """Return the error body this API's callers read, given the OpenAI-shaped one."""
        del status
        return openai_body

    def stream_error(self, status: int, openai_body: dict[str, Any]) -> bytes:
        """Return the server-sent event that ends a stream with this error."""
        return b"data: " + orjson.dumps(self.error_body(status, openai_body)) + b"\n\n"

    def conversation(self, request: Mapping[str, Any]) -> list[Any] | None:
        """Return the chat messages a recorded request sent; ``None`` when it has none.

        The SFT export reads every recorded call as a chat conversation; raises nothing on a
        request it cannot read.
        """
        del request
        return None

    def reply_message(self, response: Mapping[str, Any]) -> dict[str, Any] | None:
        """Return the assistant message of a recorded reply; ``None`` when it has none."""
        del response
        return None


def error_message(openai_body: Mapping[str, Any]) -> str:
    """Return the message of an OpenAI-shaped error body (the body itself when it has none)."""
    error = openai_body.get("error")
    message = (as_object(error) or {}).get("message")
    return str(message if message is not None else error)
