"""Errors of the gateway and the OpenAI-shaped JSON body an agent receives for them.

::

    GatewayError (fulmen.errors)
    ├── BadRequest          malformed JSON or a body the gateway cannot forward  400
    │                       (fulmen.wire.errors: translations raise it too)
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
request field at fault, when the error's ``detail`` names one as ``{"param": name}``); a wire
API with its own error shape (Anthropic's Messages) reshapes it (``WireApi.error_body``,
``fulmen.wire.table.error_body_for``).
"""

from __future__ import annotations

from typing import Any

from fulmen.errors import FulmenError, GatewayError

__all__ = [
    "AttemptFinished",
    "GatewayUnauthorized",
    "KeyRefused",
    "NotModelPath",
    "TooManyCalls",
    "UnknownAttempt",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "openai_error_body",
]


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
