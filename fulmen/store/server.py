"""The store service: any ``Store`` backend over HTTP, as a Starlette ASGI app.

``create_app(store, token=...)`` mounts the route table of ``fulmen.store.routes``. There is one
error surface: every response that is not a success is JSON ``{"error", "code", "detail",
"request_id"}`` — a ``FulmenError`` with its own status, 422 ``invalid_request`` naming the bad
field and the rule, 400 for a body that is not JSON, 413 ``payload_too_large`` (checked while
the body is read), 401 ``unauthorized``, 404 for an unknown route, 405 with an ``Allow`` header.
A 5xx body says only what kind of failure it was: the exception (SQL, parameters, traceback)
goes to this module's logger under the same ``request_id``, never to the client. Middleware is
pure ASGI because ``BaseHTTPMiddleware`` breaks context variables.
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import unquote

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fulmen.errors import FulmenError, PayloadTooLarge, StoreUnavailable, Unauthorized
from fulmen.store.base import Store
from fulmen.store.coalescer import WriteCoalescer
from fulmen.store.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from fulmen.store.metrics import StoreMetrics
from fulmen.store.routes import OPERATIONS, Call, Operation
from fulmen.store.wire import ServiceInfo
from fulmen.version import __version__

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_WAIT_S", "create_app"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_WAIT_S = 30.0
_JSON = "application/json"
_SPEC_PATH = "/v1/openapi.json"


_REQUEST_ID_HEADER = "x-request-id"


def _request_id() -> str:
    """Return a fresh id that ties an error body to the server log line with its details."""
    return secrets.token_hex(8)


def _json_error(
    status: int,
    error: str,
    code: str,
    request_id: str,
    detail: object = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    body = {"error": error, "code": code, "detail": detail, "request_id": request_id}
    return Response(
        orjson.dumps(body, default=str),  # a detail may hold odd values
        status_code=status,
        media_type=_JSON,
        headers={**(headers or {}), _REQUEST_ID_HEADER: request_id},
    )


def _error_response(exc: FulmenError, request_id: str, where: str) -> Response:
    """Answer a ``FulmenError``: 4xx bodies say what was wrong, 5xx bodies only that it failed."""
    if exc.http_status >= 500:
        logger.error("store service: %s failed [request %s]", where, request_id, exc_info=exc)
        if isinstance(exc, StoreUnavailable):
            message = "the store's database is unavailable; retry later"
        else:
            message = "internal server error"
        message = f"{message} (request {request_id}; details in the server log)"
        return _json_error(exc.http_status, message, exc.code, request_id)
    headers = {"www-authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    return _json_error(exc.http_status, exc.message, exc.code, request_id, exc.detail, headers)


def _internal_error(exc: BaseException, request_id: str, where: str) -> Response:
    logger.error("store service: %s failed [request %s]", where, request_id, exc_info=exc)
    message = f"internal server error (request {request_id}; details in the server log)"
    return _json_error(500, message, "internal_error", request_id)


async def _read_body(request: Request, limit: int) -> bytes:
    """Read the body, refusing it as soon as it exceeds ``limit`` bytes (not after reading it)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(
            f"request body of {declared} bytes exceeds the limit of {limit} bytes",
            detail={"limit": limit},
        )
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(
                f"request body exceeds the limit of {limit} bytes", detail={"limit": limit}
            )
        chunks.append(chunk)
    return b"".join(chunks)


def _endpoint(
    op: Operation, base: Call, limit: int, metrics: StoreMetrics
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        response = await answer(request)
        metrics.observe_request(op.name, response.status_code, started)
        return response

    async def answer(request: Request) -> Response:
        try:
            body = await _read_body(request, limit) if op.body is not None else b""
            call = dataclasses.replace(
                base,
                # Routing matches the raw path (see _RawPath), so parameters arrive encoded.
                path={k: unquote(v) for k, v in request.path_params.items()},
                query=request.query_params,
                body=body,
            )
            result = await op.answer(call)
            metrics.observe_result(op.name, result)
            payload = op.encode(result)
        except FulmenError as exc:
            return _error_response(exc, _request_id(), f"{op.method} {op.path}")
        except Exception as exc:
            return _internal_error(exc, _request_id(), f"{op.method} {op.path}")
        return Response(payload, media_type=_JSON)

    endpoint.__name__ = op.name
    return endpoint


def _by_method(
    endpoints: Mapping[str, Callable[[Request], Awaitable[Response]]],
) -> Callable[[Request], Awaitable[Response]]:
    if len(endpoints) == 1:
        return next(iter(endpoints.values()))

    async def endpoint(request: Request) -> Response:
        # HEAD is routed with GET (Starlette adds it) and answered by the GET handler.
        method = "GET" if request.method == "HEAD" else request.method
        return await endpoints[method](request)

    return endpoint


class _RawPath:
    """Route on the still-encoded path.

    An id containing ``/`` (sent as ``%2F``) then stays one path segment; handlers decode
    parameters themselves.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        if scope["type"] == "http" and raw:
            scope = {**scope, "path": raw.decode("latin-1")}
        await self.app(scope, receive, send)


class _BearerAuth:
    """Refuse requests without the right ``Authorization: Bearer <token>`` header (401)."""

    def __init__(self, app: ASGIApp, *, token: str | None, public: frozenset[str]) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode() if token else None
        self.public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.expected is None or scope["path"] in self.public:
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        if given is not None and hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        reason = "missing bearer token" if given is None else "wrong bearer token"
        error = Unauthorized(f"{reason}: send 'Authorization: Bearer <token>'")
        response = _error_response(error, _request_id(), scope["path"])
        await response(scope, receive, send)


def _openapi_endpoint() -> Callable[[Request], Awaitable[Response]]:
    spec: list[bytes] = []  # built on first request: most servers are never asked

    async def openapi(request: Request) -> Response:
        del request
        if not spec:
            from fulmen.store.openapi import openapi_json

            spec.append(openapi_json().encode())
        return Response(spec[0], media_type=_JSON)

    return openapi


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    code = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
    message = f"no route {request.method} {request.url.path}"
    if status == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    # Starlette puts the route's methods in ``Allow`` on a 405; keep them.
    headers = exc.headers if isinstance(exc, HTTPException) else None
    return _json_error(status, message, code, _request_id(), headers=headers)


async def _unexpected(request: Request, exc: Exception) -> Response:
    return _internal_error(exc, _request_id(), f"{request.method} {request.url.path}")


#: Prometheus metrics (``fulmen.store.metrics``); behind the token like every store route.
METRICS_PATH = "/metrics"


def _metrics_endpoint(metrics: StoreMetrics) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        del request
        return Response(await metrics.render(), media_type=METRICS_CONTENT_TYPE)

    return endpoint


def create_app(
    store: Store,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_wait_s: float = DEFAULT_MAX_WAIT_S,
) -> Starlette:
    """Build the ASGI app that serves ``store`` over HTTP.

    Args:
        store: any backend; the app does not close it and does not run its watchdog.
        token: bearer token every request but ``GET /v1/info`` and ``GET /v1/openapi.json``
            must carry; ``None`` disables
            auth (only sensible on loopback, which ``fulmen store serve`` enforces).
        max_body_bytes: larger request bodies are refused with 413 while being read.
        max_wait_s: the longest one ``wait_for_rollouts`` request is held open.
    """
    if max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be positive, got {max_body_bytes}")
    caps = store.capabilities
    info = ServiceInfo(
        version=__version__,
        is_durable=caps.is_durable,
        is_shared=True,  # whatever the backend, every client of the service shares it
        max_body_bytes=max_body_bytes,
        max_wait_s=max_wait_s,
        auth_required=token is not None,
    )
    metrics = StoreMetrics(store)
    base = Call(
        store=store,
        info=info,
        add_spans=WriteCoalescer(metrics.observed_writes("spans", store.add_spans)).submit,
        add_llm_calls=WriteCoalescer(
            metrics.observed_writes("llm_calls", store.add_llm_calls)
        ).submit,
        path={},
        query={},
        body=b"",
    )
    by_path: dict[str, dict[str, Callable[[Request], Awaitable[Response]]]] = {}
    for op in OPERATIONS:
        by_path.setdefault(op.path, {})[op.method] = _endpoint(op, base, max_body_bytes, metrics)
    # One route per path, whatever its methods, so a 405's ``Allow`` lists all of them.
    routes = [
        Route(path, _by_method(endpoints), methods=list(endpoints))
        for path, endpoints in by_path.items()
    ]
    routes.append(Route(_SPEC_PATH, _openapi_endpoint(), methods=["GET"]))
    routes.append(Route(METRICS_PATH, _metrics_endpoint(metrics), methods=["GET"]))
    public = frozenset(op.path for op in OPERATIONS if op.is_public) | {_SPEC_PATH}
    return Starlette(
        routes=routes,
        middleware=[
            Middleware(_RawPath),
            Middleware(_BearerAuth, token=token, public=public),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _unexpected},
    )
