"""What the gateway asks the engine, shows the agent and records, case by case."""

from __future__ import annotations

import asyncio

import httpx
import openai

from fulmen.gateway import GatewayConfig
from fulmen.types import LLMResource, Mode, ResourcesCreate
from fulmen.types.records import AGENT_NAME_HEADER
from tests.gateway.conftest import Running, SpyStore, add_sampling, gateway_over, new_attempt
from tests.gateway.scripted_upstream import Reply, Script, encode, render_chat

MESSAGES = [{"role": "user", "content": "hi"}]


async def test_untracked_calls_pass_through_and_are_recorded_without_rollout(
    gw: Running,
) -> None:
    client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="x")
    async with client:
        out = await client.chat.completions.create(model="tiny-model", messages=MESSAGES)
    assert out.choices[0].message.content == "ok"
    await gw.gateway.flush()
    (call,) = gw.store.added
    assert call.rollout_id is None and call.attempt_id is None
    assert call.is_token_level
    assert call.prompt_token_ids == encode(render_chat(MESSAGES))
    assert (await gw.store.stats()).llm_calls == 1


async def test_untracked_calls_are_not_recorded_when_disabled(
    store: SpyStore, config: GatewayConfig
) -> None:
    off = config.model_copy(update={"record_untracked": False})
    async with gateway_over(store, Script(), off) as gw:
        async with httpx.AsyncClient() as client:
            r = await client.post(
                f"{gw.url}/v1/chat/completions", json={"model": "m", "messages": MESSAGES}
            )
        assert r.status_code == 200
        await gw.gateway.flush()
    assert store.added == []


async def test_fields_the_agent_asked_for_are_kept(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    async with httpx.AsyncClient() as client:
        r = await client.post(
            f"{gw.base_url(rollout_id, attempt_id)}/chat/completions",
            json={
                "model": "tiny-model",
                "messages": MESSAGES,
                "logprobs": True,
                "return_token_ids": True,
            },
        )
    body = r.json()
    assert body["prompt_token_ids"] == encode(render_chat(MESSAGES))
    assert body["choices"][0]["token_ids"] == encode("ok")
    assert len(body["choices"][0]["logprobs"]["content"]) == 2
    assert r.headers["x-fulmen-call-id"].startswith("call-")
    (call,) = await gw.calls(rollout_id)
    assert call.call_id == r.headers["x-fulmen-call-id"]


async def test_added_fields_are_stripped_from_what_the_agent_sees(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    async with httpx.AsyncClient() as client:
        r = await client.post(
            f"{gw.base_url(rollout_id, attempt_id)}/chat/completions",
            json={"model": "tiny-model", "messages": MESSAGES},
        )
    body = r.json()
    assert "prompt_token_ids" not in body
    assert "token_ids" not in body["choices"][0]
    assert body["choices"][0]["logprobs"] is None
    (call,) = await gw.calls(rollout_id)
    # The record keeps the reply the agent got; the ids and logprobs sit in the typed fields.
    assert call.response == body
    assert call.prompt_token_ids == encode(render_chat(MESSAGES))
    assert call.choices[0].token_ids == encode("ok") and len(call.choices[0].logprobs or []) == 2


async def test_streamed_usage_shown_only_when_asked(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    client = openai.AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
    async with client:
        stream = await client.chat.completions.create(
            model="tiny-model",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
            logprobs=True,
        )
        chunks = [c async for c in stream]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert any(c.choices and c.choices[0].logprobs for c in chunks)


async def test_hosted_upstream_is_recorded_as_text_only(
    store: SpyStore, config: GatewayConfig
) -> None:
    script = Script(mode="hosted")
    async with gateway_over(store, script, config, is_token_level=False) as gw:
        rollout_id, attempt_id = await new_attempt(store)
        client = openai.AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
        async with client:
            out = await client.chat.completions.create(model="gpt-x", messages=MESSAGES)
        assert out.choices[0].message.content == "ok"
        (call,) = await gw.calls(rollout_id)
    assert "return_token_ids" not in script.requests[-1]
    assert "logprobs" not in script.requests[-1]
    assert call.is_token_level is False
    assert call.prompt_token_ids is None
    assert call.choices[0].text == "ok" and call.choices[0].token_ids is None


async def test_upstream_rejecting_token_ids_falls_back_to_text(
    store: SpyStore, config: GatewayConfig
) -> None:
    script = Script(mode="hosted_strict")
    async with gateway_over(store, script, config) as gw:
        rollout_id, attempt_id = await new_attempt(store)
        client = openai.AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
        async with client:
            for _ in range(2):
                out = await client.chat.completions.create(model="gpt-x", messages=MESSAGES)
                assert out.choices[0].message.content == "ok"
        calls = await gw.calls(rollout_id)
    # First call: rejected once, resent as text; second call goes as text straight away.
    assert ["return_token_ids" in r for r in script.requests] == [True, False, False]
    assert len(calls) == 2
    assert all(not c.is_token_level and c.error is None for c in calls)


async def test_sampling_overrides_follow_the_rollout_mode(gw: Running) -> None:
    version = await add_sampling(
        gw.store, {"default": {"temperature": 1.0, "top_p": 0.9}, "val": {"temperature": 0.0}}
    )
    train = await new_attempt(gw.store, mode=Mode.TRAIN, resources_version=version)
    val = await new_attempt(gw.store, mode=Mode.VAL, resources_version=version)
    for rollout_id, attempt_id in (train, val):
        client = openai.AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
        async with client:
            await client.chat.completions.create(
                model="tiny-model", messages=MESSAGES, temperature=0.5
            )
    train_sent, val_sent = gw.script.requests
    assert (train_sent["temperature"], train_sent["top_p"]) == (1.0, 0.9)
    assert (val_sent["temperature"], val_sent["top_p"]) == (0.0, 0.9)
    (call,) = await gw.calls(val[0])
    assert call.request["temperature"] == 0.5  # the agent's request is recorded as sent


async def test_untracked_calls_get_no_overrides(gw: Running) -> None:
    await add_sampling(gw.store, {"default": {"temperature": 1.0}})
    async with httpx.AsyncClient() as client:
        await client.post(
            f"{gw.url}/v1/chat/completions",
            json={"model": "tiny-model", "messages": MESSAGES, "temperature": 0.3},
        )
    assert gw.script.requests[-1]["temperature"] == 0.3


async def test_policy_version_from_header_when_body_has_none(
    store: SpyStore, config: GatewayConfig
) -> None:
    script = Script()
    async with gateway_over(store, script, config) as gw:
        rollout_id, attempt_id = await new_attempt(store)
        # A body field wins; leave it out to see the header being read.
        script.policy_version = "from-header"
        script.is_policy_version_in_body = False
        async with httpx.AsyncClient() as client:
            r = await client.post(
                f"{gw.base_url(rollout_id, attempt_id)}/completions",
                json={"model": "tiny-model", "prompt": "x"},
            )
        assert r.status_code == 200
        (call,) = await gw.calls(rollout_id)
    assert call.policy_version == "from-header"


async def test_max_tokens_cut_is_recorded(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    gw.script.replies.append(Reply(content="a long answer"))
    client = openai.AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
    async with client:
        out = await client.chat.completions.create(
            model="tiny-model", messages=MESSAGES, max_tokens=3
        )
    assert out.choices[0].finish_reason == "length"
    (call,) = await gw.calls(rollout_id)
    assert call.choices[0].token_ids == encode("a l")
    assert call.choices[0].finish_reason == "length"


async def test_agent_hanging_up_mid_stream_still_records_and_frees_the_engine(
    store: SpyStore, config: GatewayConfig
) -> None:
    script = Script(chunk_delay_s=0.05, stream_chunk_chars=1)
    script.replies.append(Reply(content="x" * 200))
    async with gateway_over(store, script, config) as gw:
        rollout_id, attempt_id = await new_attempt(store)
        url = f"{gw.base_url(rollout_id, attempt_id)}/chat/completions"
        async with httpx.AsyncClient() as client:
            body = {"model": "tiny-model", "messages": MESSAGES, "stream": True}
            async with client.stream("POST", url, json=body) as r:
                async for _ in r.aiter_bytes():
                    break  # the agent hangs up after the first bytes
        for _ in range(100):
            if gw.gateway.pool.in_flight(gw.gateway.pool.upstreams[0]) == 0:
                break
            await asyncio.sleep(0.05)
        assert gw.gateway.pool.in_flight(gw.gateway.pool.upstreams[0]) == 0
        (call,) = await gw.calls(rollout_id)
    assert call.is_stream
    assert 0 < len(call.choices[0].token_ids or []) < 200  # what arrived before the hang-up


async def test_agent_models_route_each_agents_calls_to_its_model(gw: Running) -> None:
    """``LLMResource.agent_models``: the agent's ``x-fulmen-agent`` picks the served model."""
    resources = await gw.store.add_resources(
        ResourcesCreate(
            resources={
                "llm": LLMResource(
                    base_url="http://unused/v1",
                    model="tiny-model",
                    agent_models={"write_*": "policy-writer-3", "rewrite_query": "policy-rw-2"},
                )
            }
        )
    )
    rollout_id, attempt_id = await new_attempt(gw.store, resources_version=resources.version)
    base_url = gw.base_url(rollout_id, attempt_id)
    async with httpx.AsyncClient() as client:
        for agent in ("write_query", "rewrite_query", "check_query", None):
            headers = {AGENT_NAME_HEADER: agent} if agent else {}
            r = await client.post(
                f"{base_url}/chat/completions",
                json={"model": "tiny-model", "messages": MESSAGES},
                headers=headers,
            )
            assert r.status_code == 200, r.text
        r = await client.post(  # the Responses API is routed the same way
            f"{base_url}/responses",
            json={"model": "tiny-model", "input": "hi"},
            headers={AGENT_NAME_HEADER: "write_query"},
        )
        assert r.status_code == 200, r.text
    sent = [body["model"] for body in gw.script.requests]
    assert sent == ["policy-writer-3", "policy-rw-2", "tiny-model", "tiny-model", "policy-writer-3"]
    calls = await gw.calls(rollout_id)
    assert [c.agent_name for c in calls] == [
        "write_query",
        "rewrite_query",
        "check_query",
        None,
        "write_query",
    ]
    assert {c.request["model"] for c in calls} == {"tiny-model"}  # recorded as the agent sent it
