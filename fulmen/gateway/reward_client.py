"""Post a delayed reward to a gateway's ``POST /v1/rewards`` from Python.

A feedback job of a deployed agent often knows only the gateway (and the response or session
ids the agent saw), and with production capture it must post there: a reward for a session the
gateway still holds in memory waits with it, and can get an unsampled session kept
(``docs/production.md``). :func:`post_reward` sends one ``RewardCreate`` (by ``rollout_id``,
``response_id`` or ``session_id``; a scalar ``{"reward": x}`` or named values) and returns the
stored ``Reward``, or the gateway's ``HeldReward`` when it held the reward (202). A reward
without a ``key`` gets one before the first try, so retries after a lost answer store it once;
the gateway's OpenAI-shaped errors become fulmen's (``NotFound``, ``Conflict``, ...).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from fulmen.errors import (
    Conflict,
    FulmenError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    StoreUnavailable,
    Unauthorized,
)
from fulmen.gateway.sessions import HeldReward
from fulmen.store.clock import new_id
from fulmen.tls import tls_context
from fulmen.types import Reward, RewardCreate

__all__ = ["post_reward"]

_ERRORS: dict[int, type[FulmenError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidRequest,
}


async def post_reward(
    gateway_url: str,
    reward: RewardCreate,
    *,
    token: str | None = None,
    timeout_s: float = 30.0,
    retries: int = 2,
) -> Reward | HeldReward:
    """Post ``reward`` to the gateway at ``gateway_url`` (its root, e.g. ``http://host:8100``).

    Args:
        gateway_url: the gateway's root URL (``/v1/rewards`` is appended).
        reward: what to post; a missing ``key`` is filled in so that retries store it once.
        token: the gateway's bearer token, when it has one.
        timeout_s: per-try timeout.
        retries: extra tries after a connection error or a 5xx answer (0.5 s, 1 s, ... apart).

    Raises:
        NotFound / Conflict / InvalidRequest / PayloadTooLarge / Unauthorized: the gateway's
            4xx answer, with its message.
        StoreUnavailable: no answer, or 5xx answers, after every try.
    """
    if reward.key is None:
        reward = reward.model_copy(update={"key": new_id("rw")})
    url = f"{gateway_url.rstrip('/')}/v1/rewards"
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    body = reward.model_dump_json(exclude_none=True)
    problem = ""
    async with httpx.AsyncClient(
        timeout=timeout_s, trust_env=False, verify=tls_context()
    ) as client:
        for attempt in range(retries + 1):
            if attempt:
                await asyncio.sleep(0.5 * 2 ** (attempt - 1))
            try:
                answer = await client.post(url, content=body, headers=headers)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                continue
            if answer.status_code == 200:
                return Reward.model_validate_json(answer.content)
            if answer.status_code == 202:
                held = answer.json()
                return HeldReward(status=held["status"], session_id=held["session_id"])
            message = _message(answer)
            error = _ERRORS.get(answer.status_code)
            if error is not None:
                raise error(f"the gateway refused the reward ({answer.status_code}): {message}")
            problem = f"HTTP {answer.status_code}: {message}"
    raise StoreUnavailable(
        f"could not post the reward to {url} after {retries + 1} tries: {problem}"
    )


def _message(answer: httpx.Response) -> str:
    """Return the message of an OpenAI-shaped error body, else the start of the body."""
    try:
        payload: Any = answer.json()
        return str(payload["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return answer.text[:200]
