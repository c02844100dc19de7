"""``POST /v1/rewards`` on the gateway: a delayed reward, forwarded to the gateway's store.

An agent or a feedback job that only knows the gateway (and the response ids its calls
returned) posts rewards here, with the body of the store's ``POST /v1/rewards``
(``RewardCreate``). A reward that names a response id first waits for the call records
answered so far to be stored (``Gateway.flush``), so a reward sent right after the response
finds its call. A body above the gateway's ``max_body_bytes`` is refused with a 413 before it
is read whole. Errors come back in OpenAI's error shape like every gateway error; the route is
described in ``docs/gateway-openapi.json`` (``fulmen.gateway.openapi``).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fulmen.errors import PayloadTooLarge
from fulmen.gateway.proxy import Gateway
from fulmen.store.base import Store
from fulmen.store.routes import parse_body
from fulmen.types import RewardCreate

__all__ = ["rewards_route"]


def rewards_route(store: Store, gateway: Gateway) -> Route:
    """Return the ``POST /v1/rewards`` route that stores rewards in ``store``."""
    limit = gateway.config.max_body_bytes

    async def post_reward(request: Request) -> Response:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise PayloadTooLarge(f"request body of {length} bytes exceeds {limit}")
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > limit:
                raise PayloadTooLarge(f"request body exceeds {limit} bytes")
        reward = parse_body(RewardCreate, bytes(raw))
        if reward.response_id is not None:
            await gateway.flush(timeout=gateway.config.flush_timeout_s)
        stored = await store.add_reward(reward)
        return Response(stored.model_dump_json(), media_type="application/json")

    return Route("/v1/rewards", post_reward, methods=["POST"])
