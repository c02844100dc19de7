"""The gateway's model-call routes, spelled once.

An agent's model URL is tracked (``/rollout/{rollout_id}/attempt/{attempt_id}/v1/...``, or with
the attempt's key in the path, ``.../attempt/{attempt_id}/key/{key}/v1/...``) or untracked
(``/v1/...``); ``POST /v1/rewards`` is the delayed-reward route below the same prefix. The app's
route table, the fast dispatch of model calls (``fulmen.gateway.app.ModelCallDispatch``), the
key check (``fulmen.gateway.auth``) and the OpenAPI spec all read these patterns; the regular
expressions are compiled from them by Starlette, as its router compiles its routes.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from starlette.routing import compile_path

__all__ = [
    "MODEL_ROUTES",
    "REWARDS_PATH",
    "TRACKED",
    "TRACKED_KEYED",
    "UNTRACKED",
    "TrackedPath",
    "spec_path",
    "tracked_path",
    "untracked_endpoint",
]

#: A call recorded on an attempt.
TRACKED: Final = "/rollout/{rollout_id}/attempt/{attempt_id}/v1/{path:path}"
#: The same, the attempt's key in the path (the base URL in-process agents get).
TRACKED_KEYED: Final = "/rollout/{rollout_id}/attempt/{attempt_id}/key/{key}/v1/{path:path}"
#: A call recorded with no rollout (or a production call).
UNTRACKED: Final = "/v1/{path:path}"
#: Every model-call route, in the order the route table matches them.
MODEL_ROUTES: Final = (TRACKED, TRACKED_KEYED, UNTRACKED)
#: The delayed-reward route, below the untracked prefix but never a model call.
REWARDS_PATH: Final = "/v1/rewards"

_TRACKED = tuple(compile_path(route)[0] for route in (TRACKED, TRACKED_KEYED))
_UNTRACKED_PREFIX: Final = UNTRACKED.removesuffix("{path:path}")


class TrackedPath(NamedTuple):
    """The parts of a tracked path: its rollout, attempt, URL key (or ``None``) and endpoint."""

    rollout_id: str
    attempt_id: str
    key: str | None
    endpoint: str


def tracked_path(path: str) -> TrackedPath | None:
    """Return the parts of ``path`` when it is a tracked model-call path, else ``None``."""
    for regex in _TRACKED:
        match = regex.fullmatch(path)
        if match is not None:
            found = match.groupdict()
            return TrackedPath(
                found["rollout_id"], found["attempt_id"], found.get("key"), found["path"]
            )
    return None


def untracked_endpoint(path: str) -> str | None:
    """Return the endpoint of an untracked model-call path (never the rewards route)."""
    if path.startswith(_UNTRACKED_PREFIX) and path != REWARDS_PATH:
        return path[len(_UNTRACKED_PREFIX) :]
    return None


def spec_path(route: str, endpoint: str) -> str:
    """Return ``route`` with its ``{path:path}`` as ``endpoint``, as an OpenAPI path."""
    return route.replace("{path:path}", endpoint)
