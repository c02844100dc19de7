"""Pure parts: SSE splitting, stream accumulation, request preparation, record building."""

from __future__ import annotations

import time
from dataclasses import replace

import orjson

from fulmen.gateway.capture import Asked, Exchange, agent_chunk, build_call, prepare_request
from fulmen.gateway.streaming import SSEDecoder, StreamAccumulator, event_data
from fulmen.wire.openai import CHAT, COMPLETIONS


def test_sse_decoder_handles_split_events_and_crlf() -> None:
    stream = b'data: {"a": 1}\r\n\r\ndata: {"b":\ndata: 2}\n\ndata: [DONE]\n\n'
    decoder = SSEDecoder()
    events = []
    for i in range(len(stream)):  # one byte at a time: every boundary is split
        events += decoder.feed(stream[i : i + 1])
    assert [event_data(e) for e in events] == [b'{"a": 1}', b'{"b":\n2}', b"[DONE]"]
    assert decoder.tail() == b""
    assert event_data(b": comment") is None


def test_accumulator_rebuilds_a_chat_reply() -> None:
    acc = StreamAccumulator(CHAT)
    acc.add(
        {
            "id": "x",
            "model": "m",
            "prompt_token_ids": [1, 2],
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
        }
    )
    acc.add(
        {
            "id": "x",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "hi"},
                    "token_ids": [7, 8],
                    "logprobs": {"content": [{"logprob": -0.5}, {"logprob": -0.25}]},
                }
            ],
        }
    )
    acc.add(
        {
            "id": "x",
            "choices": [
                {
                    "index": 0,
                    "delta": {},
                    "token_ids": [9],
                    "logprobs": {"content": [{"logprob": -1.0}]},
                    "finish_reason": "stop",
                }
            ],
        }
    )
    acc.add({"id": "x", "choices": [], "usage": {"completion_tokens": 3}})
    response = acc.response()
    assert response["prompt_token_ids"] == [1, 2]
    assert response["usage"] == {"completion_tokens": 3}
    (choice,) = response["choices"]
    assert choice["message"] == {"role": "assistant", "content": "hi"}
    assert choice["token_ids"] == [7, 8, 9]
    call = build_call(exchange(response, CHAT))
    assert call.is_token_level
    assert call.choices[0].logprobs == [-0.5, -0.25, -1.0]


def exchange(response: dict, endpoint: str, **kw) -> Exchange:
    return Exchange(
        call_id="c1",
        rollout_id=None,
        attempt_id=None,
        endpoint=endpoint,
        request={},
        response=response,
        upstream=None,
        is_stream=False,
        started_at=time.time(),
        latency_s=0.1,
        **kw,
    )


def test_mismatched_ids_and_logprobs_are_not_token_level() -> None:
    response = {
        "prompt_token_ids": [1],
        "choices": [
            {
                "index": 0,
                "message": {"content": "a"},
                "token_ids": [5, 6],
                "logprobs": {"content": [{"logprob": -1.0}]},
            }
        ],
    }
    call = build_call(exchange(response, CHAT))
    assert not call.is_token_level
    assert call.choices[0].token_ids == [5, 6]


def test_batched_completion_prompts_are_not_one_record_prompt() -> None:
    response = {
        "choices": [
            {
                "index": 0,
                "text": "a",
                "prompt_token_ids": [1],
                "token_ids": [2],
                "logprobs": {"token_logprobs": [-1.0]},
            },
            {
                "index": 1,
                "text": "b",
                "prompt_token_ids": [3],
                "token_ids": [4],
                "logprobs": {"token_logprobs": [-1.0]},
            },
        ]
    }
    call = build_call(exchange(response, COMPLETIONS))
    assert call.prompt_token_ids is None and not call.is_token_level


def test_policy_version_body_wins_over_header() -> None:
    call = build_call(exchange({"policy_version": 3}, CHAT, policy_version="h"))
    assert call.policy_version == "3"
    assert build_call(exchange({}, CHAT, policy_version="h")).policy_version == "h"


def test_a_model_name_with_a_nul_still_makes_a_record() -> None:
    # An agent may send any string; the record must still be storable (no NUL in a column).
    odd = replace(exchange({"model": "m\x00"}, CHAT), request={"model": "a\x00"})
    call = build_call(odd)
    assert call.model is None and call.request == {"model": "a\x00"}
    assert build_call(exchange({"model": "tiny"}, CHAT)).model == "tiny"


def test_prepare_request_keeps_agent_logprob_settings() -> None:
    body, asked = prepare_request(
        {"prompt": "x", "logprobs": 5}, endpoint=COMPLETIONS, overrides={}, is_token_level=True
    )
    assert body["logprobs"] == 5 and body["return_token_ids"] is True
    assert asked == Asked(token_ids=False, logprobs=True, usage=False)
    body, asked = prepare_request(
        {"messages": [], "stream": True},
        endpoint=CHAT,
        overrides={"temperature": 0},
        is_token_level=False,
    )
    assert body == {
        "messages": [],
        "stream": True,
        "temperature": 0,
        "stream_options": {"include_usage": True},
    }
    assert not asked.usage


def test_the_configured_token_cap_replaces_max_completion_tokens_too() -> None:
    # The built-in engine and vLLM read max_completion_tokens before max_tokens: an agent that
    # sends it (LangChain's ChatOpenAI does) would escape rollouts.*_sampling.max_tokens.
    body, _ = prepare_request(
        {"messages": [], "max_completion_tokens": 96},
        endpoint=CHAT,
        overrides={"max_tokens": 64},
        is_token_level=False,
    )
    assert body["max_tokens"] == 64 and body["max_completion_tokens"] == 64
    body, _ = prepare_request(
        {"messages": [], "max_completion_tokens": 96},
        endpoint=CHAT,
        overrides={},
        is_token_level=False,
    )
    assert body == {"messages": [], "max_completion_tokens": 96}
    body, _ = prepare_request(
        {"messages": []}, endpoint=CHAT, overrides={"max_tokens": 64}, is_token_level=False
    )
    assert "max_completion_tokens" not in body


def test_usage_chunk_dropped_only_when_not_asked() -> None:
    usage_chunk = {"choices": [], "usage": {"total_tokens": 3}}
    assert agent_chunk(usage_chunk, Asked()) is None
    assert agent_chunk(usage_chunk, Asked(usage=True)) is not None
    chunk = {"choices": [{"index": 0, "delta": {}, "token_ids": [1], "logprobs": {"c": 1}}]}
    stripped = agent_chunk(chunk, Asked())
    assert stripped == {"choices": [{"index": 0, "delta": {}, "logprobs": None}]}
    assert orjson.dumps(chunk)  # the original is left untouched for the record
    assert chunk["choices"][0]["token_ids"] == [1]
