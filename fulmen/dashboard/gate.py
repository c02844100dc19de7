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

from fulmen.store.service import is_loopback

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
    """Guard ``/api/``: 401 without the right bearer token, 403 for what a web page could forge.

    Without a token (loopback only) the API still refuses two things another web site could
    make a browser send to 127.0.0.1: a ``Host`` that is not a loopback name (DNS rebinding),
    and a ``POST`` whose body is not ``application/json`` (a cross-site form; a JSON body from
    another origin needs a CORS preflight this server never grants).

    Args:
        app: the application behind the gate.
        token: the token to require; ``None`` for none (loopback only).
    """

    def __init__(self, app: ASGIApp, *, token: str | None) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or answer 401/403 to an API request that may not pass."""
        is_api = scope["type"] == "http" and str(scope["path"]).startswith("/api/")
        if not is_api:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if scope["method"] == "POST" and not headers.get(b"content-type", b"").startswith(
            b"application/json"
        ):
            await _refuse(send, 403, "forbidden", "POST bodies must be application/json")
            return
        if self.expected is None:
            host = headers.get(b"host", b"").decode("latin-1")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if not is_loopback(name.strip("[]")):
                await _refuse(send, 403, "forbidden", f"host {host!r} is not this machine")
                return
            await self.app(scope, receive, send)
            return
        given = headers.get(b"authorization")
        if given is not None and hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        reason = "missing bearer token" if given is None else "wrong bearer token"
        await _refuse(send, 401, "unauthorized", f"{reason}: send 'Authorization: Bearer <token>'")


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    body = orjson.dumps({"error": message, "code": code})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
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
