"""StoreConnection: one HTTP connection pool to a store service, with retries and error mapping.

``StoreClient`` turns ``Store`` calls into requests; this module sends them. A request that
hits a network error or a 5xx answer is repeated with capped, jittered exponential backoff
(callers make sure a repeat is harmless); an error answer becomes the ``fulmen.errors`` class
its ``code`` names; a body above the server's limit is refused before it is sent.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import orjson
from pydantic import BaseModel

from fulmen.errors import (
    FulmenError,
    InvalidRequest,
    PayloadTooLarge,
    StoreError,
    StoreUnavailable,
    error_class_for_code,
)

__all__ = ["Recover", "StoreConnection"]

logger = logging.getLogger(__name__)

_JSON_HEADERS = {"content-type": "application/json"}
_RETRY_STATUSES = frozenset({500, 502, 503, 504})
_BACKOFF_BASE_S = 0.05
_BACKOFF_CAP_S = 2.0
_URL_CACHE_SIZE = 256

Recover = Callable[[], Awaitable[bytes | None]]
"""Called before a retry: returns the answer if the first try already took effect, else None."""


def _error_from(response: httpx.Response) -> FulmenError:
    """Turn an error response back into the exception the server raised."""
    try:
        body = orjson.loads(response.content)
        message, code, detail = body["error"], body["code"], body.get("detail")
    except (orjson.JSONDecodeError, KeyError, TypeError):
        text = response.text[:200]
        if response.status_code >= 500:
            return StoreUnavailable(f"store answered HTTP {response.status_code}: {text}")
        return StoreError(f"store answered HTTP {response.status_code}: {text}")
    return error_class_for_code(str(code))(str(message), detail=detail)


def _default_transport(url: str) -> httpx.AsyncBaseTransport | None:
    """Pick the lean transport for plain http (see ``fulmen.store.transport``), else httpx's."""
    if not url.lower().startswith("http://"):
        return None
    try:
        from fulmen.store.transport import FastHTTPTransport
    except ImportError:  # httptools is not installed
        return None
    return FastHTTPTransport()


class StoreConnection:
    """An ``httpx.AsyncClient`` bound to one store service.

    Args:
        http: the client, with the base URL and auth header set.
        retries: how many times a request that hit a network error or a 5xx is repeated.
    """

    def __init__(self, http: httpx.AsyncClient, *, retries: int) -> None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self._http = http
        self._retries = retries
        self._is_closed = False
        self._base = str(http.base_url).rstrip("/")
        self._headers = dict(http.headers)  # the client's defaults, auth included
        self._json_headers = {**self._headers, **_JSON_HEADERS}
        self._urls: dict[str, httpx.URL] = {}
        self.max_body_bytes = 2**62  # set from the server's /v1/info once known

    @classmethod
    def open(
        cls,
        url: str,
        *,
        token: str | None,
        transport: httpx.AsyncBaseTransport | None,
        timeout: float,
        retries: int,
    ) -> StoreConnection:
        """Create a session for the service at ``url`` (no request is sent yet)."""
        headers = {"authorization": f"Bearer {token}"} if token else {}
        http = httpx.AsyncClient(
            base_url=url.rstrip("/"),
            headers=headers,
            transport=transport if transport is not None else _default_transport(url),
            timeout=httpx.Timeout(timeout),
        )
        return cls(http, retries=retries)

    async def send(
        self,
        method: str,
        path: str,
        body: BaseModel | None = None,
        *,
        params: dict[str, Any] | None = None,
        extra_timeout: float = 0.0,
        recover: Recover | None = None,
        partial: bool = False,
    ) -> bytes:
        """Send one request, retrying network errors and 5xx; return the response body.

        Args:
            method: the HTTP method.
            path: the route, relative to the base URL.
            body: the JSON body.
            params: the query string.
            extra_timeout: seconds added to the read timeout (long polls).
            recover: consulted before each retry (see ``Recover``).
            partial: leave out of ``body`` the fields the caller did not set (PATCH).
        """
        request = self._prepare(method, path, body, params, extra_timeout, partial)
        for attempt in range(self._retries + 1):
            if attempt and recover is not None:
                recovered = await recover()
                if recovered is not None:
                    return recovered
            try:
                response = await self._http.send(request)
            except httpx.TransportError as exc:
                if attempt == self._retries:
                    raise StoreUnavailable(
                        f"store at {self._http.base_url} unreachable after "
                        f"{attempt + 1} tries: {exc!r}"
                    ) from exc
                await self._backoff(attempt, method, path, repr(exc))
                continue
            if response.status_code < 400:
                return response.content
            if response.status_code in _RETRY_STATUSES and attempt < self._retries:
                await self._backoff(attempt, method, path, f"HTTP {response.status_code}")
                continue
            raise _error_from(response)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _prepare(
        self,
        method: str,
        path: str,
        body: BaseModel | None,
        params: dict[str, Any] | None,
        extra_timeout: float,
        partial: bool,
    ) -> httpx.Request:
        """Build the request once (it is re-sent as is on retries).

        Built by hand and sent with ``AsyncClient.send``: ``AsyncClient.request`` would parse
        and merge the URL and headers again on every call, which costs about as much CPU as
        the rest of a small request together.
        """
        if self._is_closed:
            raise InvalidRequest("the store client is closed")
        # Only partial updates leave fields out; elsewhere defaults must be sent (a discriminator
        # such as a resource's ``kind`` is a default the server cannot do without).
        content = body.model_dump_json(exclude_unset=partial).encode() if body is not None else None
        if content is not None and len(content) > self.max_body_bytes:
            raise PayloadTooLarge(
                f"request body of {len(content)} bytes exceeds the server's limit of "
                f"{self.max_body_bytes} bytes; send smaller batches",
                detail={"limit": self.max_body_bytes},
            )
        timeout = self._http.timeout
        if extra_timeout and timeout.read is not None:
            timeout = httpx.Timeout(timeout.read + extra_timeout, connect=timeout.connect)
        url = self._urls.get(path)
        if url is None:
            url = httpx.URL(f"{self._base}{path}")
            if len(self._urls) >= _URL_CACHE_SIZE:
                self._urls.clear()  # per-id paths filled it; the fixed ones come back at once
            self._urls[path] = url
        if params:
            url = url.copy_merge_params(params)
        return httpx.Request(
            method,
            url,
            content=content,
            headers=self._json_headers if content is not None else self._headers,
            extensions={"timeout": timeout.as_dict()},
        )

    async def _backoff(self, attempt: int, method: str, path: str, reason: str) -> None:
        # Full jitter keeps many clients that failed together from retrying together.
        delay = random.uniform(0, min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2**attempt))
        logger.warning(
            "store request %s %s failed (%s); retry %d/%d in %.2f s",
            method,
            path,
            reason,
            attempt + 1,
            self._retries,
            delay,
        )
        await asyncio.sleep(delay)

    async def aclose(self) -> None:
        """Close the connection pool; later requests raise ``InvalidRequest``."""
        self._is_closed = True
        await self._http.aclose()
