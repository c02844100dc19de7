"""The one error a wire API raises itself: a request its translation cannot carry."""

from __future__ import annotations

from fulmen.errors import GatewayError

__all__ = ["BadRequest"]


class BadRequest(GatewayError):
    """The request body is not a JSON object the gateway can forward (or sets a refused field).

    Raised by a translation for a request the engine's chat path cannot express (an image
    block, server state), and by the gateway for a body that is not a JSON object; the agent
    gets a 400 in its API's error shape, naming the field (``detail={"param": name}``).
    """

    code = "invalid_request"
    http_status = 400
