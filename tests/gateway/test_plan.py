"""``Gateway.plan``: how one model call will be served, decided before anything is sent."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from starlette.requests import Request

from fulmen.gateway.config import GatewayConfig
from fulmen.gateway.proxy import Gateway
from fulmen.gateway.upstreams import Upstream
from fulmen.store.memory import MemoryStore
from fulmen.wire.messages.api import MESSAGES_API
from fulmen.wire.openai import CHAT_API


def _request(agent: str | None = None) -> Request:
    headers = [(b"x-fulmen-agent", agent.encode())] if agent else []
    return Request({"type": "http", "method": "POST", "path": "/v1/x", "headers": headers})


@pytest.fixture
async def store() -> AsyncIterator[MemoryStore]:
    store = await MemoryStore.connect(watchdog_interval=None)
    yield store
    await store.aclose()


@pytest.mark.parametrize("token_level", [True, False])
async def test_a_plan_maps_the_model_and_translates_only_for_a_token_level_engine(
    store: MemoryStore, token_level: bool
) -> None:
    gateway = Gateway(
        store,
        [Upstream(base_url="http://127.0.0.1:9/v1", is_token_level=token_level)],
        config=GatewayConfig(model_map={"claude-x": "policy"}),
    )
    body = {"model": "claude-x", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    plan = gateway.plan(_request("coder"), MESSAGES_API, None, body)
    assert plan.model == "policy" and plan.overrides == {"model": "policy"}
    assert plan.agent_name == "coder" and plan.call_id.startswith("call-")
    assert plan.endpoint == "messages"
    assert (plan.translation is not None) is token_level
    assert plan.engine_endpoint == ("chat/completions" if token_level else "messages")
    assert plan.seed is None and plan.session_id is None and plan.arm is None
    with pytest.raises(AttributeError):
        plan.model = "other"  # type: ignore[misc]  # a value: nothing changes it in flight


async def test_a_plan_changes_nothing_the_agent_asked_for_when_nothing_maps_it(
    store: MemoryStore,
) -> None:
    gateway = Gateway(store, [Upstream(base_url="http://127.0.0.1:9/v1")])
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    first = gateway.plan(_request(), CHAT_API, None, body)
    second = gateway.plan(_request(), CHAT_API, None, body)
    assert first.overrides == {} and first.translation is None and first.agent_name is None
    assert first.engine_endpoint == "chat/completions"
    assert first.call_id != second.call_id
