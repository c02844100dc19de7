"""An ASGI middleware for vLLM's server: its routes outside the OpenAI API need fulmen's token.

``VLLMLauncher`` turns on vLLM's development routes (``VLLM_SERVER_DEV_MODE``) for one of
them, ``/collective_rpc``, through which it reloads full weights between training steps. vLLM's
own key (``VLLM_API_KEY``) guards only the OpenAI-style prefixes (``/v1``...), so every
development route (weights, caches, sleep, pause) would answer anyone who can reach the port.
``AdminRoutesNeedToken`` (loaded with ``--middleware fulmen_vllm_guard.AdminRoutesNeedToken``)
answers 401 to any request for a path outside ``OPEN`` that does not carry
``Authorization: Bearer $FULMEN_VLLM_ADMIN_TOKEN``; an allow-list, so a route a later vLLM adds
is guarded too. Without the variable set it refuses those paths to everyone. It also puts
``$FULMEN_VLLM_INSTANCE`` in ``/health``'s ``x-fulmen-instance`` header, by which the launcher
knows its own server from another that took the port first (``fulmen.engines.base``).

Imports only the standard library and Starlette (vLLM's own dependency): it runs in vLLM's
environment, where fulmen is not installed.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse

#: Paths any client may reach as before: health and metadata, tokenization, and the API
#: prefixes vLLM guards itself with ``VLLM_API_KEY``.
OPEN_PATHS = frozenset({"/health", "/ping", "/version", "/metrics", "/tokenize", "/detokenize"})
OPEN_PREFIXES = ("/v1/", "/v2/", "/inference/", "/cohere/")
TOKEN_VARIABLE = "FULMEN_VLLM_ADMIN_TOKEN"
INSTANCE_VARIABLE = "FULMEN_VLLM_INSTANCE"
#: ``fulmen.engines.base.INSTANCE_HEADER`` (this module cannot import fulmen).
INSTANCE_HEADER = b"x-fulmen-instance"

__all__ = [
    "INSTANCE_HEADER",
    "INSTANCE_VARIABLE",
    "OPEN_PATHS",
    "OPEN_PREFIXES",
    "TOKEN_VARIABLE",
    "AdminRoutesNeedToken",
]


class AdminRoutesNeedToken:
    """Refuse (401) a request outside the open paths without fulmen's admin token."""

    def __init__(self, app: Any) -> None:
        self.app = app
        token = os.environ.get(TOKEN_VARIABLE, "")
        self._digest = hashlib.sha256(token.encode()).digest() if token else None
        self._instance = os.environ.get(INSTANCE_VARIABLE, "").encode()

    def _allowed(self, scope: dict[str, Any]) -> bool:
        path = scope["path"].removeprefix(scope.get("root_path", ""))
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            return True
        if self._digest is None:
            return False
        scheme, _, value = Headers(scope=scope).get("authorization", "").partition(" ")
        given = hashlib.sha256(value.encode()).digest()
        return scheme.lower() == "bearer" and secrets.compare_digest(given, self._digest)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Answer a refused request here; pass every other one to vLLM's app."""
        if scope["type"] == "http" and not self._allowed(scope):
            response = JSONResponse({"error": "Unauthorized"}, status_code=401)
            await response(scope, receive, send)
            return
        if scope["type"] == "websocket" and not self._allowed(scope):
            await send({"type": "websocket.close", "code": 1008})  # policy violation
            return
        if scope["type"] == "http" and scope["path"] == "/health" and self._instance:
            await self.app(scope, receive, self._with_instance(send))
            return
        await self.app(scope, receive, send)

    def _with_instance(self, send: Any) -> Any:
        """Wrap ``send`` so that the response's headers carry the instance id."""

        async def send_with_instance(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", ()), (INSTANCE_HEADER, self._instance)]
                message = {**message, "headers": headers}
            await send(message)

        return send_with_instance
