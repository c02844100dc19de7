"""One chat completion from fulmen's own code (APO's critic and editor, a reward judge).

``post_chat`` sends a request to any OpenAI-compatible endpoint and never raises for what the
endpoint did: it returns the reply (or the error it gave or met) and the latency, so each
caller records the call, failed or not, before it decides what the failure means.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["ChatCall", "post_chat"]


@dataclass(frozen=True)
class ChatCall:
    """A chat completion's outcome: the reply or the error, the reply's text, the timing.

    Attributes:
        response: the decoded reply (``None`` on an error).
        error: ``{"status", "body"}`` for an error status, ``{"message"}`` for a transport
            error or undecodable reply; ``None`` on success.
        text: the first choice's message text (``None`` when there is none).
        usage: the reply's ``usage`` block (``{}`` when absent).
        started_at / latency_s: wall-clock start and duration.
    """

    response: dict[str, Any] | None
    error: dict[str, Any] | None
    text: str | None
    usage: dict[str, Any]
    started_at: float
    latency_s: float


async def post_chat(http: httpx.AsyncClient, base_url: str, request: dict[str, Any]) -> ChatCall:
    """POST ``request`` to ``{base_url}/chat/completions``; see the module docstring."""
    started = time.time()
    clock = time.perf_counter()
    response: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    try:
        answer = await http.post(f"{base_url}/chat/completions", json=request)
        if answer.status_code >= 400:
            error = {"status": answer.status_code, "body": answer.text[:2000]}
        else:
            response = answer.json()
    except (httpx.HTTPError, ValueError) as exc:
        error = {"message": f"{type(exc).__name__}: {exc}"}
    text, usage = _reply(response)
    return ChatCall(response, error, text, usage, started, time.perf_counter() - clock)


def _reply(response: Any) -> tuple[str | None, dict[str, Any]]:
    """Return the first choice's message text and the usage block of a chat completion."""
    if not isinstance(response, dict):
        return None, {}
    usage = response.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None, usage
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return (content if isinstance(content, str) else None), usage
