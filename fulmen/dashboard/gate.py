"""Pure ASGI middleware of the dashboard: the bearer-token gate and the security headers.

The page itself (HTML, scripts, styles) holds no data and is public; every ``/api/`` request
must carry ``Authorization: Bearer <token>`` when the dashboard has a token, else it gets a 401
JSON body and no data. Every response carries a Content-Security-Policy that allows only the
dashboard's own scripts (no inline script, no other origin), so agent text that slipped into
markup could still not run.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Final

import orjson

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["SECURITY_HEADERS", "SecurityHeaders", "TokenGate"]

SECURITY_HEADERS: Final[tuple[tuple[bytes, bytes], ...]] = (
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
)


class TokenGate:
    """Refuse ``/api/`` requests without the right bearer token with 401.

    Args:
        app: the application behind the gate.
        token: the token to require; ``None`` lets every request through (loopback only).
    """

    def __init__(self, app: ASGIApp, *, token: str | None) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or answer 401 to an API request with a wrong token."""
        is_api = scope["type"] == "http" and str(scope["path"]).startswith("/api/")
        if not is_api or self.expected is None:
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        if given is not None and hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        reason = "missing bearer token" if given is None else "wrong bearer token"
        body = orjson.dumps(
            {"error": f"{reason}: send 'Authorization: Bearer <token>'", "code": "unauthorized"}
        )
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class SecurityHeaders:
    """Add ``SECURITY_HEADERS`` to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app, adding the headers to its response."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0] != b"cache-control"]
                message = {**message, "headers": [*headers, *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
