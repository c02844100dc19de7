"""``POST /v1/rewards`` on the gateway: a delayed reward, forwarded to the gateway's store.

An agent or a feedback job that only knows the gateway (and the response ids its calls
returned) posts rewards here, with the body of the store's ``POST /v1/rewards``
(``RewardCreate``). A reward that names a response id first waits for the call records
answered so far to be stored (``Gateway.flush``), so a reward sent right after the response
finds its call. A body above the gateway's ``max_body_bytes`` is refused with a 413 before it
is read whole. Errors come back in OpenAI's error shape like every gateway error; the route is
described in ``docs/gateway-openapi.json`` (``fulmen.gateway.openapi``). An attempt's key
(``fulmen.gateway.auth``) posts rewards for its own rollout only, by ``rollout_id``, while the
attempt runs; anything else is a 403.

With production capture (``GatewayConfig.capture``) a reward for a session the gateway still
holds in memory (open, or closed and not sampled) is held with it and answered 202
``{"status": "held", "session_id": ...}``; it reaches the store once the session is written
(and a reward of at least ``keep_if_reward_at_least`` gets an unsampled session written). A
reward for a session the sample did not keep and the gateway no longer holds is answered 202
``{"status": "not_kept", ...}`` instead of 404 (``fulmen.gateway.sessions``).
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fulmen.errors import InvalidRequest, NotFound
from fulmen.gateway.auth import attempt_key_of, check_reward_scope
from fulmen.gateway.errors import AttemptFinished, KeyRefused
from fulmen.gateway.proxy import Gateway
from fulmen.gateway.request_reading import read_body
from fulmen.gateway.routes import REWARDS_PATH
from fulmen.store.roles import RecordLog
from fulmen.store.routes import parse_body
from fulmen.types import RewardCreate

__all__ = ["rewards_route"]


def rewards_route(store: RecordLog, gateway: Gateway) -> Route:
    """Return the ``POST /v1/rewards`` route that stores rewards in ``store``."""
    limit = gateway.config.max_body_bytes

    async def post_reward(request: Request) -> Response:
        reward = parse_body(RewardCreate, await read_body(request, limit))
        key = attempt_key_of(request)
        if key is not None:  # an agent's own key: its own rollout, while its attempt runs
            try:
                check_reward_scope(reward, key)
                try:
                    await gateway.resolver.resolve(key.rollout_id, key.attempt_id)
                except AttemptFinished as exc:
                    raise KeyRefused(
                        f"this attempt's key expired with its attempt: {exc.message}",
                        reason="attempt_ended",
                    ) from None
            except KeyRefused as refused:
                gateway.refusals[refused.reason] += 1
                raise
        bounds = gateway.config.reward_range
        name = bounds.outside(reward.values)
        if name is not None:
            raise InvalidRequest(
                f"invalid request body: values.{name}: {reward.values[name]:g} is outside the "
                f"accepted reward range [{bounds.min:g}, {bounds.max:g}] (gateway reward_range)",
                detail={"param": f"values.{name}"},
            )
        capture = gateway.capture
        held = await capture.before_reward(reward) if capture is not None else None
        if held is not None:  # its production session is still in the gateway's memory
            return Response(orjson.dumps(held.body()), 202, media_type="application/json")
        if reward.response_id is not None:
            await gateway.flush(timeout=gateway.config.flush_timeout_s)
        try:
            stored = await store.add_reward(reward)
        except NotFound:
            held = capture.not_kept(reward) if capture is not None else None
            if held is None:
                raise
            return Response(orjson.dumps(held.body()), 202, media_type="application/json")
        return Response(stored.model_dump_json(), media_type="application/json")

    return Route(REWARDS_PATH, post_reward, methods=["POST"])
