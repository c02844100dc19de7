"""One HTTP/1.1 request before it is sent: where it goes, its head bytes, how it can fail.

``Origin`` (a base URL and the proxy it is reached through), ``request_head`` (the bytes of
the request line and headers) and the errors that tell the caller what happened to a request;
``fulmen.gateway.http1`` sends the requests.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

__all__ = [
    "BrokenReply",
    "ClosedBeforeReply",
    "ConnectFailed",
    "Origin",
    "ReadTimeout",
    "request_head",
]

# Characters a path keeps as they are (RFC 3986 pchar and "/"); the rest is %-encoded.
_PATH_SAFE = "/:@!$&'()*+,;=~"


class ConnectFailed(OSError):
    """No connection to the server (refused, unreachable, unknown host, connect timeout)."""


class ClosedBeforeReply(ConnectionError):
    """A reused connection was closed before any byte of the reply: safe to send again."""


class ReadTimeout(TimeoutError):
    """The server sent nothing for ``read_timeout_s`` while a reply was awaited."""


class BrokenReply(ConnectionError):
    """The connection broke or the reply was malformed after the request went out."""


@dataclass(frozen=True)
class Origin:
    """Where requests for one base URL go: scheme, host, port, the path prefix, a proxy."""

    scheme: str
    host: str
    port: int
    base_path: str
    proxy: _Proxy | None = None

    @classmethod
    def parse(cls, base_url: str, proxy_url: str | None = None) -> Origin:
        """Return the origin of ``base_url`` (``http(s)://host[:port][/path]``), via a proxy."""
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        proxy = _Proxy.parse(proxy_url) if proxy_url else None
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"), proxy)

    @property
    def authority(self) -> str:
        """``host[:port]`` as the Host header gives it (the default port left out)."""
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


@dataclass(frozen=True)
class _Proxy:
    host: str
    port: int
    authorization: str | None  # a ``Proxy-Authorization`` value from the URL's credentials

    @classmethod
    def parse(cls, url: str) -> _Proxy:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"only http:// proxies are supported, got {url!r}")
        authorization = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            authorization = "Basic " + base64.b64encode(pair.encode()).decode()
        return cls(parts.hostname, parts.port or 80, authorization)


def request_head(
    origin: Origin,
    method: str,
    path: str,
    query: bytes,
    headers: Mapping[str, str],
    body: bytes | None,
    *,
    keepalive: bool,
) -> bytes:
    """Return the request line and headers of one request to ``origin``.

    ``path`` (decoded) is appended to the origin's base path and ``query`` goes as it is; a
    method, path or header that would break out of its line raises ``ValueError``.
    ``keepalive`` off asks the server to close the connection after its reply.
    """
    # ``path`` is decoded (uvicorn turns %0D%0A into a line break): encode it again.
    target = origin.base_path + quote(path, safe=_PATH_SAFE)
    if query:
        target += "?" + query.decode("latin-1")
    if origin.proxy is not None and origin.scheme == "http":
        target = f"http://{origin.authority}{target}"  # absolute form, for the proxy
    if _is_unsafe(method) or _is_unsafe(target) or " " in target:
        raise ValueError(f"unsafe request line: {method} {target!r}")
    lines = [f"{method} {target} HTTP/1.1\r\nhost: {origin.authority}\r\n"]
    for name, value in headers.items():
        if _is_unsafe(name) or _is_unsafe(value):
            raise ValueError(f"header {name!r} holds a line break")
        lines.append(f"{name}: {value}\r\n")
    if origin.proxy is not None and origin.scheme == "http" and origin.proxy.authorization:
        lines.append(f"proxy-authorization: {origin.proxy.authorization}\r\n")
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"content-length: {len(body) if body else 0}\r\n")
    lines.append("accept-encoding: identity\r\n")
    if not keepalive:
        lines.append("connection: close\r\n")
    return "".join(lines).encode("latin-1") + b"\r\n"


def _is_unsafe(text: str) -> bool:
    """Whether ``text`` would break out of its line in a request head."""
    return "\r" in text or "\n" in text or "\x00" in text
