"""One chat completion from fulmen's own code (APO's critic and editor, a reward judge).

``post_chat`` sends a request to any OpenAI-compatible endpoint and never raises for what the
endpoint did: it returns the reply (or the error it gave or met) and the latency, so each
caller records the call, failed or not, before it decides what the failure means (and whether
to send it again: ``ChatCall.is_retryable`` and ``retry_after`` say what HTTP says about that).
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
        is_retryable: whether the same request may succeed later: the endpoint could not be
            reached or did not answer in time (an ``httpx.TransportError``), or answered 429
            or a 5xx. Any other error status is its verdict on the request itself.
        retry_after: the ``Retry-After`` header of an error reply, as sent (seconds or an
            HTTP date); ``None`` when there was none.
    """

    response: dict[str, Any] | None
    error: dict[str, Any] | None
    text: str | None
    usage: dict[str, Any]
    started_at: float
    latency_s: float
    is_retryable: bool = False
    retry_after: str | None = None


async def post_chat(http: httpx.AsyncClient, base_url: str, request: dict[str, Any]) -> ChatCall:
    """POST ``request`` to ``{base_url}/chat/completions``; see the module docstring."""
    started = time.time()
    clock = time.perf_counter()
    response: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    is_retryable = False
    retry_after: str | None = None
    try:
        answer = await http.post(f"{base_url}/chat/completions", json=request)
        if answer.status_code >= 400:
            error = {"status": answer.status_code, "body": answer.text[:2000]}
            is_retryable = answer.status_code == 429 or answer.status_code >= 500
            retry_after = answer.headers.get("retry-after")
        else:
            response = answer.json()
    except (httpx.HTTPError, ValueError) as exc:
        error = {"message": f"{type(exc).__name__}: {exc}"}
        is_retryable = isinstance(exc, httpx.TransportError)
    text, usage = _reply(response)
    latency = time.perf_counter() - clock
    return ChatCall(response, error, text, usage, started, latency, is_retryable, retry_after)


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
