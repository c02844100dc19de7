"""OpenAI-shaped API errors of the built-in server.

Handlers and the batching thread raise :class:`APIError`; the server turns it into
``{"error": {"message", "type", "param", "code"}}`` with the same HTTP status, as OpenAI and
vLLM do, so clients of either engine handle errors the same way.
"""

from __future__ import annotations

from typing import Any

from fulmen.errors import EngineError

__all__ = ["APIError", "bad_request", "not_found"]


class APIError(EngineError):
    """An error that is reported to the client in OpenAI's error shape.

    Args:
        message: what is wrong, naming the offending value.
        status: the HTTP status (4xx for the caller's mistakes).
        type: OpenAI error type, e.g. ``BadRequestError`` or ``NotFoundError``.
        param: the request field at fault, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "BadRequestError",
        param: str | None = None,
    ) -> None:
        super().__init__(message, detail={"param": param})
        self.status = status
        self.type = type
        self.param = param

    def body(self) -> dict[str, Any]:
        """Return the JSON body sent to the client."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.status,
            }
        }


def bad_request(message: str, param: str | None = None) -> APIError:
    """Make a 400 error for an invalid request value."""
    return APIError(message, status=400, type="BadRequestError", param=param)


def not_found(message: str, param: str | None = None) -> APIError:
    """Make a 404 error for an unknown model or adapter."""
    return APIError(message, status=404, type="NotFoundError", param=param)
