"""The gateway as an ASGI app: ``create_app(store, upstreams, *, token)``.

Routes (``{path}`` is what follows ``/v1/``, such as ``chat/completions``)::

    /rollout/{rollout_id}/attempt/{attempt_id}/v1/{path}   tracked: recorded on that attempt
    /v1/{path}                                             untracked: recorded with no rollout
    POST /v1/rewards                                       a delayed reward, to the store
    GET  /healthz                                          liveness, engines, recorder counts,
                                                           production capture counters
    GET  /metrics                                          Prometheus metrics (``metrics``)
    POST /gateway/flush                                    200 once every record is stored;
                                                           502 if the store refused some,
                                                           503 if it stayed unreachable

Agents see OpenAI's protocol, errors included: every failure is a JSON body in OpenAI's error
shape, except on the Anthropic Messages endpoint (``.../v1/messages``), whose callers get
Anthropic's. With a token, the gateway takes it as ``Authorization: Bearer`` or as Anthropic's
``x-api-key``. Middleware is pure ASGI (``BaseHTTPMiddleware`` would break context variables).

Model calls, the gateway's hot path, are dispatched by ``ModelCallDispatch``, a middleware that
sits after the token check and calls the same endpoints and error handlers as the route table:
skipping Starlette's router, exception middleware and per-request wrappers cut the gateway's
CPU per call by 8% (same-run comparison). The route table still serves every other request.
"""

from __future__ import annotations

import hmac
import logging
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from fulmen.errors import FulmenError
from fulmen.gateway.capture import MESSAGES
from fulmen.gateway.config import GatewayConfig
from fulmen.gateway.errors import GatewayUnauthorized, error_body_for, openai_error_body
from fulmen.gateway.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from fulmen.gateway.metrics import GatewayMetrics
from fulmen.gateway.proxy import Gateway
from fulmen.gateway.rewards import rewards_route
from fulmen.gateway.upstreams import Upstream
from fulmen.store.base import Store
from fulmen.types.releases import ReleaseArm

__all__ = ["ModelCallDispatch", "TokenAuth", "create_app"]

_log = logging.getLogger(__name__)
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
# The proxy routes' paths, as the route table below matches them (a segment is ``[^/]+``).
_TRACKED_PATH = re.compile(r"/rollout/([^/]+)/attempt/([^/]+)/v1/(.*)")
_UNTRACKED_PREFIX = "/v1/"
_REWARDS_PATH = "/v1/rewards"


def create_app(
    store: Store,
    upstreams: Sequence[Upstream | str],
    *,
    token: str | None = None,
    config: GatewayConfig | None = None,
    clock: Callable[[], float] | None = None,
) -> Starlette:
    """Build the gateway app; ``app.state.gateway`` is its ``Gateway`` (flush, counters).

    Args:
        store: any ``Store`` backend; calls are written to it in batches.
        upstreams: engines, as ``Upstream`` objects or base URLs (token-level engines).
        token: when set, every request but ``/healthz`` must carry it as a bearer token.
        config: timeouts, caches, batching, production capture, redaction.
        clock: monotonic seconds for production sessions (tests pass a clock they move).
    """
    engines = [u if isinstance(u, Upstream) else Upstream(base_url=u) for u in upstreams]
    gateway = Gateway(store, engines, token=token, config=config, clock=clock or time.monotonic)
    metrics = GatewayMetrics(gateway)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncGenerator[None]:
        del app
        gateway.start()
        await gateway.ready()
        try:
            yield
        finally:
            await gateway.aclose()

    # ModelCallDispatch serves the two proxy routes before the router sees them; they stay in
    # the table as the API's one description and for its 405s to other methods.
    routes = [
        Route("/healthz", _healthz, methods=["GET"]),
        Route("/metrics", _metrics_endpoint(metrics), methods=["GET"]),
        Route("/gateway/flush", _flush, methods=["POST"]),
        Route(
            "/rollout/{rollout_id}/attempt/{attempt_id}/v1/{path:path}", _tracked, methods=_METHODS
        ),
        rewards_route(store, gateway),
        Route("/v1/{path:path}", _untracked, methods=_METHODS),
    ]
    middleware = [Middleware(ModelCallDispatch, gateway=gateway, metrics=metrics)]
    if token is not None:
        middleware.insert(0, Middleware(TokenAuth, token=token, open_paths=("/healthz",)))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={
            FulmenError: _fulmen_error,
            HTTPException: _http_error,
            Exception: _unexpected_error,
        },
    )
    app.state.gateway = gateway
    return app


def _gateway(request: Request) -> Gateway:
    return request.app.state.gateway


def _metrics_endpoint(metrics: GatewayMetrics) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        del request
        return Response(metrics.render(), media_type=METRICS_CONTENT_TYPE)

    return endpoint


async def _tracked(request: Request) -> Response:
    return await _handle_tracked(_gateway(request), request)


async def _untracked(request: Request) -> Response:
    return await _handle_untracked(_gateway(request), request)


async def _handle_tracked(gateway: Gateway, request: Request) -> Response:
    params = request.path_params
    ctx = await gateway.resolver.resolve(params["rollout_id"], params["attempt_id"])
    return await gateway.handle(request, params["path"], ctx)


async def _handle_untracked(gateway: Gateway, request: Request) -> Response:
    return await gateway.handle(request, request.path_params["path"], None)


async def _healthz(request: Request) -> Response:
    gateway = _gateway(request)
    recorder = gateway.recorder
    body = {
        "status": "ok",
        "upstreams": [
            {"base_url": u.base_url, "in_flight": gateway.pool.in_flight(u)}
            for u in gateway.pool.upstreams
        ],
        "recorder": {
            "recorded": recorder.recorded,
            "stored": recorder.stored,
            "dropped": recorder.dropped,
        },
    }
    if gateway.capture is not None:
        body["capture"] = gateway.capture.status()
    if gateway.release is not None:
        release = gateway.release
        body["release"] = {
            "name": release.name,
            "state": release.state.value,
            "models": {arm.value: release.model_of(arm) for arm in ReleaseArm},
            "calls": {arm.value: release.calls[arm] for arm in ReleaseArm},
        }
    if gateway.redactor is not None:
        body["redacted_calls"] = gateway.redactor.redacted_calls
    return Response(orjson.dumps(body), media_type="application/json")


async def _flush(request: Request) -> Response:
    """Answer 200 only when every record so far is stored; 502 (refused) or 503 (unreachable)."""
    gateway = _gateway(request)
    outcome = await gateway.flush(timeout=gateway.config.flush_timeout_s)
    if outcome.is_complete:
        return Response(orjson.dumps({"status": "flushed"}), media_type="application/json")
    body = {
        "status": "failed",
        "refused": outcome.refused,
        "pending": outcome.pending,
        "error": {
            "message": f"call records not stored: {outcome.refused} refused, "
            f"{outcome.pending} still pending ({outcome.error})",
            "type": "server_error",
            "param": None,
            "code": "records_refused" if outcome.refused else "store_unreachable",
        },
    }
    status = 502 if outcome.refused else 503
    return Response(orjson.dumps(body), status, media_type="application/json")


async def _fulmen_error(request: Request, exc: Exception) -> Response:
    del request
    error = exc if isinstance(exc, FulmenError) else FulmenError(str(exc))
    return Response(
        orjson.dumps(openai_error_body(error)), error.http_status, media_type="application/json"
    )


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else str(exc)
    body = {
        "error": {
            "message": f"{detail}: {request.method} {request.url.path}",
            "type": "invalid_request_error",
            "param": None,
            "code": "not_found" if status == 404 else "invalid_request",
        }
    }
    return Response(orjson.dumps(body), status, media_type="application/json")


async def _unexpected_error(request: Request, exc: Exception) -> Response:
    _log.error("unexpected error on %s", request.url.path, exc_info=exc)
    body = {
        "error": {
            "message": f"internal gateway error: {type(exc).__name__}",
            "type": "server_error",
            "param": None,
            "code": "internal_error",
        }
    }
    return Response(orjson.dumps(body), 500, media_type="application/json")


async def _error_response(request: Request, exc: Exception) -> Response:
    """Return the response the app's exception handlers give for ``exc``."""
    if isinstance(exc, FulmenError):
        return await _fulmen_error(request, exc)
    if isinstance(exc, HTTPException):
        return await _http_error(request, exc)
    return await _unexpected_error(request, exc)


class ModelCallDispatch:
    """Pure-ASGI dispatch of the proxy routes to their endpoints; other requests pass on.

    It matches what the route table matches (the methods in ``_METHODS``; ``/v1/rewards`` is
    left to its route), sets the path parameters the endpoints read, and answers errors with
    the app's handlers, so a call gets the same reply either way, without the router's and
    exception middleware's work.
    """

    def __init__(self, app: ASGIApp, *, gateway: Gateway, metrics: GatewayMetrics) -> None:
        self.app = app
        self._gateway = gateway
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve a model call directly; hand anything else to the app."""
        if scope["type"] != "http" or scope["method"] not in _METHODS:
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        tracked = _TRACKED_PATH.fullmatch(path)
        if tracked is not None:
            rollout_id, attempt_id, endpoint = tracked.groups()
            scope["path_params"] = {
                "rollout_id": rollout_id,
                "attempt_id": attempt_id,
                "path": endpoint,
            }
            handler = _handle_tracked
        elif path.startswith(_UNTRACKED_PREFIX) and path != _REWARDS_PATH:
            scope["path_params"] = {"path": path[len(_UNTRACKED_PREFIX) :]}
            handler = _handle_untracked
        else:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request = Request(scope, receive)
        try:
            response = await handler(self._gateway, request)
        except Exception as exc:
            response = await _error_response(request, exc)
            if _is_messages(path):
                response = _reshaped(response, MESSAGES)
        self._metrics.observe_call(scope["path_params"]["path"], response.status_code, started)
        await response(scope, receive, send)


class TokenAuth:
    """Pure-ASGI token check: ``Authorization: Bearer TOKEN`` or ``x-api-key: TOKEN``.

    Refuses with a 401 in OpenAI's error shape (Anthropic's on the Messages endpoint).
    """

    def __init__(self, app: ASGIApp, *, token: str, open_paths: Sequence[str] = ()) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._key = token.encode()
        self._open_paths = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on if it carries the token, else answer 401."""
        if scope["type"] != "http" or scope["path"] in self._open_paths:
            await self.app(scope, receive, send)
            return
        if self._is_allowed(scope):
            await self.app(scope, receive, send)
            return
        payload = openai_error_body(GatewayUnauthorized("missing or wrong API key"))
        endpoint = MESSAGES if _is_messages(scope["path"]) else ""
        body = orjson.dumps(error_body_for(endpoint, 401, payload))
        response = Response(body, 401, media_type="application/json")
        await response(scope, receive, send)

    def _is_allowed(self, scope: Scope) -> bool:
        given = _header(scope, b"authorization")
        if given is not None and hmac.compare_digest(given, self._expected):
            return True
        key = _header(scope, b"x-api-key")  # looked up only when the bearer did not match
        return key is not None and hmac.compare_digest(key, self._key)


def _is_messages(path: str) -> bool:
    """Whether ``path`` is the Messages endpoint (``/v1/messages``, maybe with ``/v1`` twice)."""
    return path.endswith(f"/v1/{MESSAGES}")


def _reshaped(response: Response, endpoint: str) -> Response:
    """Return an OpenAI-shaped JSON error ``response`` in the shape ``endpoint``'s callers read."""
    try:
        payload = orjson.loads(bytes(response.body))
    except orjson.JSONDecodeError:
        return response
    if not isinstance(payload, dict):
        return response
    body = error_body_for(endpoint, response.status_code, cast("dict[str, Any]", payload))
    return Response(orjson.dumps(body), response.status_code, media_type="application/json")


def _header(scope: Scope, name: bytes) -> bytes | None:
    headers: Any = scope["headers"]
    for key, value in headers:
        if key.lower() == name:
            return value
    return None
