"""Who may do what on the gateway: its token, and attempt keys confined to their attempt.

With a token, the gateway takes two kinds of key (as ``Authorization: Bearer`` or in a wire
API's own key header, ``WireApi.key_header``: Anthropic's ``x-api-key``):

* **the gateway's token** (the trainer, runners, operators): every route;
* **an attempt key** (``fulmen.types.attempt_keys``, minted by the runner for one attempt and
  the only key its agent holds): that attempt's own model paths
  (``/rollout/{r}/attempt/{a}/v1/...``) and ``POST /v1/rewards`` for its own rollout, while the
  attempt runs. Its URL form in the path (``/rollout/{r}/attempt/{a}/key/{mac}/v1/...``, the
  base URL in-process agents get) is the same key: a key the client sends besides is then
  not needed, and one that is not the gateway's token is ignored.

Anything else is refused with a 403 and counted in ``/metrics`` (``fulmen_gateway_refused_total``
by reason): health details, metrics, flush, untracked calls, another attempt's calls, another
rollout's rewards.

``docs/security.md`` states the threat model these checks serve.
"""

from __future__ import annotations

import hmac
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from fulmen.gateway.errors import (
    GatewayUnauthorized,
    KeyRefused,
    openai_error_body,
)
from fulmen.gateway.routes import REWARDS_PATH, tracked_path
from fulmen.types import RewardCreate
from fulmen.types.attempt_keys import AttemptKey, check_url_key, read_attempt_key
from fulmen.wire.table import api_of_path, key_headers

__all__ = [
    "ATTEMPT_KEY_SCOPE",
    "TRUSTED_SCOPE",
    "TokenAuth",
    "attempt_key_of",
    "check_reward_scope",
]

#: The ASGI scope entry holding the request's ``AttemptKey`` (absent: the gateway's token).
ATTEMPT_KEY_SCOPE: Final = "fulmen.attempt_key"
#: The ASGI scope entry set to ``True`` when the request carried the gateway's own token.
TRUSTED_SCOPE: Final = "fulmen.trusted"


def attempt_key_of(request: Request) -> AttemptKey | None:
    """Return the attempt key ``request`` came with; ``None`` for the gateway's own token."""
    return request.scope.get(ATTEMPT_KEY_SCOPE)


def check_reward_scope(reward: RewardCreate, key: AttemptKey) -> None:
    """Raise ``KeyRefused`` unless ``reward`` names the key's own rollout, by rollout id."""
    if reward.rollout_id is None:
        raise KeyRefused(
            "an attempt's key posts rewards for its own rollout by rollout_id "
            "($FULMEN_ROLLOUT_ID), not by response or session id",
            reason="reward_target",
        )
    if reward.rollout_id != key.rollout_id:
        raise KeyRefused(
            f"this key is for rollout {key.rollout_id!r}: it may not post rewards for "
            f"rollout {reward.rollout_id!r}",
            reason="other_rollout",
        )


class TokenAuth:
    """Pure-ASGI key check (see the module docstring).

    A wrong or missing key is a 401 and a key used outside its attempt a 403, in the error
    shape of the wire API the path calls (OpenAI's elsewhere). ``open_paths`` need no key at all.
    ``refusals`` (the gateway's counter) counts each refusal by reason.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        open_paths: Sequence[str] = (),
        refusals: Counter[str] | None = None,
    ) -> None:
        self.app = app
        self._token = token
        self._expected = f"Bearer {token}".encode()
        self._key = token.encode()
        self._open_paths = frozenset(open_paths)
        self._refusals = refusals if refusals is not None else Counter[str]()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on if its key allows it, else answer 401 or 403."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        bearer = _header(scope, b"authorization")
        api_key = None
        trusted = bearer is not None and hmac.compare_digest(bearer, self._expected)
        if not trusted:
            api_key = _api_key(scope)  # looked up only when the bearer did not match
            trusted = api_key is not None and hmac.compare_digest(api_key, self._key)
        if trusted or scope["path"] in self._open_paths:
            scope[TRUSTED_SCOPE] = trusted
            await self.app(scope, receive, send)
            return
        key = self._url_key(scope["path"]) or self._attempt_key(bearer, api_key)
        if key is None:
            self._refusals["wrong_key"] += 1
            error = GatewayUnauthorized("missing or wrong API key")
            await self._refuse(scope, receive, send, 401, openai_error_body(error))
            return
        refusal = _outside(scope, key)
        if refusal is not None:
            self._refusals[refusal.reason] += 1
            await self._refuse(scope, receive, send, 403, openai_error_body(refusal))
            return
        scope[ATTEMPT_KEY_SCOPE] = key
        await self.app(scope, receive, send)

    def _url_key(self, path: str) -> AttemptKey | None:
        """Return the attempt a tracked path's own key opens; ``None`` without a valid one."""
        tracked = tracked_path(path)
        if tracked is None or tracked.key is None:
            return None
        if not check_url_key(self._token, tracked.rollout_id, tracked.attempt_id, tracked.key):
            return None
        return AttemptKey(tracked.rollout_id, tracked.attempt_id)

    def _attempt_key(self, bearer: bytes | None, api_key: bytes | None) -> AttemptKey | None:
        for raw in (bearer[7:] if bearer and bearer[:7].lower() == b"bearer " else None, api_key):
            if raw is not None:
                key = read_attempt_key(self._token, raw.decode("latin-1").strip())
                if key is not None:
                    return key
        return None

    @staticmethod
    async def _refuse(
        scope: Scope, receive: Receive, send: Send, status: int, payload: dict[str, Any]
    ) -> None:
        api = api_of_path(scope["path"])
        body = orjson.dumps(payload if api is None else api.error_body(status, payload))
        await Response(body, status, media_type="application/json")(scope, receive, send)


def _outside(scope: Scope, key: AttemptKey) -> KeyRefused | None:
    """Return why ``key`` may not be used for this request; ``None`` when it may."""
    path: str = scope["path"]
    tracked = tracked_path(path)
    if tracked is not None:
        if tracked.rollout_id == key.rollout_id and tracked.attempt_id == key.attempt_id:
            return None
        return KeyRefused(
            f"this key is for attempt {key.attempt_id!r} of rollout {key.rollout_id!r} only",
            reason="other_attempt",
        )
    if path == REWARDS_PATH and scope["method"] == "POST":
        return None  # the route checks that the reward is for the key's own rollout
    return KeyRefused(
        f"an attempt's key is valid only on its own attempt's model paths and "
        f"POST {REWARDS_PATH}, not on {path}",
        reason="not_attempt_path",
    )


def _api_key(scope: Scope) -> bytes | None:
    """Return the key sent in a wire API's own key header (``WireApi.key_header``), if any."""
    for name in key_headers():
        value = _header(scope, name.encode("latin-1"))
        if value is not None:
            return value
    return None


def _header(scope: Scope, name: bytes) -> bytes | None:
    headers: Any = scope["headers"]
    for key, value in headers:
        if key.lower() == name:
            return value
    return None
