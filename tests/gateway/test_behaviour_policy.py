"""Training rollouts sample the behaviour policy: what the gateway sends, forces and refuses.

The scripted upstream keeps every body it received, so each test checks exactly what an engine
(vLLM, which honours every one of these fields) would have been asked. An LLM resource whose
``behaviour_modes`` holds ``train`` is what ``fulmen train`` publishes for a GRPO stage.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from fulmen.debugging.replay import expected_requests
from fulmen.types import LLMResource, Mode, Resources, ResourcesCreate
from fulmen.types.behaviour import forced_fields
from tests.gateway.conftest import Running, new_attempt

MESSAGES = [{"role": "user", "content": "hi"}]
NEUTRAL = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
    "logit_bias": None,
}
# What an agent may send: each reshapes the distribution on vLLM (top_k also on the built-in).
AGENT_SAMPLING: dict[str, Any] = {
    "temperature": 0.3,
    "top_p": 0.5,
    "top_k": 20,
    "min_p": 0.1,
    "presence_penalty": 0.5,
    "frequency_penalty": 0.5,
    "repetition_penalty": 1.3,
    "logit_bias": {"104": 5.0},
}


def behaviour_llm(**extra: Any) -> LLMResource:
    return LLMResource(
        base_url="http://unused/v1",
        model="tiny-model",
        sampling={"train": {"temperature": 1.0, "top_p": 1.0}, "val": {"temperature": 0.0}},
        behaviour_modes=(Mode.TRAIN,),
        **extra,
    )


async def publish(store: Any, llm: LLMResource | None = None) -> Resources:
    return await store.add_resources(ResourcesCreate(resources={"llm": llm or behaviour_llm()}))


async def attempt(gw: Running, mode: Mode = Mode.TRAIN, llm: LLMResource | None = None) -> str:
    """Start a rollout of ``mode`` under published resources; return its base URL."""
    version = (await publish(gw.store, llm)).version
    rollout_id, attempt_id = await new_attempt(gw.store, mode=mode, resources_version=version)
    return gw.base_url(rollout_id, attempt_id)


async def post(url: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(url, json=body)


async def test_training_calls_reach_the_engine_with_every_distribution_field_neutral(
    gw: Running, caplog: pytest.LogCaptureFixture
) -> None:
    base = await attempt(gw)
    body = {"model": "tiny-model", "messages": MESSAGES, **AGENT_SAMPLING}
    with caplog.at_level(logging.WARNING, logger="fulmen.gateway.proxy"):
        for _ in range(2):
            assert (await post(f"{base}/chat/completions", body)).status_code == 200
    assert len(gw.script.requests) == 2
    for sent in gw.script.requests:
        assert {k: sent[k] for k in NEUTRAL} == NEUTRAL
    # One warning per rollout names what the agent asked for and did not get.
    (warning,) = [r.getMessage() for r in caplog.records if "behaviour policy" in r.getMessage()]
    assert "top_k=20" in warning and "logit_bias={'104': 5.0}" in warning


async def test_training_calls_send_explicit_neutral_values_the_agent_left_out(
    gw: Running,
) -> None:
    """vLLM fills an unset field from the model's generation_config (Gemma 3: top_k 64)."""
    base = await attempt(gw)
    r = await post(f"{base}/chat/completions", {"model": "tiny-model", "messages": MESSAGES})
    assert r.status_code == 200
    (sent,) = gw.script.requests
    assert {k: sent.get(k, "unset") for k in NEUTRAL} == NEUTRAL


async def test_the_record_keeps_the_agents_request_as_sent(gw: Running) -> None:
    version = (await publish(gw.store)).version
    rollout_id, attempt_id = await new_attempt(gw.store, resources_version=version)
    body = {"model": "tiny-model", "messages": MESSAGES, "top_k": 20}
    await post(f"{gw.base_url(rollout_id, attempt_id)}/chat/completions", body)
    (call,) = await gw.calls(rollout_id)
    assert call.request["top_k"] == 20 and call.is_token_level
    assert gw.script.requests[0]["top_k"] == -1


async def test_validation_calls_keep_the_agents_sampling_fields(gw: Running) -> None:
    base = await attempt(gw, Mode.VAL)
    body = {"model": "tiny-model", "messages": MESSAGES, "top_k": 20, "min_p": 0.1}
    r = await post(f"{base}/chat/completions", {**body, "response_format": {"type": "json_object"}})
    assert r.status_code == 200
    (sent,) = gw.script.requests
    assert (sent["top_k"], sent["min_p"], sent["temperature"]) == (20, 0.1, 0.0)
    assert sent["response_format"] == {"type": "json_object"}
    assert "repetition_penalty" not in sent and "logit_bias" not in sent


async def test_completions_are_forced_too(gw: Running) -> None:
    base = await attempt(gw)
    r = await post(f"{base}/completions", {"model": "tiny-model", "prompt": "x", "top_k": 5})
    assert r.status_code == 200
    (sent,) = gw.script.requests
    assert {k: sent[k] for k in NEUTRAL} == NEUTRAL


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("response_format", {"type": "json_object"}),
        ("response_format", {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}}),
        ("tool_choice", "required"),
        ("tool_choice", {"type": "function", "function": {"name": "f"}}),
        ("structured_outputs", {"choice": ["yes", "no"]}),
        ("guided_json", {"type": "object"}),
        ("guided_regex", "[0-9]+"),
        ("guided_choice", ["yes", "no"]),
        ("guided_grammar", "root ::= 'a'"),
        ("allowed_token_ids", [104, 105]),
        ("bad_words", ["no"]),
        ("min_tokens", 4),
        ("logits_processors", ["my.module:Processor"]),
        ("use_beam_search", True),
    ],
)
async def test_training_calls_that_constrain_decoding_are_refused_naming_the_field(
    gw: Running, field: str, value: Any
) -> None:
    version = (await publish(gw.store)).version
    rollout_id, attempt_id = await new_attempt(gw.store, resources_version=version)
    body = {"model": "tiny-model", "messages": MESSAGES, field: value}
    r = await post(f"{gw.base_url(rollout_id, attempt_id)}/chat/completions", body)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == field and error["message"].startswith(f"{field} constrains decoding")
    assert gw.script.requests == []  # the engine never saw it
    (call,) = await gw.calls(rollout_id)  # recorded, with the error the agent got
    assert call.error is not None and call.error["param"] == field


async def test_neutral_values_of_constraint_fields_pass(gw: Running) -> None:
    """Frameworks send defaults: response_format text, tool_choice auto, min_tokens 0."""
    base = await attempt(gw)
    body = {
        "model": "tiny-model",
        "messages": MESSAGES,
        "response_format": {"type": "text"},
        "tool_choice": "auto",
        "min_tokens": 0,
        "bad_words": [],
        "guided_json": None,
        "logit_bias": {},
    }
    assert (await post(f"{base}/chat/completions", body)).status_code == 200


async def test_responses_calls_are_forced_and_refused_by_the_same_rule(gw: Running) -> None:
    base = await attempt(gw)
    body = {"model": "tiny-model", "input": "hi", "temperature": 0.2, "top_p": 0.3, "top_k": 7}
    r = await post(f"{base}/responses", body)
    assert r.status_code == 200 and r.json()["object"] == "response"
    (sent,) = gw.script.requests  # the chat completion the engine got
    assert {k: sent[k] for k in NEUTRAL} == NEUTRAL
    schema = {"type": "json_schema", "name": "a", "schema": {"type": "object"}}
    r = await post(
        f"{base}/responses", {"model": "tiny-model", "input": "hi", "text": {"format": schema}}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "text.format"
    r = await post(
        f"{base}/responses", {"model": "tiny-model", "input": "hi", "tool_choice": "required"}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
    plain = {"model": "tiny-model", "input": "hi", "text": {"format": {"type": "text"}}}
    assert (await post(f"{base}/responses", plain)).status_code == 200
    assert len(gw.script.requests) == 2


async def test_messages_calls_are_forced_and_refused_by_the_same_rule(gw: Running) -> None:
    base = await attempt(gw)
    url = f"{base}/messages"
    ask = {"model": "tiny-model", "max_tokens": 8, "messages": MESSAGES}
    r = await post(url, {**ask, "temperature": 0.2, "top_p": 0.3, "top_k": 7})
    assert r.status_code == 200 and r.json()["type"] == "message"
    (sent,) = gw.script.requests  # the chat completion the engine got
    assert {k: sent[k] for k in NEUTRAL} == NEUTRAL
    tool = {"name": "f", "input_schema": {"type": "object"}}
    for choice in ({"type": "any"}, {"type": "tool", "name": "f"}):
        r = await post(url, {**ask, "tools": [tool], "tool_choice": choice})
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        assert "tool_choice" in r.json()["error"]["message"]
    r = await post(url, {**ask, "tools": [tool], "tool_choice": {"type": "auto"}})
    assert r.status_code == 200 and len(gw.script.requests) == 2


async def test_training_rollouts_of_resources_without_behaviour_modes_keep_their_sampling(
    gw: Running,
) -> None:
    """Only an LLM resource that says its train mode samples the behaviour policy is forced."""
    plain = LLMResource(
        base_url="http://unused/v1", model="tiny-model", sampling={"train": {"temperature": 1.0}}
    )
    base = await attempt(gw, Mode.TRAIN, plain)
    body = {"model": "tiny-model", "messages": MESSAGES, "top_k": 20, "guided_regex": "a"}
    assert (await post(f"{base}/chat/completions", body)).status_code == 200
    (sent,) = gw.script.requests
    assert sent["top_k"] == 20 and "min_p" not in sent


async def test_replay_expects_the_forced_fields(gw: Running) -> None:
    """``fulmen replay`` compares requests as the engine got them: forced fields included."""
    resources = await publish(gw.store)
    rollout_id, attempt_id = await new_attempt(gw.store, resources_version=resources.version)
    body = {"model": "tiny-model", "messages": MESSAGES, "top_k": 20}
    await post(f"{gw.base_url(rollout_id, attempt_id)}/chat/completions", body)
    calls = await gw.calls(rollout_id)
    ((endpoint, expected),) = expected_requests(calls, resources, "train")
    assert endpoint == "chat/completions"
    assert {k: expected[k] for k in forced_fields()} == forced_fields()
    assert {k: v for k, v in expected.items() if k != "stream_options"} == gw.script.requests[0]


async def test_an_agents_sampling_replaced_by_the_runs_is_said_once_per_mode_and_field(
    gw: Running, caplog: pytest.LogCaptureFixture
) -> None:
    """A validation call at the agent's temperature 0.7 goes at the run's 0.0, said once."""
    base = await attempt(gw, mode=Mode.VAL)
    body = {"model": "tiny-model", "messages": MESSAGES, "temperature": 0.7}
    same = {"model": "tiny-model", "messages": MESSAGES, "temperature": 0.0}
    with caplog.at_level(logging.WARNING, logger="fulmen.gateway.proxy"):
        for sent in (body, body, same):
            assert (await post(f"{base}/chat/completions", sent)).status_code == 200
    assert [r["temperature"] for r in gw.script.requests] == [0.0, 0.0, 0.0]
    (warning,) = [r.getMessage() for r in caplog.records if "sampling settings" in r.getMessage()]
    assert "(val): the agent's temperature=0.7 was sent as 0.0" in warning
    assert "rollouts.val_sampling" in warning
