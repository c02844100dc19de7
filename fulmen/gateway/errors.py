"""Errors of the gateway and the OpenAI-shaped JSON body an agent receives for them.

::

    GatewayError (fulmen.errors)
    ├── BadRequest          malformed JSON or a body the gateway cannot forward  400
    ├── GatewayUnauthorized missing or wrong bearer token                        401
    ├── KeyRefused          an attempt's key used outside its attempt            403
    ├── NotModelPath        a path that is not a model API (engine admin, ...)   404
    ├── TooManyCalls        a rollout already has max_calls_per_rollout in flight 429
    ├── UnknownAttempt      rollout or attempt not in the store, or not paired   404
    ├── AttemptFinished     the attempt is final; its agent must stop calling    409
    ├── UpstreamUnavailable no upstream could be reached or it broke the reply   502
    └── UpstreamTimeout     the upstream did not answer within the read timeout  504

Agents talk OpenAI's protocol, so every error leaves the gateway as
``{"error": {"message", "type", "param", "code"}}``, never as a traceback (``param``: the
request field at fault, when the error's ``detail`` names one as ``{"param": name}``). Calls
to the Anthropic Messages endpoint get Anthropic's shape instead,
``{"type": "error", "error": {"type", "message"}}`` (``anthropic_error_body``), with the
error type Anthropic uses for the same HTTP status.
"""

from __future__ import annotations

from typing import Any

from fulmen.errors import FulmenError, GatewayError
from fulmen.gateway.capture import MESSAGES, as_object

__all__ = [
    "AttemptFinished",
    "BadRequest",
    "GatewayUnauthorized",
    "KeyRefused",
    "NotModelPath",
    "TooManyCalls",
    "UnknownAttempt",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "anthropic_error_body",
    "error_body_for",
    "openai_error_body",
]

# Anthropic's error types by HTTP status; any other 4xx is a request error, any 5xx an API one.
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class BadRequest(GatewayError):
    """The request body is not a JSON object the gateway can forward (or sets a refused field)."""

    code = "invalid_request"
    http_status = 400


class GatewayUnauthorized(GatewayError):
    """The gateway has a token and the request did not carry it."""

    code = "unauthorized"
    http_status = 401


class KeyRefused(GatewayError):
    """An attempt's key was used outside its attempt (``fulmen.types.attempt_keys``).

    For another attempt's calls, another rollout's reward, a path that is not its attempt's, or
    after its attempt ended. ``reason`` labels the refusal in the gateway's metrics.
    """

    code = "key_refused"
    http_status = 403

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class NotModelPath(GatewayError):
    """The path below ``/v1`` is not one of the model API paths the gateway forwards."""

    code = "not_found"
    http_status = 404


class TooManyCalls(GatewayError):
    """The rollout already has ``GatewayConfig.max_calls_per_rollout`` calls in flight."""

    code = "rate_limit_exceeded"
    http_status = 429


class UnknownAttempt(GatewayError):
    """The rollout or attempt in the URL is unknown, or the attempt is not of that rollout."""

    code = "not_found"
    http_status = 404


class AttemptFinished(GatewayError):
    """The attempt in the URL is already final (succeeded, failed, timed out, lost, ...)."""

    code = "attempt_finished"
    http_status = 409


class UpstreamUnavailable(GatewayError):
    """No upstream engine could be reached, or it broke the connection mid-reply."""

    code = "upstream_unavailable"
    http_status = 502


class UpstreamTimeout(GatewayError):
    """The upstream engine did not answer within the configured read timeout."""

    code = "upstream_timeout"
    http_status = 504


def openai_error_body(exc: FulmenError) -> dict[str, Any]:
    """Return OpenAI's error shape for ``exc`` (4xx are ``invalid_request_error``).

    ``param`` is the request field at fault when the error's ``detail`` names one.
    """
    kind = "invalid_request_error" if exc.http_status < 500 else "upstream_error"
    if isinstance(exc, GatewayUnauthorized):
        kind = "authentication_error"
    detail: Any = exc.detail
    param = detail.get("param") if isinstance(detail, dict) else None
    return {
        "error": {
            "message": exc.message,
            "type": kind,
            "param": param if isinstance(param, str) else None,
            "code": exc.code,
        }
    }


def anthropic_error_body(status: int, message: str) -> dict[str, Any]:
    """Return Anthropic's error shape for an error of HTTP ``status`` saying ``message``."""
    kind = _ANTHROPIC_TYPES.get(status)
    if kind is None:
        kind = "api_error" if status >= 500 else "invalid_request_error"
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_body_for(endpoint: str, status: int, openai_body: dict[str, Any]) -> dict[str, Any]:
    """Return the error body a caller of ``endpoint`` expects, given the OpenAI-shaped one.

    Only ``messages`` (the Anthropic Messages API) differs; every other endpoint gets
    ``openai_body`` itself.
    """
    if endpoint != MESSAGES:
        return openai_body
    error = openai_body.get("error")
    message = (as_object(error) or {}).get("message")
    return anthropic_error_body(status, str(message if message is not None else error))
