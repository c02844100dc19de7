"""The wire APIs the gateway serves: the built-in ones, then those installed distributions add.

The one table the gateway's routes and allowlist, its key check, its error shapes, the OpenAPI
spec and the SFT export iterate. A distribution adds an API by declaring a ``WireApi`` instance
in the ``fulmen.wire_apis`` entry-point group (``docs/architecture.md``, "Extending fulmen");
nothing under ``fulmen/`` names it. Read once per process.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, Final

from fulmen.errors import ConfigError
from fulmen.importing import installed_entries
from fulmen.wire.api import WireApi
from fulmen.wire.messages.api import MESSAGES_API
from fulmen.wire.openai import CHAT_API, COMPLETIONS_API
from fulmen.wire.responses.api import RESPONSES_API

__all__ = [
    "BUILT_IN",
    "ENTRY_POINT_GROUP",
    "api_of_path",
    "error_body_for",
    "forwarded_paths",
    "key_headers",
    "wire_api",
    "wire_apis",
]

#: The entry-point group an installed distribution adds a wire API in.
ENTRY_POINT_GROUP: Final = "fulmen.wire_apis"
#: fulmen's own wire APIs.
BUILT_IN: Final = (CHAT_API, COMPLETIONS_API, RESPONSES_API, MESSAGES_API)
# One id segment of a forwarded path: no slash, no dot-segment, no percent-escape (nothing an
# upstream could decode into another path).
_ID: Final = r"[A-Za-z0-9_\-:][A-Za-z0-9_\-:.]*"


@functools.cache
def wire_apis() -> tuple[WireApi, ...]:
    """Return every wire API, built-in first.

    Raises:
        ConfigError: an entry point does not load, is not a ``WireApi``, or claims a path
            another API has.
    """
    apis = list(BUILT_IN)
    for label, api in installed_entries(ENTRY_POINT_GROUP, WireApi, what="wire API"):
        taken = {p for a in apis for p in (a.endpoint, *a.aliases)}
        clash = taken.intersection((api.endpoint, *api.aliases))
        if clash:
            raise ConfigError(f"{label} claims /v1/{min(clash)}, which another API serves")
        apis.append(api)
    return tuple(apis)


@functools.cache
def _by_path() -> Mapping[str, WireApi]:
    return {path: api for api in wire_apis() for path in (api.endpoint, *api.aliases)}


def wire_api(endpoint: str) -> WireApi | None:
    """Return the API whose calls are POSTed to ``endpoint`` (below ``/v1``, or an alias)."""
    return _by_path().get(endpoint)


def api_of_path(path: str) -> WireApi | None:
    """Return the API a request's whole URL ``path`` calls (``.../v1/{endpoint}``), if any."""
    _, found, endpoint = path.rpartition("/v1/")
    return wire_api(endpoint) if found else None


@functools.cache
def key_headers() -> frozenset[str]:
    """Return the headers besides ``Authorization`` that clients send their key in."""
    return frozenset(api.key_header for api in wire_apis() if api.key_header is not None)


@functools.cache
def forwarded_paths() -> tuple[Mapping[str, frozenset[str]], Mapping[str, re.Pattern[str]]]:
    """Return, by method, every path below ``/v1`` the gateway forwards: exact ones, patterns.

    The APIs' own endpoints (POST) and each API's ``forwarded`` paths; one with ``{id}`` (one
    id segment) is a pattern, the others are looked up as they are (every model call checks).
    """
    exact: dict[str, set[str]] = {"POST": {api.endpoint for api in wire_apis()}}
    patterns: dict[str, list[str]] = {}
    for api in wire_apis():
        for method, path in api.forwarded:
            if "{id}" in path:
                pattern = re.escape(path).replace(re.escape("{id}"), _ID)
                patterns.setdefault(method, []).append(pattern)
            else:
                exact.setdefault(method, set()).add(path)
    return (
        {method: frozenset(paths) for method, paths in exact.items()},
        {method: re.compile("|".join(p)) for method, p in patterns.items()},
    )


def error_body_for(endpoint: str, status: int, openai_body: dict[str, Any]) -> dict[str, Any]:
    """Return the error body a caller of ``endpoint`` reads, given the OpenAI-shaped one."""
    api = wire_api(endpoint)
    return openai_body if api is None else api.error_body(status, openai_body)
