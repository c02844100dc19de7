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


async def _rollout_ids(gw: Running) -> list[str]:
    from fulmen.types import RolloutQuery

    return [r.rollout_id for r in (await gw.store.query_rollouts(RolloutQuery())).items]
