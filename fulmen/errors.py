"""The exception tree of fulmen, and the stable codes clients see over HTTP.

::

    FulmenError
    ├── StoreError
    │   ├── NotFound            unknown rollout, attempt, resources version, ...
    │   ├── Conflict            the same id written twice with different content
    │   ├── InvalidTransition   a lifecycle rule refused the change
    │   ├── InvalidRequest      a payload that does not match the schema
    │   ├── PayloadTooLarge     a request body above the server's limit
    │   ├── Unauthorized        missing or wrong bearer token
    │   └── StoreUnavailable    the store could not be reached (after retries)
    ├── GatewayError
    ├── EngineError
    └── ConfigError

Every error has a ``code`` (a short stable string) and an ``http_status``; the store service
turns any ``FulmenError`` into a JSON body ``{"error": ..., "code": ..., "detail": ...}`` and the
client turns that body back into the same exception class, so code behaves the same in-process
and over HTTP.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AgentFailed",
    "ConfigError",
    "Conflict",
    "EngineError",
    "FulmenError",
    "GatewayError",
    "InvalidRequest",
    "InvalidTransition",
    "NotFound",
    "PayloadTooLarge",
    "StoreError",
    "StoreUnavailable",
    "Unauthorized",
    "error_class_for_code",
    "error_summary",
]


class FulmenError(Exception):
    """Base class of every error fulmen raises on purpose.

    Args:
        message: what went wrong, naming the offending value.
        detail: optional machine-readable context (ids, allowed values).
    """

    code: ClassVar[str] = "fulmen_error"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str, *, detail: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def to_json(self) -> dict[str, Any]:
        """Return the JSON error body the HTTP services send for this error."""
        return {"error": self.message, "code": self.code, "detail": self.detail}


class StoreError(FulmenError):
    """An error raised by a store backend or the store client."""

    code = "store_error"


class NotFound(StoreError):
    """The rollout, attempt, resources version or worker does not exist."""

    code = "not_found"
    http_status = 404


class Conflict(StoreError):
    """An id that already exists was written again with different content."""

    code = "conflict"
    http_status = 409


class InvalidTransition(StoreError):
    """A lifecycle rule refused a status change (for example, a terminal rollout changed)."""

    code = "invalid_transition"
    http_status = 409


class InvalidRequest(StoreError):
    """The request does not match the schema or its values are out of range."""

    code = "invalid_request"
    http_status = 422


class PayloadTooLarge(StoreError):
    """The request body is larger than the server accepts."""

    code = "payload_too_large"
    http_status = 413


class Unauthorized(StoreError):
    """The bearer token is missing or wrong."""

    code = "unauthorized"
    http_status = 401


class StoreUnavailable(StoreError):
    """The store could not be reached, even after retries."""

    code = "store_unavailable"
    http_status = 503


class GatewayError(FulmenError):
    """An error of the LLM gateway (upstream down, unknown attempt, bad request)."""

    code = "gateway_error"
    http_status = 502


class EngineError(FulmenError):
    """An error of an inference engine (model load, bad sampling parameters, adapter)."""

    code = "engine_error"
    http_status = 500


class ConfigError(FulmenError):
    """A configuration value is invalid or has no effect in the chosen setup."""

    code = "config_error"
    http_status = 400


class AgentFailed(FulmenError):
    """Every rollout failed, step after step: the agent (or its reward code) is broken."""

    code = "agent_failed"
    http_status = 500


_BY_CODE: dict[str, type[FulmenError]] = {
    cls.code: cls
    for cls in (
        FulmenError,
        StoreError,
        NotFound,
        Conflict,
        InvalidTransition,
        InvalidRequest,
        PayloadTooLarge,
        Unauthorized,
        StoreUnavailable,
        GatewayError,
        EngineError,
        ConfigError,
        AgentFailed,
    )
}


def error_class_for_code(code: str) -> type[FulmenError]:
    """Return the exception class of ``code``; unknown codes map to ``StoreError``."""
    return _BY_CODE.get(code, StoreError)


def error_summary(text: str | None) -> str:
    """Return the line of a stored error that says what happened.

    For a traceback (what a failed attempt stores) that is its last line, the exception
    (``KeyError: 'expected'``); for anything else its first non-empty line.
    """
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].startswith("Traceback (most recent call last)"):
        return lines[-1]
    return lines[0]
