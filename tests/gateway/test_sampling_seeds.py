"""Seeded rollouts: the seed each call reaches the engine with, and when none is sent.

A rollout the trainer enqueues carries a ``sampling_seed`` (``fulmen.types.sampling_seed``);
the scripted upstream keeps every body it received, so each test checks the exact seed an
engine would have sampled with.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from fulmen.gateway import GatewayConfig
from fulmen.types import Mode, RolloutCreate
from fulmen.types.sampling_seed import SAMPLING_SEED_KEY, call_seed, request_digest
from tests.gateway.conftest import Running, SpyStore, add_sampling, gateway_over
from tests.gateway.scripted_upstream import Script

MESSAGES = [{"role": "user", "content": "hi"}]
BODY: dict[str, Any] = {"model": "tiny-model", "messages": MESSAGES}


async def seeded_attempt(gw: Running, metadata: dict[str, Any]) -> str:
    """Enqueue and claim one training rollout with ``metadata``; return its base URL."""
    version = await add_sampling(gw.store, {"train": {"temperature": 1.0}})
    (rollout,) = await gw.store.enqueue(
        [RolloutCreate(input={}, mode=Mode.TRAIN, resources_version=version, metadata=metadata)]
    )
    claims = await gw.store.claim("worker-1", limit=100)
    (claim,) = [c for c in claims if c.rollout.rollout_id == rollout.rollout_id]
    return gw.base_url(rollout.rollout_id, claim.attempt.attempt_id)


async def post(url: str, body: dict[str, Any]) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        r = await client.post(f"{url}/chat/completions", json=body)
    assert r.status_code == 200, r.text


async def test_each_call_gets_the_seed_derived_from_its_rollout_and_request(gw: Running) -> None:
    base = await seeded_attempt(gw, {SAMPLING_SEED_KEY: 1234})
    other = {**BODY, "messages": [{"role": "user", "content": "ho"}]}
    for body in (BODY, other, BODY):
        await post(base, body)
    sent = [r["seed"] for r in gw.script.requests]
    digest, other_digest = request_digest(BODY), request_digest(other)
    assert sent == [
        call_seed(1234, attempt=1, digest=digest, occurrence=0),
        call_seed(1234, attempt=1, digest=other_digest, occurrence=0),
        # The same request again (an agent retrying) is sampled anew.
        call_seed(1234, attempt=1, digest=digest, occurrence=1),
    ]
    assert len(set(sent)) == 3


async def test_the_seeds_do_not_depend_on_the_gateway_or_the_order_of_rollouts(
    store: SpyStore, script: Script, config: GatewayConfig
) -> None:
    """Two gateways (two runs) send the same seeds; rollouts of a group get different ones."""
    seeds: list[list[int]] = []
    for order in ((1, 2), (2, 1)):
        async with gateway_over(store, script, config) as gw:
            script.requests.clear()
            urls = {s: await seeded_attempt(gw, {SAMPLING_SEED_KEY: s}) for s in order}
            for s in order:
                await post(urls[s], BODY)
            by_rollout = dict(zip(order, (r["seed"] for r in script.requests), strict=True))
            seeds.append([by_rollout[1], by_rollout[2]])
    assert seeds[0] == seeds[1]
    assert seeds[0][0] != seeds[0][1]


async def test_the_agents_own_seed_is_replaced_in_a_seeded_rollout(gw: Running) -> None:
    """A fixed agent seed would give every member of a group the same sample."""
    base = await seeded_attempt(gw, {SAMPLING_SEED_KEY: 5})
    body = {**BODY, "seed": 42}
    await post(base, body)
    (sent,) = gw.script.requests
    assert sent["seed"] == call_seed(5, attempt=1, digest=request_digest(body), occurrence=0)
    (call,) = await gw.calls(next(iter(await _rollout_ids(gw))))
    assert call.request["seed"] == 42  # the record keeps the agent's request as sent


@pytest.mark.parametrize("metadata", [{}, {SAMPLING_SEED_KEY: "7"}, {SAMPLING_SEED_KEY: True}])
async def test_an_unseeded_rollout_sends_only_the_agents_seed(
    gw: Running, metadata: dict[str, Any]
) -> None:
    base = await seeded_attempt(gw, metadata)
    await post(base, BODY)
    await post(base, {**BODY, "seed": 42})
    assert [r.get("seed") for r in gw.script.requests] == [None, 42]


async def test_a_hosted_api_gets_no_seed(
    store: SpyStore, script: Script, config: GatewayConfig
) -> None:
    async with gateway_over(store, script, config, is_token_level=False) as gw:
        base = await seeded_attempt(gw, {SAMPLING_SEED_KEY: 1234})
        await post(base, BODY)
    (sent,) = script.requests
    assert "seed" not in sent


def _after_a_tool_call(call_id: str, answered: str | None = None) -> dict[str, Any]:
    """A second turn: the engine's tool call (its made-up ``call_id``) and the tool's answer."""
    call = {"id": call_id, "type": "function", "function": {"name": "calc", "arguments": "{}"}}
    return {
        **BODY,
        "messages": [
            *MESSAGES,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": answered or call_id, "content": "4"},
        ],
    }


async def test_a_second_turn_is_seeded_alike_whatever_id_the_engine_gave_its_tool_call(
    store: SpyStore, script: Script, config: GatewayConfig
) -> None:
    """Two runs of one seed: the engine names the tool call at random, the seed stays."""
    seeds: list[int] = []
    for call_id in ("call_8f2a", "call_01be"):
        async with gateway_over(store, script, config) as gw:
            script.requests.clear()
            base = await seeded_attempt(gw, {SAMPLING_SEED_KEY: 77})
            await post(base, BODY)
            await post(base, _after_a_tool_call(call_id))
            seeds.append(script.requests[1]["seed"])
    assert seeds[0] == seeds[1]
    # Which id answers which call still counts: a tool answer to another call is another request.
    assert request_digest(_after_a_tool_call("a")) != request_digest(
        _after_a_tool_call("a", answered="b")
    )


def test_ids_of_every_wire_api_are_digested_by_their_order() -> None:
    messages_api = [  # Anthropic Messages: a tool_use block and the tool_result that answers it
        {"role": "assistant", "content": [{"type": "tool_use", "id": "{}", "name": "calc"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "{}"}]},
    ]
    responses_api = [  # OpenAI Responses: a function call item and its output
        {"type": "function_call", "id": "fc_{}", "call_id": "call_{}", "name": "calc"},
        {"type": "function_call_output", "call_id": "call_{}", "output": "4"},
    ]

    def body(items: list[dict[str, Any]], name: str) -> dict[str, Any]:
        filled = [
            {k: v.format(name) if isinstance(v, str) and "{}" in v else v for k, v in i.items()}
            for i in items
        ]
        return {"model": "m", "input": filled, "previous_response_id": f"resp_{name}"}

    for items in (messages_api, responses_api):
        assert request_digest(body(items, "x1")) == request_digest(body(items, "y2"))
    # Keys in another order, the same request.
    swapped = {"previous_response_id": "resp_z", "input": body(responses_api, "z")["input"]}
    assert request_digest({**swapped, "model": "m"}) == request_digest(body(responses_api, "q"))


@pytest.mark.parametrize("metadata", [{SAMPLING_SEED_KEY: 5}, {}])
async def test_a_body_nested_too_deep_to_record_is_refused(
    gw: Running, metadata: dict[str, Any]
) -> None:
    """JSON reads 1,024 levels deep but writes 254: such a body once failed as a 500."""
    base = await seeded_attempt(gw, metadata)
    deep: Any = "x"
    for _ in range(300):
        deep = [deep]
    async with httpx.AsyncClient(timeout=30) as client:
        r = await client.post(f"{base}/chat/completions", json={**BODY, "user": deep})
    assert r.status_code == 400
    assert "more than 64 levels deep" in r.json()["error"]["message"]
    assert gw.script.requests == []  # nothing reached the engine
    await post(base, BODY)  # the gateway goes on serving


async def _rollout_ids(gw: Running) -> list[str]:
    from fulmen.types import RolloutQuery

    return [r.rollout_id for r in (await gw.store.query_rollouts(RolloutQuery())).items]
